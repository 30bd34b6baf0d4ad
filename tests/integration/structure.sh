#!/bin/sh
# structure.sh — the source folders keep their floors: no module (x.c with
# x.h) includes a header that leads back to itself, so no include points up
# and no circle ties files together (scripts/include-graph.py). The checker
# is shown a circle first, so that a checker that finds nothing fails here.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
GRAPH="python3 $SRC/scripts/include-graph.py"

mkdir -p "$TMP/circle"
printf '#include "b.h"\n' >"$TMP/circle/a.h"
printf '/* b */\n' >"$TMP/circle/b.h"
printf '#include "a.h"\n' >"$TMP/circle/b.c"
check "a circle (a.h -> b.h, b.c -> a.h) is found" \
	sh -c '! '"$GRAPH"' "$1" >"$1/out" && grep -q "circle of 2 modules: a, b" "$1/out"' sh "$TMP/circle"

for folder in daemon client; do
	if $GRAPH "$SRC/src/common" "$SRC/src/$folder" >"$TMP/$folder.out"; then
		ok "src/$folder and src/common: no circle among modules"
	else
		not_ok "src/$folder and src/common: no circle among modules"
		cat "$TMP/$folder.out"
	fi
done

# Every Python test file is in the tarball (Makefile.am's EXTRA_DIST or a test
# list): the suites run whatever files they find, so one left out would not
# run under make distcheck, silently.
for f in "$SRC"/tests/python/*.py "$SRC"/tests/vllm/*.py; do
	[ -f "$f" ] || continue
	rel=${f#"$SRC"/}
	check "$rel is in the tarball (Makefile.am)" grep -q -- "$rel" "$SRC/Makefile.am"
done
finish
