#!/bin/sh
# run.sh — tests/vllm: KvtierConnector inside real vLLM (its CPU build),
# against the build tree's kvtierd, with the kvtier package from the wheel
# (scripts/wheel.sh) installed into a directory on PYTHONPATH, as a pod
# gives it to the stock vLLM image; first the wheel installed into a clean
# venv (tests/vllm/wheel_smoke.py). KVT_VLLM_FROM_SOURCE=1 runs the suite
# on the source tree's package and the build tree's library instead. Pytest from the
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
if [ "${KVT_VLLM_FROM_SOURCE:-0}" != 1 ]; then
	WORK=$(mktemp -d)
	trap 'rm -rf "$WORK"' EXIT
	WHEEL=$(KVT_VENV_ROOT=${KVT_VENV_ROOT:-$BUILD/venv} sh "$SRC/scripts/wheel.sh" "$BUILD" "$WORK/dist" \
		"$WORK/package") || {
		echo "run.sh: the wheel could not be made (scripts/wheel.sh)" >&2
		exit 1
	}
	echo "run.sh: testing $(basename "$WHEEL")"
	/usr/bin/python3 -m venv "$WORK/clean" &&
		"$WORK/clean/bin/pip" install -q --no-index --no-deps "$WHEEL" &&
		env -u KVT_BUILDDIR -u KVTIER_LIBRARY KVTIERD="$BUILD/kvtierd" \
			"$WORK/clean/bin/python" "$SRC/tests/vllm/wheel_smoke.py" "$SRC" || {
		echo "run.sh: the wheel does not work from a clean venv" >&2
		exit 1
	}
	export KVT_PACKAGE_DIR="$WORK/package"
fi
[ $# -gt 0 ] || set -- "$SRC/tests/vllm"
OUT=$(mktemp)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" >"$OUT" 2>&1
rc=$?
cat "$OUT"
# pytest's closing line, for scripts/dev.sh's summary ($KVT_TEST_SUMMARY, when set).
[ -z "${KVT_TEST_SUMMARY:-}" ] || echo "tests/vllm: $(grep -E '[0-9]+ (passed|failed)' "$OUT" | tail -1)" >>"$KVT_TEST_SUMMARY"
rm -f "$OUT"
exit "$rc"
