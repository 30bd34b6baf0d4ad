#!/bin/sh
# e2e.sh — kvtier end to end on the GPU machine (bench/e2e_bench.py), in one
# command: process A prefills and stores Qwen3-8B-architecture prompt
# prefixes (2048, 8192, 32768 tokens) and evicts them into L2; with kvtierd
# stopped one byte of a stored block is flipped in the L2 file; after a
# restart process C must miss at that block and compute the rest, bit for
# bit what the same schedule gives over a good copy;
# process B, fresh, checks its logits and greedy tokens bit for bit against
# computing the same way (A, B and C in torch's deterministic mode), and a last process
# times the first token: recompute, from L1, from L2, against the pinned
# H2D ceiling and the disk's (bench/lib.sh disk_ceiling); a PNG plot. Binaries and libkvtier
# from a carried folder (bench/carry.sh build/plain .devcarry); results in OUT.
#
#   bench/e2e.sh [CARRY-DIR]   LENGTHS=2048,8192,32768 REPEATS=5 L1=24GiB L2=16GiB CHUNK=256
#                              LAYER_GROUPS=4 DEPTH=4 STAGING=4 (e2e_bench.py --layer-groups,
#                              --depth, --staging-chunks)
#   E2E_MODEL=tiny CHUNK=16 bench/e2e.sh   (tests/python's CPU decoder: the flow, anywhere)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
carried_run e2e "${1:-$SRC/.devcarry}" /var/tmp # L2 lives in DIR: a disk, not tmpfs
REGION=268435456
start() {
	kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size "${L1:-24GiB}" --l2-path "$DIR/l2" \
		--l2-size "${L2:-16GiB}" --l2-region-size "$REGION" || exit 1
	PORT=$(kvtierd_port "$DIR/log")
}
bench() { # bench NAME MODE ARGS...: one process, its JSON lines in OUT/NAME.jsonl
	_name=$1
	shift
	"$PY" "$SRC/bench/e2e_bench.py" "$@" --socket "$DIR/kvtierd.sock" \
		--model "${E2E_MODEL:-qwen3-8b}" --lengths "${LENGTHS:-2048,8192,32768}" \
		--chunk "${CHUNK:-256}" ${LAYER_GROUPS:+--layer-groups "$LAYER_GROUPS"} \
		${DEPTH:+--depth "$DEPTH"} ${STAGING:+--staging-chunks "$STAGING"} \
		>"$OUT/$_name.jsonl" 2>"$OUT/$_name.err" || rc=1
	cat "$OUT/$_name.jsonl"
	tail -5 "$OUT/$_name.err"
}
rc=0
start
bench store store --deterministic --l2-port "$PORT"
kvtierd_stop
bench flip flip --l2-file "$DIR/l2" --l2-region-size "$REGION"
cp "$DIR/log" "$OUT/daemon-1.log"
start
bench corrupt corrupt --deterministic --l2-port "$PORT"
bench exact ttft --deterministic --no-timing
# The disk's read ceiling, for the L2 bytes: next to the L2 file, in this run.
DISK=$(disk_ceiling "$DIR" 1024)
echo "disk read ceiling: ${DISK:-not measured (no fio, no uring_read)}" | tee "$OUT/disk-read.txt"
bench ttft ttft --no-check --repeats "${REPEATS:-5}" --l2-port "$PORT" ${DISK:+--disk-gbs "${DISK%% *}"}
grep -q '"bit_exact": false' "$OUT/exact.jsonl" && rc=1
grep -q '"bit_exact": false' "$OUT/corrupt.jsonl" && rc=1
"$PY" "$SRC/bench/e2e_plot.py" "$OUT/ttft.jsonl" "$OUT/e2e.png" || rc=1
curl -s --max-time 30 "http://127.0.0.1:$PORT/v1/stats" >"$OUT/stats.json" || rc=1
cp "$DIR/log" "$OUT/daemon-2.log"
echo "e2e.sh: results in $OUT (exit $rc)"
exit $rc
