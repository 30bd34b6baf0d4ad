#!/bin/sh
# reliability.sh — the figures of docs/reliability.md in one run: the
# sanitizer build's fault tests (clients killed mid-request, kill -9 of the
# daemon under stores, L2 corruption, a failing disk, write-behind's clean
# stop, hostile frames, a hung, corrupt or vanishing L3 directory), a fuzzing
# campaign of every fuzz target, and the soak.
#
#   bench/reliability.sh [SANITIZE-BUILD [PLAIN-BUILD]]  (default: build/sanitize build/plain)
#   FUZZ_RUNS=10000000 SOAK=180 bench/reliability.sh
set -eu
SAN=${1:-build/sanitize}
PLAIN=${2:-build/plain}
FUZZ_RUNS=${FUZZ_RUNS:-10000000}
SOAK=${SOAK:-180}
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /var/tmp/kvtier-reliability.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(uname -r)"
export KVTIERD="$SAN/kvtierd"
for t in test_churn test_l2_daemon test_dataplane test_namespaces test_l3; do
	make -C "$SAN" "$t" >/dev/null
	"$SAN/$t" >"$WORK/$t.out" 2>&1 || { cat "$WORK/$t.out"; exit 1; }
	grep -h "figures:" "$WORK/$t.out" | sed "s/^/$t: /"
	grep -h "PASSED" "$WORK/$t.out" | sed "s/^/$t: /"
done
# The L3 daemon tests (a publisher killed, a hung read cancelled under a
# client killed mid-LOAD, corrupt and foreign files, a full or vanished
# mount), against the sanitized daemon and libkvtier.
KVT_SRCDIR="$SRC" KVT_BUILDDIR="$SAN" "$SRC/tests/python/run.sh" "$SRC/tests/python/test_l3.py" \
	>"$WORK/python-l3.out" 2>&1 || { cat "$WORK/python-l3.out"; exit 1; }
echo "tests/python/test_l3.py: $(tail -1 "$WORK/python-l3.out")"
make -C "$SAN" fuzz >/dev/null
for t in frame config l2fmt api_body replies l3name; do
	mkdir -p "$WORK/corpus-$t"
	cp "$SRC/tests/fuzz/corpus/$t/"* "$WORK/corpus-$t/"
	if "$SAN/fuzz_$t" -runs="$FUZZ_RUNS" -print_final_stats=1 -artifact_prefix="$WORK/$t-" \
		"$WORK/corpus-$t" >"$WORK/fuzz-$t.out" 2>&1; then
		printf 'fuzz_%s: %s, %s\n' "$t" "$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$WORK/fuzz-$t.out")" \
			"$(grep -o 'cov: [0-9]*' "$WORK/fuzz-$t.out" | tail -1), no crash"
	else
		echo "fuzz_$t: CRASH"; tail -30 "$WORK/fuzz-$t.out"; exit 1
	fi
done
DURATION=$SOAK "$SRC/bench/soak.sh" "$PLAIN"
