#!/bin/sh
# docs.sh — every flag kvtierd --help lists is documented in man/kvtierd.8 and
# docs/configuration.md, and every documented flag exists.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
MAN=$SRC/man/kvtierd.8
DOC=$SRC/docs/configuration.md

"$KVTIERD" --help | grep -o -- '--[a-z0-9-]*' | sort -u >"$TMP/help.flags"
check "--help lists flags" test -s "$TMP/help.flags"
while read -r flag; do
	# groff writes a dash as \- ; accept both spellings.
	manflag=$(printf '%s' "$flag" | sed 's/-/\\\\-/g')
	if grep -q -- "$manflag" "$MAN" || grep -q -- "$flag" "$MAN"; then
		ok "man page documents $flag"
	else
		not_ok "man page documents $flag"
	fi
	check "docs/configuration.md documents $flag" grep -q -- "\`$flag" "$DOC"
done <"$TMP/help.flags"

# And nothing documented that --help does not know.
grep -o -- '`--[a-z0-9-]*' "$DOC" | tr -d '`' | sort -u >"$TMP/doc.flags"
extra=$(comm -13 "$TMP/help.flags" "$TMP/doc.flags")
check "docs/configuration.md has no flag that --help lacks${extra:+: $extra}" test -z "$extra"
sed 's/\\-/-/g' "$MAN" | grep -o -- '^\.B --[a-z0-9-]*\|^\.BR\? --[a-z0-9-]*' | \
	grep -o -- '--[a-z0-9-]*' | sort -u >"$TMP/man.flags"
extra=$(comm -13 "$TMP/help.flags" "$TMP/man.flags")
check "man/kvtierd.8 has no flag that --help lacks${extra:+: $extra}" test -z "$extra"
finish
