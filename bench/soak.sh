#!/bin/sh
# soak.sh — kvtierd under a long mixed load: kvtier-bench rounds in evict
# mode (stores past L1 into L2, loads back, every byte checked) alternating
# with clients SIGKILLed in the middle of their requests, for DURATION
# seconds. Samples the daemon's RSS and open fds after every iteration and
# prints the first, last and largest: a leak shows as growth. Then stops the
# daemon: a non-zero exit or a sanitizer report in its log fails the soak
# (run it on build/sanitize to kill clients mid-request under ASan).
#
#   bench/soak.sh [BUILD-DIR]            (default: build/plain)
#   DURATION=600 bench/soak.sh
set -eu
BUILD=${1:-build/plain}
DURATION=${DURATION:-180}
. "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d /var/tmp/kvtier-soak.XXXXXX)
trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
kvtierd_start "$BUILD/kvtierd" "$DIR" --l1-size 256MiB --l2-path "$DIR/l2" --l2-size 1GiB \
	--l2-region-size 32MiB
rss() { awk '/^VmRSS/ {print $2}' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, soak of ${DURATION}s: L1 256 MiB, L2 1 GiB (evict)"
end=$(($(date +%s) + DURATION))
iter=0 failures=0 kills=0
first_rss=$(rss) first_fds=$(fds) max_rss=0
while [ "$(date +%s)" -lt "$end" ]; do
	"$BUILD/kvtier-bench" --socket "$DIR/kvtierd.sock" --block-size 2MiB --blocks 96 \
		--no-warmup >"$DIR/bench.out" 2>&1 || {
		failures=$((failures + 1)); tail -3 "$DIR/bench.out"; }
	# Clients killed mid-request: a bench given a moment, then SIGKILL.
	for i in 1 2 3 4; do
		"$BUILD/kvtier-bench" --socket "$DIR/kvtierd.sock" --block-size 1MiB --blocks 64 \
			>/dev/null 2>&1 &
		k=$!
		sleep 0.$((i * 2))
		kill -KILL "$k" 2>/dev/null && kills=$((kills + 1))
		wait "$k" 2>/dev/null || true
	done
	kill -0 "$PID" || { echo "kvtierd died"; exit 1; }
	r=$(rss)
	[ "$r" -gt "$max_rss" ] && max_rss=$r
	iter=$((iter + 1))
	[ $((iter % 10)) -eq 0 ] && echo "iteration $iter: RSS $r KiB, $(fds) fds"
done
# Let the killed clients' last copies finish before the last sample.
sleep 1
echo "iterations: $iter, bench failures: $failures, clients killed mid-request: $kills"
echo "RSS KiB: first $first_rss, last $(rss), largest $max_rss; open fds: first $first_fds, last $(fds)"
curl -s "http://127.0.0.1:$(kvtierd_port "$DIR/log")/v1/stats" |
	python3 -c 'import json,sys; s=json.load(sys.stdin); d=s["dataplane"]; l=s["l1"]; t=s["l2"]
print("after: clients", d["clients_active"], "lanes", d["connections_active"], "buffers", d["buffers_registered"],
      "pins", l["pinned_items"], "leases", l["leases_active"], "| L2 victims written", t["victims_written"],
      "dropped_behind", t["victims_dropped_behind"], "checksum failures", t["checksum_failures"], "io errors", t["io_errors"])'
# The daemon stops cleanly, and a sanitizer build's report (ASan, UBSan,
# LeakSanitizer at exit) is a failure: the soak kills clients mid-request.
kill "$PID"
rc=0
wait "$PID" || rc=$?
PID=
if [ "$rc" -ne 0 ] || grep -q -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$DIR/log"; then
	echo "kvtierd exited $rc; its log's end:"
	tail -30 "$DIR/log"
	exit 1
fi
echo "kvtierd stopped cleanly (exit 0, no sanitizer report)"
