#!/bin/sh
# docs.sh — every program answers --help; every flag kvtierd --help lists is
# documented in man/kvtierd.8 and docs/configuration.md, and every documented
# flag exists; every endpoint of
# docs/api.md is in the man page and the other way round; every metric family
# a daemon with L2 serves is in docs/api.md, and every one documented is served.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
MAN=$SRC/man/kvtierd.8
DOC=$SRC/docs/configuration.md

# Every relative link of the Markdown pages names a file of the repository,
# and no page cites the design notes that live outside it (DESIGN.md).
for page in "$SRC"/README.md "$SRC"/docs/*.md "$SRC"/deploy/*/README.md "$SRC"/deploy/README.md; do
	[ -f "$page" ] || continue
	dir=$(dirname "$page")
	name=${page#"$SRC"/}
	grep -o '](\([^)#:]*\)[)#]' "$page" | sed 's/^](//; s/[)#]$//' | sort -u |
		while read -r target; do
			[ -n "$target" ] && [ ! -e "$dir/$target" ] && echo "$target"
		done >"$TMP/broken"
	broken=$(tr '\n' ' ' <"$TMP/broken")
	check "$name: every relative link resolves${broken:+ (not found: $broken)}" test -z "$broken"
	check "$name cites no DESIGN.md (it is not in the repository)" \
		sh -c '! grep -q "DESIGN\.md" "$1"' sh "$page"
done

# The repository says under which license it is given, and no page calls a
# shipped part of it future work.
check "LICENSE is there, and README.md names it" sh -c 'test -s "$1/LICENSE" && grep -q "(LICENSE)" "$1/README.md"' sh "$SRC"
check "no page calls a part of kvtier \"(future)\"" sh -c '! grep -n "(future)" "$1"/README.md "$1"/docs/*.md' sh "$SRC"

# Every program the build made answers --help: its usage on stdout, exit 0.
BUILD=$(dirname "$KVTIERD")
for prog in kvtierd kvtier-bench kvtier-l1-bench kvtier-l2-bench kvtier-pipeline-bench \
	kvtier-gpu-bench kvtier-tp-bench; do
	[ -x "$BUILD/$prog" ] || continue
	check "$prog --help exits 0 with its usage on stdout" \
		sh -c '"$1" --help 2>/dev/null | grep -qi "usage"' sh "$BUILD/$prog"
done

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

# The README names flags only that --help lists (its table gave way to a pointer).
grep -o -- '--[a-z][a-z0-9-]*' "$SRC/README.md" | sort -u >"$TMP/readme.flags"
# (configure's, pkg-config's, kubectl's and vllm's own flags are not kvtierd's)
extra=$(comm -13 "$TMP/help.flags" "$TMP/readme.flags" |
	grep -v -E -e '^--(enable|with|without)-' -e '^--(cflags|libs|prefix|from-literal|kv-transfer-config)$' |
	tr '\n' ' ')
check "README.md names no kvtierd flag that --help lacks${extra:+: $extra}" test -z "$extra"

# And nothing documented that --help does not know.
grep -o -- '`--[a-z0-9-]*' "$DOC" | tr -d '`' | sort -u >"$TMP/doc.flags"
extra=$(comm -13 "$TMP/help.flags" "$TMP/doc.flags")
check "docs/configuration.md has no flag that --help lacks${extra:+: $extra}" test -z "$extra"
sed 's/\\-/-/g' "$MAN" | grep -o -- '^\.B --[a-z0-9-]*\|^\.BR\? --[a-z0-9-]*' | \
	grep -o -- '--[a-z0-9-]*' | sort -u >"$TMP/man.flags"
extra=$(comm -13 "$TMP/help.flags" "$TMP/man.flags")
check "man/kvtierd.8 has no flag that --help lacks${extra:+: $extra}" test -z "$extra"

# Endpoints: "METHOD /path" in api.md's headings and in the man page's .B lines.
endpoints() { grep -o -- '\(GET\|PUT\|POST\|DELETE\) /[a-z0-9/{}_]*' | sed 's|/l1/evict|/{tier}/evict|; s|/l2/evict|/{tier}/evict|' | sort -u; }
grep '^## ' "$SRC/docs/api.md" | endpoints >"$TMP/api.endpoints"
grep '^\.B \(GET\|PUT\|POST\|DELETE\)' "$MAN" | endpoints >"$TMP/man.endpoints"
check "docs/api.md lists endpoints" test -s "$TMP/api.endpoints"
diff=$(comm -3 "$TMP/api.endpoints" "$TMP/man.endpoints" | tr '\n' ' ')
check "docs/api.md and man/kvtierd.8 list the same endpoints${diff:+: $diff}" test -z "$diff"

# Metric families: what a daemon with L2 and L3 serves, against docs/api.md.
mkdir -p "$TMP/l3"
if start_daemon "$TMP/d.log" --l1-size 16MiB --l2-path "$TMP/l2" --l2-size 64MiB \
	--l3-path "$TMP/l3"; then
	curl -s "http://127.0.0.1:$PORT/metrics" | sed -n 's/^# TYPE \([a-z0-9_]*\) .*/\1/p' |
		sort -u >"$TMP/served.metrics"
	curl -s "http://127.0.0.1:$PORT/v1/stats" |
		python3 -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin)["l2"])))' \
		>"$TMP/served.l2"
	curl -s "http://127.0.0.1:$PORT/v1/stats" |
		python3 -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin)["l3"])))' \
		>"$TMP/served.l3"
	kill -TERM "$DAEMON_PID"
	wait_exit
	check "the daemon serves metric families" test -s "$TMP/served.metrics"
	grep -o 'kvtier_[a-z0-9_]*' "$SRC/docs/api.md" | sort -u >"$TMP/doc.metrics"
	missing=$(comm -23 "$TMP/served.metrics" "$TMP/doc.metrics" | tr '\n' ' ')
	check "docs/api.md documents every metric served${missing:+: $missing}" test -z "$missing"
	extra=$(comm -13 "$TMP/served.metrics" "$TMP/doc.metrics" | tr '\n' ' ')
	check "docs/api.md documents no metric that is not served${extra:+: $extra}" test -z "$extra"
	sed -n 's/^| `\([a-z0-9_]*\)` | \(counter\|gauge\) |.*/\1/p' "$SRC/docs/l2.md" | sort -u \
		>"$TMP/doc.l2"
	check "/v1/stats serves l2 fields" test -s "$TMP/served.l2"
	diff=$(comm -3 "$TMP/served.l2" "$TMP/doc.l2" | tr '\n' ' ')
	check "docs/l2.md and /v1/stats name the same l2 fields${diff:+: $diff}" test -z "$diff"
	sed -n 's/^| `\([a-z0-9_]*\)` | \(counter\|gauge\) |.*/\1/p' "$SRC/docs/l3.md" | sort -u \
		>"$TMP/doc.l3"
	check "/v1/stats serves l3 fields" test -s "$TMP/served.l3"
	diff=$(comm -3 "$TMP/served.l3" "$TMP/doc.l3" | tr '\n' ' ')
	check "docs/l3.md and /v1/stats name the same l3 fields${diff:+: $diff}" test -z "$diff"
else
	not_ok "kvtierd starts for the metrics check"; cat "$TMP/d.log"
fi
finish
