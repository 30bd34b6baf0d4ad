#!/bin/sh
# abi.sh — libkvtier exports exactly its public API: the symbols the shared
# library defines are those src/client/libkvtier.map lists, and every one of
# them is a function of include/kvtier/*.h (nothing internal leaks, nothing
# public is hidden).
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
LIB=${KVT_BUILDDIR:-.}/.libs/libkvtier.so
check "the shared library is built" test -f "$LIB"
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TWDBR]$/ {print $3}' | sed 's/@.*//' | sort -u >"$TMP/exported"
sed -n 's/^[[:space:]]*\(kvt_[a-z0-9_]*\);$/\1/p' "$SRC/src/client/libkvtier.map" | sort -u >"$TMP/mapped"
diff=$(comm -3 "$TMP/exported" "$TMP/mapped" | tr -d '\t' | tr '\n' ' ')
check "exported symbols are the map's${diff:+ (differ: $diff)}" test -z "$diff"
while read -r sym; do
	check "$sym is declared KVT_API in include/kvtier/" \
		grep -q "^KVT_API .*[ *]$sym(" "$SRC"/include/kvtier/*.h
done <"$TMP/mapped"
# And every KVT_API declaration is in the map: nothing public is left out.
grep -ho '^KVT_API [^(]*(' "$SRC"/include/kvtier/*.h | grep -o 'kvt_[a-z0-9_]*($' | tr -d '(' |
	sort -u >"$TMP/marked"
diff=$(comm -3 "$TMP/marked" "$TMP/mapped" | tr -d '\t' | tr '\n' ' ')
check "the KVT_API declarations are the map's${diff:+ (differ: $diff)}" test -z "$diff"
finish
