#!/bin/sh
# run.sh — tests/vllm: KvtierConnector inside real vLLM (its CPU build),
# against the build tree's kvtierd and libkvtier, with pytest from the
# virtual environment `scripts/venv.sh vllm` makes from
# tests/requirements-vllm.txt under $KVT_VENV_ROOT (scripts/dev.sh sets it;
# run alone, build/venv of the build tree). Arguments (test files, -k ...)
# go to pytest in place of the whole directory.
#
# Skipped (exit 77, with the reason) when KVT_VLLM_TESTS=0 (dev.sh runs the
# suite once, in the plain build: it takes minutes) or when libkvtier is
# built with sanitizers (vLLM's engine processes would need the ASan
# runtime preloaded into torch).
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
BUILD=${KVT_BUILDDIR:-.}
if [ "${KVT_VLLM_TESTS:-1}" = 0 ]; then
	echo "run.sh: skipped: KVT_VLLM_TESTS=0"
	exit 77
fi
if ldd "$BUILD/.libs/libkvtier.so.0" 2>/dev/null | grep -q libasan; then
	echo "run.sh: skipped: libkvtier is sanitized; the vLLM suite runs against a plain build"
	exit 77
fi
VENV=$(KVT_VENV_ROOT=${KVT_VENV_ROOT:-$BUILD/venv} sh "$SRC/scripts/venv.sh" vllm) || {
	echo "run.sh: the vLLM virtual environment could not be made (scripts/venv.sh vllm)" >&2
	exit 1
}
export PYTHONDONTWRITEBYTECODE=1
[ $# -gt 0 ] || set -- "$SRC/tests/vllm"
OUT=$(mktemp)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" >"$OUT" 2>&1
rc=$?
cat "$OUT"
# pytest's closing line, for scripts/dev.sh's summary ($KVT_TEST_SUMMARY, when set).
[ -z "${KVT_TEST_SUMMARY:-}" ] || echo "tests/vllm: $(grep -E '[0-9]+ (passed|failed)' "$OUT" | tail -1)" >>"$KVT_TEST_SUMMARY"
rm -f "$OUT"
exit "$rc"
