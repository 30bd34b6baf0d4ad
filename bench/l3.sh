#!/bin/sh
# l3.sh — the L3 tier in one run: node A (a kvtierd) stores COUNT blocks and
# publishes them into an L3 directory; node B (another kvtierd, own runtime
# dir and socket, empty L1, no L2) reads them all from L3 (bench/l3_bench.py:
# the time to first byte of an L3 hit, then the rest by two clients, every
# byte checked), REPEATS times, each with a fresh B, between measures of the
# read ceiling of the same files in the same run (the ratio printed is to the
# ceiling measured just before; compare with the one after too): fio
# (io_uring, O_DIRECT, every file under L3_DIR/v1, queue depth QD), or, with
# no fio, the ceilings tool's uring_read on a file of the same size in the same
# directory (stated in the output). Binaries from a carried folder
# (bench/carry.sh build/plain .devcarry) or a build tree's, the package from
# the source tree; results in OUT. A local disk stands for the shared file
# system here: say so when recording.
#
#   bench/l3.sh [CARRY-DIR]   DIR=/var/tmp COUNT=256 BLOCK=8388608 QD=16 REPEATS=3
#                             L3_FLAGS="--l3-op-timeout-ms 0" (more flags for both nodes)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
carried_run l3 "${1:-$SRC/.devcarry}" "${DIR:-/var/tmp}"
COUNT=${COUNT:-256}
BLOCK=${BLOCK:-8388608}
QD=${QD:-16}
L3=$DIR/l3
rm -f "$OUT/rounds.txt"
mkdir -p "$L3" "$DIR/a"
L1=$(((COUNT + 64) * BLOCK / 1048576))MiB
PIDS=
trap 'for p in $PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$DIR"' EXIT
node() { # node NAME: a kvtierd on DIR/NAME sharing L3; sets PORT_NAME
	kvtierd_start "$BIN/kvtierd" "$DIR/$1" --l1-size "$L1" --l3-path "$L3" \
		--l3-queue-depth "$QD" --l3-scan-ms 3600000 ${L3_FLAGS:-} || exit 1
	PIDS="$PIDS $PID"
	eval "PORT_$1=$(kvtierd_port "$DIR/$1/log")"
}
rc=0
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(uname -r), $DIR on $(df --output=source,fstype "$DIR" | tail -1 | tr -s ' '), $COUNT blocks of $BLOCK bytes, queue depth $QD" |
	tee "$OUT/l3.txt"
bench() { # bench ARGS...: one l3_bench.py run, its line added to OUT/l3.txt
	"$PY" "$SRC/bench/l3_bench.py" "$@" --count "$COUNT" --block "$BLOCK" >"$OUT/run.json" || rc=1
	tee -a "$OUT/l3.txt" <"$OUT/run.json"
}
node a
bench store --socket "$DIR/a/kvtierd.sock" --port "$PORT_a"
# The ceiling: the same bytes from the same directory, O_DIRECT (no page cache
# either way), around each of B's loads (a VM's disk can vary by the minute).
# Without fio: uring_read on a file next to them.
ceiling() {
	if command -v fio >/dev/null; then
		fio --name=l3 --opendir="$L3/v1" --rw=read --bs=$((BLOCK < 4194304 ? BLOCK : 4194304)) \
			--iodepth="$QD" --ioengine=io_uring --direct=1 --output-format=json \
			--output="$OUT/fio.json" >/dev/null 2>&1
		python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["jobs"][0]["read"]["bw_bytes"]/1e9))' "$OUT/fio.json"
	else
		disk_ceiling "$DIR" $((COUNT * BLOCK / 1048576)) | cut -d' ' -f1
	fi
}
command -v fio >/dev/null && HOW="fio, the same files" ||
	HOW="uring_read, a file of the same size in the same directory (no fio here)"
# REPEATS rounds of: the ceiling, a fresh node B (empty L1) loading everything, the ceiling.
CEIL=$(ceiling)
for r in $(seq "${REPEATS:-3}"); do
	echo "read ceiling: ${CEIL:-not measured} GB/s ($HOW)" | tee -a "$OUT/l3.txt"
	mkdir -p "$DIR/b$r"
	node "b$r"
	eval "PORT_b=\$PORT_b$r"
	bench load --socket "$DIR/b$r/kvtierd.sock" --port "$PORT_b" ${CEIL:+--ceiling-gbs "$CEIL"}
	kill "$PID"
	wait "$PID"
	[ "$r" = "${REPEATS:-3}" ] && cp "$DIR/b$r/log" "$OUT/daemon-b.log"
	NEXT=$(ceiling)
	[ -n "$CEIL" ] && [ -n "$NEXT" ] &&
		"$PY" -c 'import json, sys; g = json.load(open(sys.argv[1]))["load_gbs"]; m = (float(sys.argv[2]) + float(sys.argv[3])) / 2; print(f"round {sys.argv[4]}: {g} GB/s against a ceiling of {sys.argv[2]} before and {sys.argv[3]} after: {g / m:.3f} of their mean")' \
			"$OUT/run.json" "$CEIL" "$NEXT" "$r" | tee -a "$OUT/l3.txt" "$OUT/rounds.txt"
	CEIL=$NEXT
done
echo "read ceiling: ${CEIL:-not measured} GB/s ($HOW)" | tee -a "$OUT/l3.txt"
[ -s "$OUT/rounds.txt" ] && sed 's/.*: \([0-9.]*\) of their mean/\1/' "$OUT/rounds.txt" | sort -n |
	awk '{v[NR] = $1} END {printf "median of %d rounds: %.3f of the ceiling around them\n", NR, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}' |
	tee -a "$OUT/l3.txt"
echo "l3.sh: results in $OUT (exit $rc)"
exit $rc
