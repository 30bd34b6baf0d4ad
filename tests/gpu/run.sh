#!/bin/sh
# run.sh — the GPU tests in one command: test_gpu, then test_gpu again under
# compute-sanitizer (memcheck, the daemon included) when the toolkit has it.
# Used by `make check-gpu` and by bench/gpu.sh on a GPU machine.
#
#   KVTIERD=path/to/kvtierd tests/gpu/run.sh path/to/test_gpu
set -u
TEST=${1:?usage: KVTIERD=... tests/gpu/run.sh TEST_GPU}
: "${KVTIERD:?set KVTIERD to the kvtierd binary}"
export KVTIERD CMOCKA_MESSAGE_OUTPUT=stdout
"$TEST"
rc=$?
[ $rc -eq 77 ] && { echo "run.sh: no GPU: skipped"; exit 77; }
[ $rc -ne 0 ] && { echo "run.sh: test_gpu failed ($rc)"; exit 1; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$CS" ]; then
	echo "run.sh: compute-sanitizer not found: the memcheck pass did not run"
	exit 0
fi
"$CS" --tool memcheck --target-processes all --error-exitcode 3 "$TEST" >"${TMPDIR:-/tmp}/compute-sanitizer.log" 2>&1
rc=$?
tail -5 "${TMPDIR:-/tmp}/compute-sanitizer.log"
[ $rc -ne 0 ] && { echo "run.sh: compute-sanitizer found errors ($rc)"; grep -m20 -B2 -A8 "=========" "${TMPDIR:-/tmp}/compute-sanitizer.log"; exit 1; }
echo "run.sh: test_gpu passed, and passed under compute-sanitizer memcheck"
