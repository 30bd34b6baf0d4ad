#!/bin/sh
# connector.sh — the vLLM connector's worker path on the GPU machine: one
# process saves REQUESTS 8192-token Qwen3-8B prefixes from its paged CUDA
# cache, a second loads them into a fresh cache at other block ids, checks
# every byte and reports GB/s against cudaMemcpyAsync from pinned memory in
# the same run (bench/connector_bench.py). Binaries and libkvtier come from a
# carried folder (bench/carry.sh build/plain .devcarry), the package from
# the source tree; results under OUT.
#
#   bench/connector.sh [CARRY-DIR]          (default: .devcarry)
#   REQUESTS=8 DEPTH=4 STAGING_BLOCKS=16 L1=24GiB bench/connector.sh
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
carried_run connector "${1:-$SRC/.devcarry}" /tmp
kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size "${L1:-24GiB}" || exit 1
ARGS="--socket $DIR/kvtierd.sock --requests ${REQUESTS:-8} --depth ${DEPTH:-4} --staging-blocks ${STAGING_BLOCKS:-16}"
rc=0
for mode in save load; do
	"$PY" "$SRC/bench/connector_bench.py" $mode $ARGS >"$OUT/$mode.json" 2>"$OUT/$mode.err" || rc=1
	cat "$OUT/$mode.json" "$OUT/$mode.err"
done
cp "$DIR/log" "$OUT/daemon.log"
echo "connector.sh: results in $OUT (exit $rc)"
exit $rc
