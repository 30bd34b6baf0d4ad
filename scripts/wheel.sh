#!/bin/sh
# wheel.sh — the kvtier Python wheel: the package with libkvtier (CUDA
# kernels for sm_80 and sm_90, and PTX for later GPUs, where the build has
# nvcc) bundled beside it, made with PyPI's standard tools (build, then
# auditwheel repair, which grafts the libraries libkvtier needs, libxxhash
# and the CUDA runtime, and tags it manylinux). `import kvtier` finds the
# bundled library with no environment variable.
#
#   scripts/wheel.sh BUILD_DIR OUT_DIR [TARGET]   (make wheel runs it)
#
# With TARGET, the wheel is also installed there (pip install --target): the
# package as a pod puts it on the stock vLLM image's PYTHONPATH.
#
# The tools come from the virtual environment scripts/venv.sh wheel makes
# from tests/requirements-wheel.txt. Prints the wheel's path.
set -eu
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: scripts/wheel.sh BUILD_DIR OUT_DIR [TARGET]" >&2; exit 2; }
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
LIB=$BUILD/.libs/libkvtier.so.0
[ -f "$LIB" ] || { echo "wheel.sh: no $LIB: build first (make)" >&2; exit 1; }
VENV=$(sh "$TOP/scripts/venv.sh" wheel)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
# The package as the source tree has it, its pyproject, and the library beside it.
cp -r "$TOP/python/kvtier" "$STAGE/"
find "$STAGE/kvtier" -name '__pycache__' -prune -exec rm -rf {} +
rm -f "$STAGE/kvtier/_paths.py"
cp -L "$LIB" "$STAGE/kvtier/libkvtier.so.0"
cp "$TOP/python/README.md" "$TOP/LICENSE" "$STAGE/"
sed -e 's|^packages = .*|packages = ["kvtier", "kvtier.connector"]\
package-data = {kvtier = ["libkvtier.so.0"]}|' \
	-e 's|^requires-python = .*|requires-python = ">=3.10"|' \
	"$TOP/python/pyproject.toml" >"$STAGE/pyproject.toml"
# A pure-Python wheel first (py3-none-any), then tagged for this platform: the
# library is the package's only binary and does not depend on Python's version.
"$VENV/bin/python" -m build --wheel --no-isolation --outdir "$STAGE/dist" "$STAGE" >"$STAGE/build.log" 2>&1 ||
	{ tail -30 "$STAGE/build.log" >&2; exit 1; }
"$VENV/bin/python" -m wheel tags --remove --platform-tag linux_x86_64 "$STAGE"/dist/*.whl >/dev/null
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair --plat manylinux_2_34_x86_64 -w "$STAGE/repaired" \
	"$STAGE"/dist/*linux_x86_64.whl >"$STAGE/repair.log" 2>&1 ||
	{ tail -30 "$STAGE/repair.log" >&2; exit 1; }
rm -f "$OUT"/kvtier-*.whl
cp "$STAGE"/repaired/*.whl "$OUT/"
if [ $# -eq 3 ]; then
	"$VENV/bin/pip" install -q --no-index --no-deps --target "$3" "$OUT"/kvtier-*.whl >&2 ||
		{ echo "wheel.sh: cannot install the wheel into $3" >&2; exit 1; }
fi
ls "$OUT"/kvtier-*.whl
