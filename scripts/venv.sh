#!/bin/sh
# venv.sh — the Python virtual environments the tests need beyond Debian's
# packages: one per purpose, each made from tests/requirements-PURPOSE.txt (a
# complete lock of pinned versions, installed with --no-deps, so what runs is
# exactly what the file says) with Debian's python3 and python3-venv.
#
#   scripts/venv.sh PURPOSE     make or reuse the environment; print its path
#
# Environments live under $KVT_VENV_ROOT (default: build/venv of the source
# tree). One whose recorded requirements equal the file is reused as it is; a
# changed file rebuilds it. Concurrent callers wait on a lock. Progress goes to
# stderr; stdout is the path alone. Exits non-zero (and prints pip's end) when
# the environment cannot be made.
set -eu
[ $# -eq 1 ] || { echo "usage: scripts/venv.sh PURPOSE" >&2; exit 2; }
TOP=$(cd "$(dirname "$0")/.." && pwd)
REQ=$TOP/tests/requirements-$1.txt
[ -f "$REQ" ] || { echo "venv.sh: no $REQ" >&2; exit 2; }
ROOT=${KVT_VENV_ROOT:-$TOP/build/venv}
DIR=$ROOT/$1
PYTHON=${KVT_VENV_PYTHON:-/usr/bin/python3}
mkdir -p "$ROOT"
exec 9>"$DIR.lock"
flock 9
if ! cmp -s "$REQ" "$DIR/requirements.txt" 2>/dev/null; then
	echo "==> venv.sh: making $DIR from $(basename "$REQ")" >&2
	rm -rf "$DIR"
	"$PYTHON" -m venv "$DIR" >&2
	"$DIR/bin/python" -m pip install -q --no-input --disable-pip-version-check --no-deps \
		-r "$REQ" >"$ROOT/$1.pip.log" 2>&1 ||
		{ tail -30 "$ROOT/$1.pip.log" >&2; rm -rf "$DIR"; exit 1; }
	cp "$REQ" "$DIR/requirements.txt"
fi
echo "$DIR"
