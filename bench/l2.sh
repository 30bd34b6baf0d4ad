#!/bin/sh
# l2.sh — the L2 tier against the disk's own ceiling, in one run on one file
# system: fio (io_uring, O_DIRECT) sequential writes and random reads with the
# block size and queue depth kvtier uses, then kvtier-l2-bench (the engine:
# writes of whole records, random checksummed reads after a reopen), then
# evict mode end to end through kvtierd (L1 = 90% of the working set, L2
# holding all of it) with kvtier-bench. Prints each result and the ratios.
#
#   bench/l2.sh [BUILD-DIR]            (default: build/plain)
#   DIR=/mnt/nvme SIZE=4GiB QD=32 BLOCKS="2MiB 18MiB" bench/l2.sh
set -eu
BUILD=${1:-build/plain}
DIR=${DIR:-/var/tmp}
SIZE=${SIZE:-4GiB}
QD=${QD:-32}
BLOCKS=${BLOCKS:-2MiB 18MiB}
command -v fio >/dev/null || { echo "l2.sh needs fio (Debian package fio)" >&2; exit 1; }
WORK=$(mktemp -d "$DIR/kvtier-l2-bench.XXXXXX")
. "$(dirname "$0")/lib.sh"
PID=
trap 'kvtierd_stop; rm -rf "$WORK"' EXIT
bytes() { numfmt --from=iec-i "$(printf %s "$1" | sed "s/B$//")"; }
SIZE_B=$(bytes "$SIZE")
FIO_SIZE=$((SIZE_B * 9 / 10))

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(uname -r), $DIR on $(df --output=source,fstype "$DIR" | tail -1), queue depth $QD"
fio_gbs() { # fio_gbs RW BS: GB/s of one fio job on $WORK/fio
	fio --name=l2 --filename="$WORK/fio" --size="$FIO_SIZE" --rw="$1" --bs="$2" \
		--iodepth="$QD" --ioengine=io_uring --direct=1 --numjobs=1 --group_reporting \
		--output-format=json --runtime=20 --time_based=0 2>/dev/null |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; s=j["write"] if j["write"]["bw_bytes"] else j["read"]; print("%.3f" % (s["bw_bytes"]/1e9))'
}
for bs in $BLOCKS; do
	b=$(bytes "$bs")
	fw=$(fio_gbs write "$b")
	fr=$(fio_gbs randread "$b")
	rm -f "$WORK/fio"
	line=$("$BUILD/kvtier-l2-bench" --path "$WORK/l2" --size "$SIZE" --block-size "$bs" \
		--queue-depth "$QD" --json | tail -n 1)
	echo "$line" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); fw, fr, bs = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print("%-6s fio write %.2f GB/s, randread %.2f GB/s | kvtier L2 write %.2f GB/s (%.2f of fio), "
      "read %.2f GB/s (%.2f of fio), read p50 %.0f us p99 %.0f us, scan %.0f ms" %
      (bs, fw, fr, r["write_gbs"], r["write_gbs"] / fw, r["read_gbs"], r["read_gbs"] / fr,
       r["read_p50_us"], r["read_p99_us"], r["scan_ms"]))' "$fw" "$fr" "$bs"
done

# Evict mode end to end: a working set of WS bytes, L1 at 90% of it, L2 twice it.
WS=$((SIZE_B / 2))
for bs in $BLOCKS; do
	b=$(bytes "$bs")
	n=$((WS / b))
	l1=$((WS * 9 / 10 / 1048576))MiB
	rm -rf "$WORK/run"
	mkdir -p "$WORK/run"
	kvtierd_start "$BUILD/kvtierd" "$WORK/run" --l1-size "$l1" \
		--l1-region-size "$(( (b + 1048575) / 1048576 ))MiB" --l2-path "$WORK/l2" \
		--l2-size "$SIZE" --l2-queue-depth "$QD"
	port=$(kvtierd_port "$WORK/run/log")
	"$BUILD/kvtier-bench" --socket "$WORK/run/kvtierd.sock" --block-size "$bs" --blocks "$n" \
		--lanes 2 --inflight 4 --no-warmup --json >"$WORK/bench.out" || true
	curl -s "http://127.0.0.1:$port/v1/stats" >"$WORK/stats.json"
	kvtierd_stop
	python3 - "$WORK/bench.out" "$WORK/stats.json" "$bs" "$l1" <<'PY'
import json, sys
bench = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
st = json.load(open(sys.argv[2]))
l2, dp = st["l2"], st["dataplane"]
print("%-6s evict mode, L1 %s: load %.2f GB/s p50 %.0f us p99 %.0f us; %d of %d loaded blocks from L2; "
      "L2 wrote %.2f GB, read %.2f GB; victims dropped (L2 behind) %d, blocks missing %d; loaded bytes exact: %s" %
      (sys.argv[3], sys.argv[4], bench["load_gbps"], bench["load_p50_us"], bench["load_p99_us"],
       l2["blocks_loaded"], dp["blocks_loaded"], l2["bytes_written"] / 1e9, l2["bytes_read"] / 1e9,
       l2["victims_dropped_behind"], bench["missing"], bench["exact"]))
PY
done
