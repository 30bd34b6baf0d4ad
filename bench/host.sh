#!/bin/sh
# host.sh — the host-path data-plane benchmark: starts kvtierd on a temporary
# runtime dir, runs kvtier-bench with 2 MiB and 18 MiB blocks (each against
# the one- and all-threads memcpy it measures in the same run, ROUNDS rounds
# of new keys with the ceiling sampled after every phase, medians), prints
# the JSON lines, and stops the daemon.
#
#   bench/host.sh [BUILD-DIR]        (default: build/plain)
#   RUNS=3 ROUNDS=5 L1=2GiB LANES=2 bench/host.sh   (repeats, rounds, L1 size, lanes)
set -eu
BUILD=${1:-build/plain}
RUNS=${RUNS:-3}
ROUNDS=${ROUNDS:-5}
L1=${L1:-1GiB}
LANES=${LANES:-2}
. "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d /tmp/kvtier-bench.XXXXXX)
trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
kvtierd_start "$BUILD/kvtierd" "$DIR" --l1-size "$L1"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2), L1 $L1, $LANES lanes"
for case in "2MiB 192" "18MiB 24"; do
	set -- $case
	r=0
	while [ $r -lt "$RUNS" ]; do
		"$BUILD/kvtier-bench" --socket "$DIR/kvtierd.sock" --block-size "$1" --blocks "$2" \
			--lanes "$LANES" --inflight 4 --rounds "$ROUNDS" --json | tail -n 1
		r=$((r + 1))
	done
done
