#!/bin/sh
# e2e_flow.sh — bench/e2e.sh's whole flow, the GPU machine's one-call entry
# point, on tests/python's CPU decoder (E2E_MODEL=tiny) from a folder that
# bench/carry.sh makes of this build: store and evict into L2, one byte
# flipped in the L2 file with the daemon stopped, the restarted daemon's miss
# at that chunk and the bit-exact recompute, the bit-exact restore, TTFT from
# L1 and from L2, and the plot. The numbers are not judged (speed lives in
# bench/); that every step ran and every check held is.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
BUILD=$(dirname "$KVTIERD")
PY=${KVT_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, matplotlib" 2>/dev/null; then
	echo "e2e_flow.sh: $PY lacks torch or matplotlib (scripts/dev.sh installs python3-torch python3-matplotlib)" >&2
	exit 1
fi
# A sanitized libkvtier wants the ASan runtime first in the Python processes,
# and only there (curl, say, hangs in setlocale with it preloaded).
ASAN=$(ldd "$BUILD/.libs/libkvtier.so.0" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$ASAN" ]; then
	printf '#!/bin/sh\nLD_PRELOAD=%s ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 exec %s "$@"\n' \
		"$ASAN" "$PY" >"$TMP/python"
	chmod +x "$TMP/python"
	PY=$TMP/python
fi
export PYTHONDONTWRITEBYTECODE=1

check "bench/carry.sh carries this build" \
	sh -c 'sh "$1/bench/carry.sh" "$2" "$3" >"$3.log" 2>&1' sh "$SRC" "$BUILD" "$TMP/carry"
OUT=$TMP/out PYTHON=$PY E2E_MODEL=tiny CHUNK=16 LENGTHS=64,256 REPEATS=1 L1=256MiB L2=512MiB \
	sh "$SRC/bench/e2e.sh" "$TMP/carry" >"$TMP/e2e.log" 2>&1
rc=$?
# On a failure, what each process and both daemons said (TMP goes at exit).
check "bench/e2e.sh exits 0" test "$rc" -eq 0 || for f in "$TMP/e2e.log" "$TMP"/out/*.err \
	"$TMP"/out/daemon-*.log; do
	echo "--- $f: its end"
	tail -20 "$f"
done

# json_check FILE DESCRIPTION EXPR: EXPR (Python, over each JSON line j) holds for
# every line of FILE, and FILE has one line per length.
json_check() {
	check "$2" "$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [eval(sys.argv[2], {"j": j}) for j in rows]
sys.exit(0 if len(rows) == int(sys.argv[3]) and all(ok) else 1)' "$TMP/out/$1" "$3" "$4"
}
json_check store.jsonl "the store saved every length's N-1 tokens" \
	'j["saved_tokens"] == j["tokens"] - 1' 2
json_check flip.jsonl "one byte of the first length's chunk 2 flipped in the L2 file" \
	'j["records_flipped"] == 1 and j["chunk"] == 2' 1
json_check corrupt.jsonl "the corrupt chunk is a miss, one checksum failure, the recompute bit-exact" \
	'j["miss_at_corrupt_chunk"] and j["checksum_failures"] == 1 and j["bit_exact"] and j["same_tokens"]' 1
json_check exact.jsonl "the restored prefix is whole and its logits and tokens are bit-exact" \
	'j["restored_tokens"] == j["prefix_tokens"] and j["kv_restored_equal_prefill"] and j["bit_exact"] and j["same_tokens"] and j["graph_vs_eager_max_abs_diff"] == 0' 2
json_check ttft.jsonl "TTFT is measured from L1 and from L2 at every length" \
	'all(j[k] > 0 for k in ("ttft_recompute_ms", "ttft_l1_ms", "ttft_l2_ms", "load_l2_ms")) and len(j["load_l2_marks_ms"]["groups"]) == len(j["load_marks_ms"]["groups"]) > 0' 2
check "the daemon's /v1/stats was collected" "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))["l2"]' "$TMP/out/stats.json"
check "the plot is a PNG" sh -c 'head -c 8 "$1" | od -An -c | grep -q "P   N   G"' sh "$TMP/out/e2e.png"
finish
