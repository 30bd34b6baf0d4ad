#!/bin/sh
# gpu.sh — the GPU tests and the GPU benchmark in one command, on a machine
# with a GPU and the CUDA toolkit. It runs binaries from a carried folder
# (made on a Debian build machine with `bench/carry.sh build/plain .devcarry`,
# libraries included, since the GPU machine has none of our packages) or from
# a build tree, and records everything under OUT.
#
#   bench/gpu.sh [CARRY-OR-BUILD-DIR]     (default: .devcarry, else build/plain)
#   TESTS=0 bench/gpu.sh      benchmark only;   BENCH=0: tests only
#   REQUESTS=8 LANES=4 KIND=vmm L1=24GiB bench/gpu.sh
#
# The benchmark: Qwen3-8B geometry (36 layers, 8 KV heads, head dim 128,
# bf16) at 128-token blocks (18,874,368 B) and 16-token blocks (2,359,296 B),
# 8192-token requests; store, load and both at once against cudaMemcpyAsync
# from pinned memory measured in the same run.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
D=${1:-}
if [ -z "$D" ]; then
	if [ -x "$SRC/.devcarry/bin/kvtierd" ]; then D=$SRC/.devcarry; else D=$SRC/build/plain; fi
fi
if [ -x "$D/bin/kvtierd" ]; then
	BIN=$D/bin
	export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ -x "$D/kvtierd" ]; then
	BIN=$D
else
	echo "gpu.sh: no kvtierd under $D. Build on a Debian machine (scripts/dev.sh test, or" >&2
	echo "  configure && make in build/plain), then: bench/carry.sh build/plain .devcarry" >&2
	exit 1
fi
OUT=${OUT:-$(mktemp -d /tmp/kvtier-gpu.XXXXXX)}
mkdir -p "$OUT"
REQUESTS=${REQUESTS:-8}
LANES=${LANES:-4}
KIND=${KIND:-vmm}
L1=${L1:-24GiB}
rc=0

{
	echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc) CPUs"
	nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max,memory.total \
		--format=csv,noheader 2>/dev/null
} | tee "$OUT/machine.txt"

if [ "${TESTS:-1}" = 1 ]; then
	echo "== GPU tests"
	KVTIERD=$BIN/kvtierd TMPDIR=$OUT sh "$SRC/tests/gpu/run.sh" "$BIN/test_gpu" \
		"$BIN/kvtier-tp-bench" 2>&1 | tee "$OUT/tests.txt"
	grep -q "^run.sh: test_gpu passed" "$OUT/tests.txt" || rc=1
fi

if [ "${BENCH:-1}" = 1 ]; then
	DIR=$(mktemp -d /tmp/kvtier-gpu-run.XXXXXX)
	trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
	kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size "$L1" || exit 1
	grep -E "cuda|pinned|l1:" "$DIR/log" | tee "$OUT/daemon-start.txt"
	for case in "128 16" "16 128"; do
		set -- $case
		echo "== $1-token blocks, $KIND staging, $REQUESTS requests, $LANES lanes x $2 blocks"
		"$BIN/kvtier-gpu-bench" --socket "$DIR/kvtierd.sock" --block-tokens "$1" \
			--batch-blocks "$2" --requests "$REQUESTS" --lanes "$LANES" --kind "$KIND" \
			2>&1 | tee "$OUT/bench-$1.txt" || rc=1
		# A fresh namespace per case keeps L1 from filling across cases.
		curl -s -X DELETE "http://127.0.0.1:$(kvtierd_port "$DIR/log")/v1/namespaces/1" >/dev/null 2>&1 || true
	done
	cp "$DIR/log" "$OUT/daemon.log"
fi
echo "gpu.sh: results in $OUT"
exit $rc
