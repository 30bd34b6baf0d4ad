#!/bin/sh
# e2e.sh — kvtier end to end on the GPU machine: one process prefills and
# stores Qwen3-8B-architecture prompt prefixes (2048, 8192, 32768 tokens),
# a fresh one restores them and checks its logits and greedy tokens bit for
# bit against computing the same way, then times the first token:
# recompute, from L1, from L2 (bench/e2e_bench.py); the disk's O_DIRECT read
# ceiling is measured on the L2 file; a PNG plot. Binaries and libkvtier from
# a carried folder (bench/carry.sh build/plain .devcarry); results in OUT.
#
#   bench/e2e.sh [CARRY-DIR]     LENGTHS=2048,8192,32768 REPEATS=5 L1=24GiB L2=16GiB
#   E2E_FLAGS=--deterministic bench/e2e.sh    (torch's deterministic algorithms)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
D=${1:-$SRC/.devcarry}
OUT=${OUT:-$(mktemp -d /tmp/kvtier-e2e.XXXXXX)}
mkdir -p "$OUT"
carried_env "$D"
PY=${PYTHON:-python3}
DIR=$(mktemp -d /var/tmp/kvtier-e2e-run.XXXXXX)
trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size "${L1:-24GiB}" --l2-path "$DIR/l2" \
	--l2-size "${L2:-16GiB}" || exit 1
PORT=$(kvtierd_port "$DIR/log")
ARGS="--socket $DIR/kvtierd.sock --lengths ${LENGTHS:-2048,8192,32768} --repeats ${REPEATS:-5} ${E2E_FLAGS:-}"
rc=0
"$PY" "$SRC/bench/e2e_bench.py" store $ARGS >"$OUT/store.jsonl" 2>"$OUT/store.err" || rc=1
cat "$OUT/store.jsonl"; tail -5 "$OUT/store.err"
"$PY" "$SRC/bench/e2e_bench.py" ttft $ARGS --l2-port "$PORT" >"$OUT/ttft.jsonl" 2>"$OUT/ttft.err" || rc=1
cat "$OUT/ttft.jsonl"; tail -5 "$OUT/ttft.err"
grep -q '"bit_exact": false' "$OUT/ttft.jsonl" && rc=1
# The disk's read ceiling for L2's bytes: O_DIRECT sequential reads of the file.
dd if="$DIR/l2" of=/dev/null bs=16M count=256 iflag=direct 2>&1 | tail -1 | tee "$OUT/disk-read.txt"
"$PY" "$SRC/bench/e2e_plot.py" "$OUT/ttft.jsonl" "$OUT/e2e.png" || rc=1
curl -s "http://127.0.0.1:$PORT/v1/stats" >"$OUT/stats.json"
cp "$DIR/log" "$OUT/daemon.log"
echo "e2e.sh: results in $OUT (exit $rc)"
exit $rc
