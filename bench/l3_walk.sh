#!/bin/sh
# l3_walk.sh — what one walk of the L3 directory costs (src/daemon/l3scan.c,
# the keeper thread): FILES empty part files spread over NS namespaces (the
# real fan-out: v1/DIGEST/AA/BB/KEY.RANK), walked by a kvtierd without and
# then with --namespace-l3-quota (set above anything a namespace holds, so
# nothing is removed and the difference is the quota's per-namespace pass),
# each between two measures of the same run's ceiling: find(1) reading every
# directory and stat-ing every file of the tree (warm cache, as the walks).
# Prints, for each of ROUNDS rounds, the median of WALKS walks'
# kvtier_l3_scan_duration_ms per daemon and its ratio to the ceiling. Binaries from a carried folder (bench/carry.sh).
#
#   bench/l3_walk.sh [CARRY-DIR]   DIR=/var/tmp FILES=100000 NS=4 WALKS=5 ROUNDS=3
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
carried_run l3walk "${1:-$SRC/.devcarry}" "${DIR:-/var/tmp}"
FILES=${FILES:-100000}
NS=${NS:-4}
WALKS=${WALKS:-5}
ROUNDS=${ROUNDS:-3}
L3=$DIR/l3
"$PY" - "$L3" "$FILES" "$NS" <<'EOF'
import os, random, sys
root, files, ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
for i in range(files):
    digest = "%016x" % (0x1000 + i % ns)
    k = "%032x" % rng.getrandbits(128)
    d = os.path.join(root, "v1", digest, k[:2], k[2:4])
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, k + ".0"), "wb").close()
EOF
ceiling_ms() { # the median of three find(1) runs over the tree, in ms
	for _i in 1 2 3; do
		_t0=$(date +%s%N)
		find "$L3/v1" -type f -printf '%s %T@\n' >/dev/null
		echo $((($(date +%s%N) - _t0) / 1000000))
	done | sort -n | sed -n 2p
}
walk_ms() { # walk_ms FLAGS...: the median walk of a kvtierd given FLAGS, in ms
	mkdir -p "$DIR/run"
	kvtierd_start "$BIN/kvtierd" "$DIR/run" --l1-size 64MiB --l3-path "$L3" \
		--l3-scan-ms 10 "$@" || exit 1
	"$PY" - "$(kvtierd_port "$DIR/run/log")" "$WALKS" "$FILES" <<'EOF'
import json, sys, time, urllib.request
port, walks, files = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
seen, last = {}, None
while len(seen) < walks + 1:  # the first walk is cold: left out
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=60) as r:
        l3 = json.load(r)["l3"]
    if l3["scans"] != last and l3["scans"] > 0:
        assert l3["items"] == files and l3["quota_files_removed"] == 0, l3
        seen[l3["scans"]], last = l3["last_scan_ms"], l3["scans"]
    time.sleep(0.05)
ms = sorted(list(seen.values())[1:])
print(ms[len(ms) // 2])
EOF
	kvtierd_stop
	rm -rf "$DIR/run"
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(uname -r), $FILES files in $NS namespaces under $L3 ($(df -T "$DIR" | awk 'NR==2 {print $2}'))"
ratio() { awk -v w="$1" -v a="$2" -v b="$3" 'BEGIN {printf "%.2f", w / ((a + b) / 2)}'; }
c1=$(ceiling_ms)
for round in $(seq "$ROUNDS"); do
	plain=$(walk_ms)
	quota=$(walk_ms --namespace-l3-quota 1TiB)
	c2=$(ceiling_ms)
	echo "round $round: ceiling (find, stat of every file) $c1 ms before, $c2 ms after;" \
		"walk without quota $plain ms ($(ratio "$plain" "$c1" "$c2") of the ceiling)," \
		"with the namespace quota $quota ms ($(ratio "$quota" "$c1" "$c2"))"
	c1=$c2
done
