#!/bin/sh
# run.sh — the Python package's tests: pytest (Debian's python3, where
# scripts/dev.sh installs python3-pytest, python3-numpy and python3-torch)
# against the build tree's kvtierd and libkvtier. KVT_PYTHON picks another
# interpreter; arguments (test files, -k ...) go to pytest, in place of the
# whole directory.
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
PY=${KVT_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import pytest, numpy, torch" 2>/dev/null; then
	echo "run.sh: $PY lacks pytest, numpy or torch: install python3-pytest python3-numpy python3-torch (scripts/dev.sh does)" >&2
	exit 1
fi
export PYTHONDONTWRITEBYTECODE=1
# A sanitized libkvtier wants the ASan runtime first in the process: preload it
# (leak checking stays off: the interpreter itself does not free at exit).
LIB=${KVT_BUILDDIR:-.}/.libs/libkvtier.so.0
ASAN=$(ldd "$LIB" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$ASAN" ]; then
	export LD_PRELOAD="$ASAN${LD_PRELOAD:+ $LD_PRELOAD}"
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=1"
fi
[ $# -gt 0 ] || set -- "$SRC/tests/python"
exec "$PY" -m pytest -q -p no:cacheprovider "$@"
