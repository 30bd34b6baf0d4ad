#!/bin/sh
# gpu-tp.sh — tensor-parallel ranks against one kvtierd (kvtier-tp-bench): for
# TP in $TPS, one process per rank on GPU rank % (GPUs), each with its own
# cuda_ipc staging buffers, and a scheduler connection. Checks that LOOKUP
# sees a block only once every rank stored it and that each rank loads
# exactly its own parts; then the aggregate load GB/s of all ranks at once
# against all ranks' cudaMemcpyAsync H2D at once, measured in the same run.
# On a machine with fewer GPUs than ranks, ranks share GPUs: that proves the
# logic, and the ceiling is then the shared GPUs' ceiling.
#
#   bench/gpu-tp.sh [CARRY-OR-BUILD-DIR]      TPS="2 4" KIND=ipc REQUESTS=4
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
D=${1:-$SRC/.devcarry}
if [ -x "$D/bin/kvtierd" ]; then
	BIN=$D/bin
	export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
	BIN=$D
fi
TPS=${TPS:-2 4}
KIND=${KIND:-ipc}
REQUESTS=${REQUESTS:-4}
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $GPUS GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
DIR=$(mktemp -d /tmp/kvtier-tp.XXXXXX)
trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
rc=0
for tp in $TPS; do
	kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size 8GiB || exit 1
	echo "== TP $tp on $GPUS GPU(s)"
	"$BIN/kvtier-tp-bench" --socket "$DIR/kvtierd.sock" --ranks "$tp" --requests "$REQUESTS" \
		--kind "$KIND" || rc=1
	kvtierd_stop
done
exit $rc
