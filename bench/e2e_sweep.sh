#!/bin/sh
# e2e_sweep.sh — the time to first token from L1 (bench/e2e_bench.py ttft,
# no correctness checks, no L2) for several chunk sizes, layer-group counts
# and staging sizes, one fresh kvtierd each: what picks bench/e2e.sh's
# settings. Binaries from a carried folder as bench/e2e.sh; one JSON line per
# setting and length in OUT/sweep.jsonl.
#
#   bench/e2e_sweep.sh [CARRY-DIR]   CONFIGS="256:4:8 128:4:16" (chunk:groups:staging chunks)
#                                    LENGTHS=8192 REPEATS=5 L1=24GiB E2E_MODEL=qwen3-8b
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
carried_run e2e-sweep "${1:-$SRC/.devcarry}" /var/tmp
rc=0
for cfg in ${CONFIGS:-256:4:8 128:4:16}; do
	IFS=: read -r chunk groups staging <<-END
	$cfg
	END
	kvtierd_start "$BIN/kvtierd" "$DIR" --l1-size "${L1:-24GiB}" || exit 1
	for mode in store ttft; do
		"$PY" "$SRC/bench/e2e_bench.py" "$mode" --no-check --socket "$DIR/kvtierd.sock" --model "${E2E_MODEL:-qwen3-8b}" \
			--lengths "${LENGTHS:-8192}" --repeats "${REPEATS:-5}" --chunk "$chunk" \
			--layer-groups "$groups" --staging-chunks "$staging" \
			>"$OUT/$mode-$chunk-$groups-$staging.jsonl" 2>"$OUT/$mode-$chunk-$groups-$staging.err" ||
			rc=1
	done
	kvtierd_stop
	"$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    d.pop("store_stats", None)
    print(json.dumps(dict(chunk=int(sys.argv[2]), staging_chunks=int(sys.argv[3]), **d)))' \
		"$OUT/ttft-$chunk-$groups-$staging.jsonl" "$chunk" "$staging" |
		tee -a "$OUT/sweep.jsonl" || rc=1
done
echo "e2e_sweep.sh: results in $OUT (exit $rc)"
exit $rc
