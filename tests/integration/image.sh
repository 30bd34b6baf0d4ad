#!/bin/sh
# image.sh — the kvtierd image built here from Debian's packages
# (scripts/image.sh: mmdebstrap, umoci), inspected and run: its config runs
# kvtierd itself as user 65532 (no shell), its root holds kvtierd, the
# dashboard, the CUDA runtime it links and the Python package for vLLM's
# PYTHONPATH, and kvtierd from that root answers --version, starts, serves
# the dashboard and stops cleanly. Skipped (77) without root, without the
# tools, or for a sanitized build (the image carries no sanitizer runtime).
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
BUILD=${KVT_BUILDDIR:-.}
[ "$(id -u)" -eq 0 ] || { echo "image.sh: skipped: needs root"; exit 77; }
for tool in mmdebstrap umoci chroot; do
	command -v $tool >/dev/null || { echo "image.sh: skipped: no $tool"; exit 77; }
done
if ldd "$BUILD/.libs/libkvtier.so.0" 2>/dev/null | grep -q libasan; then
	echo "image.sh: skipped: a sanitized build"; exit 77
fi
OCI=$(KVT_VENV_ROOT=${KVT_VENV_ROOT:-$BUILD/venv} sh "$SRC/scripts/image.sh" "$BUILD" "$TMP/image" 2>"$TMP/image.err")
check "scripts/image.sh builds the image from Debian's packages" test -d "$OCI" || cat "$TMP/image.err"
TAG=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/index.json"))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$OCI")
umoci unpack --image "$OCI:$TAG" "$TMP/bundle" >/dev/null 2>&1
ROOT=$TMP/bundle/rootfs
python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["process"]
print(p["user"]["uid"], p["user"]["gid"], p["args"][0])' "$TMP/bundle/config.json" >"$TMP/process"
read -r uid gid exe <"$TMP/process"
check "the image runs as user 65532:65532" test "$uid:$gid" = 65532:65532
check "its entrypoint is kvtierd itself, no shell ($exe)" sh -c "case '$exe' in */sbin/kvtierd) [ -x '$ROOT$exe' ];; *) false;; esac"
check "it holds the dashboard" sh -c "find '$ROOT' -path '*/share/kvtier/web/index.html' | grep -q ."
check "it holds the Python package for vLLM's PYTHONPATH" test -f "$ROOT/opt/kvtier/python/kvtier/libkvtier.so.0"
check "kvtierd --version runs from the image's root, as its user" \
	sh -c "chroot --userspec=65532:65532 '$ROOT' '$exe' --version | grep -q '^kvtierd (kvtier)'"
mkdir -p "$ROOT/tmp/rt" && chown 65532:65532 "$ROOT/tmp/rt"
chroot --userspec=65532:65532 "$ROOT" "$exe" --runtime-dir /tmp/rt --http 127.0.0.1:0 --l1-size 16MiB \
	>"$TMP/run.log" 2>&1 &
PID=$!
i=0
while [ $i -lt 600 ] && ! grep -q "ready:" "$TMP/run.log"; do sleep 0.05; i=$((i + 1)); done
check "kvtierd starts from the image's root and serves the dashboard" \
	sh -c "grep -q 'ready:' '$TMP/run.log' && grep -q 'dashboard: serving' '$TMP/run.log'"
kill -TERM $PID 2>/dev/null
wait $PID
check "and stops cleanly (exit 0)" test $? = 0
check "the package in the image loads its bundled library" \
	env -u KVT_BUILDDIR -u KVTIER_LIBRARY PYTHONPATH="$ROOT/opt/kvtier/python" python3 -c '
import kvtier, os, sys
sys.exit(0 if os.path.dirname(os.path.realpath(kvtier._lib.lib._name)) == os.path.dirname(os.path.realpath(kvtier.__file__)) else 1)'
finish
