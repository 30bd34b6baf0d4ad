#!/bin/sh
# metrics-cost.sh — what scraping /metrics costs the data plane: kvtier-bench
# runs alternately without and with a scraper fetching /metrics at 10 Hz, and
# the median GB/s of each is compared. Also checks the bench still verifies
# every byte while scraped.
#
#   bench/metrics-cost.sh [BUILD-DIR]    RUNS=5 L1=2GiB LANES=2 BLOCKS=192
set -eu
BUILD=${1:-build/plain}
RUNS=${RUNS:-5}
L1=${L1:-1GiB}
LANES=${LANES:-2}
BLOCKS=${BLOCKS:-192}
. "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d /tmp/kvtier-mcost.XXXXXX)
SCRAPER=
trap 'kill $SCRAPER 2>/dev/null; kvtierd_stop; rm -rf "$DIR"' EXIT
kvtierd_start "$BUILD/kvtierd" "$DIR" --l1-size "$L1"
PORT=$(kvtierd_port "$DIR/log")
bench() {
	"$BUILD/kvtier-bench" --socket "$DIR/kvtierd.sock" --blocks "$BLOCKS" --lanes "$LANES" --json |
		tail -n 1 | sed 's/.*"store_gbps": \([0-9.]*\), "load_gbps": \([0-9.]*\).*"verified": \([a-z]*\).*/\1 \2 \3/'
}
scrape() {
	n=0
	while :; do
		curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics" && n=$((n + 1))
		echo $n >"$DIR/scrapes"
		sleep 0.1
	done
}
: >"$DIR/off"; : >"$DIR/on"
r=0
while [ $r -lt "$RUNS" ]; do
	bench >>"$DIR/off"
	scrape & SCRAPER=$!
	bench >>"$DIR/on"
	kill $SCRAPER; wait $SCRAPER 2>/dev/null || true; SCRAPER=
	r=$((r + 1))
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
so=$(cut -d' ' -f1 "$DIR/off" | median); lo=$(cut -d' ' -f2 "$DIR/off" | median)
sn=$(cut -d' ' -f1 "$DIR/on" | median); ln=$(cut -d' ' -f2 "$DIR/on" | median)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $RUNS runs each, $BLOCKS x 2 MiB, $LANES lanes"
echo "without scraping: store $so GB/s, load $lo GB/s (median); runs: $(tr '\n' ';' <"$DIR/off")"
echo "scraped at 10 Hz: store $sn GB/s, load $ln GB/s (median); runs: $(tr '\n' ';' <"$DIR/on")"
echo "cost: store $(echo "$so $sn" | awk '{printf "%.1f%%", ($1-$2)/$1*100}'), load $(echo "$lo $ln" | awk '{printf "%.1f%%", ($1-$2)/$1*100}')"
grep -q false "$DIR/on" "$DIR/off" && { echo "VERIFICATION FAILED"; exit 1; }
echo "every run verified every byte; $(cat "$DIR/scrapes" 2>/dev/null || echo 0) scrapes in the last scraped run"
