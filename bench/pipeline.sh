#!/bin/sh
# pipeline.sh — the reference PR's workload at the KV-transfer level, through
# libkvtier's pipeline: a cold pass stores every request, a warm pass loads
# every request (at CONCURRENCY, then one at a time), with everything in L1
# and in evict mode (L1 = 90% of the working set, L2 holding all of it).
# Prints kvtier-pipeline-bench's lines, the share of blocks that came from
# L2, and the disk's own read ceiling (fio, or the ceilings tool uring_read).
#
#   bench/pipeline.sh --host [BUILD-DIR]   shm staging on a CPU machine (default build/plain)
#   bench/pipeline.sh --gpu [DIR]          GPU staging (DIR: .devcarry or a build tree)
#   REQUESTS=.. TOKENS=.. CONCURRENCY=.. DISK=/var/tmp MODES="l1 evict" bench/pipeline.sh ...
#   EVICT_STORE_GBS=1.0: in evict mode, store no faster than that (a prefill's
#   pace), so that L2 can take the victims instead of dropping them
#   L2_WRITE_BUFFERS=8: L2 write buffers of 180 MiB (one burst of victims: the
#   pool's 4 x 16 blocks is 1.2 GB)
#   DRAIN=1: in evict mode, let the writer clean L1 between the passes (and
#   report how long that took), so the warm pass measures reads alone; without
#   it the warm pass starts at once and shares the disk with the writer
#
# The reference ran 200 requests of 8192 tokens at 128-token blocks (Qwen3-8B:
# 18,874,368 B a block, 64 a request), concurrency 8. L1 regions are one block
# (18 MiB) so that 90% of the working set is 90% of the blocks. What a machine holds
# scales it: --gpu defaults to 24 requests of 8192 tokens (29 GB), --host to
# 20 requests of 2048 tokens (6 GB); the block geometry stays the model's.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
MODE=${1:?usage: bench/pipeline.sh --host|--gpu [DIR]}
D=${2:-}
case "$MODE" in
--gpu) GPUFLAG=--gpu; : "${REQUESTS:=24}" "${TOKENS:=8192}"; D=${D:-$SRC/.devcarry} ;;
--host) GPUFLAG=; : "${REQUESTS:=20}" "${TOKENS:=2048}"; D=${D:-$SRC/build/plain} ;;
*) echo "usage: bench/pipeline.sh --host|--gpu [DIR]" >&2; exit 2 ;;
esac
CONCURRENCY=${CONCURRENCY:-8}
DISK=${DISK:-/var/tmp}
MODES=${MODES:-l1 evict}
if [ -x "$D/bin/kvtierd" ]; then
	BIN=$D/bin
	export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
	BIN=$D
fi
[ -x "$BIN/kvtier-pipeline-bench" ] || { echo "no kvtier-pipeline-bench under $D" >&2; exit 1; }
BLOCK=18874368
WS=$((REQUESTS * TOKENS / 128 * BLOCK))
MIB=1048576
WORK=$(mktemp -d "$DISK/kvtier-pipeline.XXXXXX")
trap 'kvtierd_stop; rm -rf "$WORK"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $MODE, $REQUESTS requests of $TOKENS tokens, concurrency $CONCURRENCY, working set $((WS / MIB)) MiB, L2 on $DISK ($(df --output=source,fstype "$DISK" | tail -1))"

for m in $MODES; do
	rm -rf "$WORK/run" "$WORK/l2"
	mkdir -p "$WORK/run"
	if [ "$m" = evict ]; then
		L1=$((WS * 9 / 10 / MIB))MiB
		kvtierd_start "$BIN/kvtierd" "$WORK/run" --l1-size "$L1" --l1-region-size 18MiB \
			--l2-path "$WORK/l2" --l2-region-size 180MiB \
			--l2-size $((WS * 5 / 4 / MIB))MiB --l2-queue-depth 32 \
			--l2-write-buffers "${L2_WRITE_BUFFERS:-8}"
	else
		L1=$((WS * 11 / 10 / MIB + 1024))MiB
		kvtierd_start "$BIN/kvtierd" "$WORK/run" --l1-size "$L1" --l1-region-size 18MiB
	fi
	port=$(kvtierd_port "$WORK/run/log")
	echo "== mode $m, L1 $L1"
	PACE=
	[ "$m" = evict ] && [ -n "${EVICT_STORE_GBS:-}" ] && PACE="--store-gbs $EVICT_STORE_GBS"
	AFTER=true
	[ "$m" = evict ] && [ "${DRAIN:-0}" = 1 ] && AFTER="python3 $SRC/bench/wait_clean.py $port"
	"$BIN/kvtier-pipeline-bench" --socket "$WORK/run/kvtierd.sock" $GPUFLAG $PACE \
		--after-cold "$AFTER" \
		--tokens "$TOKENS" --requests "$REQUESTS" --concurrency "$CONCURRENCY" | tee "$WORK/bench.out"
	curl -s "http://127.0.0.1:$port/v1/stats" | python3 -c '
import json, sys
j = json.load(sys.stdin)
d, l2 = j["dataplane"], j.get("l2")
from_l2 = l2["blocks_loaded"] if l2 else 0
print("blocks loaded %d, of them from L2 %d (%.1f%%), missing %d" % (d["blocks_loaded"],
      from_l2, 100.0 * from_l2 / max(1, d["blocks_loaded"]), d["blocks_load_missing"]))
if l2:
    print("L2: wrote %.2f GB, read %.2f GB; victims written %d, dropped because L2 was behind %d" %
          (l2["bytes_written"] / 1e9, l2["bytes_read"] / 1e9, l2["victims_written"],
           l2["victims_dropped_behind"]))'
	kvtierd_stop
	if [ "$m" = evict ]; then
		set -- $(disk_ceiling "$WORK" 1024)
		if [ $# -eq 2 ]; then
			tail -n 1 "$WORK/bench.out" | python3 -c '
import json, sys
r, disk, src = json.loads(sys.stdin.read()), float(sys.argv[1]), sys.argv[2]
print("disk read ceiling (%s, random %s-byte reads, queue depth 32): %.2f GB/s; warm load c%d %.2f GB/s = %.2f of it, c1 %.2f GB/s = %.2f of it" %
      (src, r["block_bytes"], disk, r["concurrency"], r["load_gbs"], r["load_gbs"] / disk, r["c1_gbs"], r["c1_gbs"] / disk))' "$1" "$2"
		else
			echo "no fio or uring_read here: the disk ceiling was not measured"
		fi
	fi
done
