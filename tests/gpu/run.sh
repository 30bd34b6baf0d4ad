#!/bin/sh
# run.sh — the GPU tests in one command: test_gpu, then test_gpu again under
# compute-sanitizer (memcheck, the daemon included) when the toolkit has it,
# then the tensor-parallel check (kvtier-tp-bench: two rank processes and a
# scheduler against one kvtierd, small sizes). Used by `make check-gpu` and
# by bench/gpu.sh on a GPU machine.
#
#   KVTIERD=path/to/kvtierd tests/gpu/run.sh path/to/test_gpu [path/to/kvtier-tp-bench]
set -u
TEST=${1:?usage: KVTIERD=... tests/gpu/run.sh TEST_GPU [TP_BENCH]}
TP=${2:-}
: "${KVTIERD:?set KVTIERD to the kvtierd binary}"
export KVTIERD CMOCKA_MESSAGE_OUTPUT=stdout
"$TEST"
rc=$?
[ $rc -eq 77 ] && { echo "run.sh: no GPU: skipped"; exit 77; }
[ $rc -ne 0 ] && { echo "run.sh: test_gpu failed ($rc)"; exit 1; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$CS" ]; then
	echo "run.sh: compute-sanitizer not found: the memcheck pass did not run"
else
	LOG=${TMPDIR:-/tmp}/compute-sanitizer.log
	"$CS" --tool memcheck --target-processes all --error-exitcode 3 "$TEST" >"$LOG" 2>&1
	rc=$?
	tail -5 "$LOG"
	if [ $rc -ne 0 ]; then
		echo "run.sh: compute-sanitizer found errors ($rc)"
		grep -m20 -B2 -A8 "=========" "$LOG"
		exit 1
	fi
	echo "run.sh: test_gpu passed under compute-sanitizer memcheck"
fi
if [ -n "$TP" ]; then
	. "$(dirname "$0")/../../bench/lib.sh"
	DIR=$(mktemp -d /tmp/kvtier-tp-test.XXXXXX)
	trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
	kvtierd_start "$KVTIERD" "$DIR" --l1-size 1GiB || exit 1
	"$TP" --socket "$DIR/kvtierd.sock" --ranks 2 --requests 2 --blocks 8 --block-bytes 2359296 \
		--repeats 1 || { echo "run.sh: the tensor-parallel check failed"; exit 1; }
	echo "run.sh: the tensor-parallel check passed"
fi
echo "run.sh: test_gpu passed"
