#!/bin/sh
# image.sh — the kvtierd container image, built from Debian's packages with
# Debian's tools (no registry, no container engine): mmdebstrap makes a
# bookworm root with kvtierd's runtime libraries, `make install` puts
# kvtierd, its man pages and the dashboard in it, the CUDA runtime kvtierd
# links (NVIDIA's redistributable; the driver comes from the node), and
# /opt/kvtier: the Python wheel and the package installed from it, which a
# pod copies onto the stock vLLM image's PYTHONPATH. umoci makes that root an
# OCI image: user 65532, entrypoint kvtierd, no shell in the way.
#
#   scripts/image.sh BUILD_DIR OUT_DIR   (as root; make image runs it)
#
# Leaves OUT_DIR/oci (an OCI layout, tag kvtierd:VERSION) and prints its
# path. Push it to your registry with skopeo (deploy/docker/README.md).
set -eu
[ $# -eq 2 ] || { echo "usage: scripts/image.sh BUILD_DIR OUT_DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "image.sh: needs root (mmdebstrap, make install into the root)" >&2; exit 1; }
for tool in mmdebstrap umoci; do
	command -v $tool >/dev/null || { echo "image.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
VERSION=$("$BUILD/kvtierd" --version | awk 'NR == 1 {print $3}' | tr -cd '0-9.')
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root

mmdebstrap --quiet --variant=essential \
	--include=libmicrohttpd12,libjansson4,liburing2,libxxhash0,libnettle8 \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	bookworm "$ROOT" >"$WORK/mmdebstrap.log" 2>&1 || { tail -20 "$WORK/mmdebstrap.log" >&2; exit 1; }
# Installed with the build's own prefix: the paths compiled into kvtierd (the
# dashboard's directory) are then right inside the image.
make -s -C "$BUILD" install DESTDIR="$ROOT" >"$WORK/install.log" 2>&1 ||
	{ tail -20 "$WORK/install.log" >&2; exit 1; }
KVTIERD=$(cd "$ROOT" && find . -path '*/sbin/kvtierd' | sed 's|^\.||')
# The CUDA runtime kvtierd was linked with, where its run path looks.
ldd "$ROOT$KVTIERD" 2>/dev/null | awk '/libcudart/ {print $3}' | while read -r lib; do
	mkdir -p "$ROOT$(dirname "$lib")"
	cp -L "$lib" "$ROOT$lib"
done
# The wheel, and the package installed from it for vLLM's PYTHONPATH.
sh "$TOP/scripts/wheel.sh" "$BUILD" "$ROOT/opt/kvtier/wheel" "$ROOT/opt/kvtier/python" >/dev/null
# The user, and the directories the manifests mount over.
echo "kvtier:x:65532:65532:kvtier:/var/lib/kvtier:/usr/sbin/nologin" >>"$ROOT/etc/passwd"
echo "kvtier:x:65532:" >>"$ROOT/etc/group"
mkdir -p "$ROOT/run/kvtier" "$ROOT/var/lib/kvtier/l2" "$ROOT/etc/kvtier"
chown 65532:65532 "$ROOT/run/kvtier" "$ROOT/var/lib/kvtier" "$ROOT/var/lib/kvtier/l2"
rm -rf "$ROOT/var/cache/apt"/* "$ROOT/var/lib/apt/lists"/*

rm -rf "$OUT/oci"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:kvtierd-$VERSION"
umoci unpack --image "$OUT/oci:kvtierd-$VERSION" "$WORK/bundle" >/dev/null
rm -rf "$WORK/bundle/rootfs"
mv "$ROOT" "$WORK/bundle/rootfs"
umoci repack --image "$OUT/oci:kvtierd-$VERSION" "$WORK/bundle"
umoci config --image "$OUT/oci:kvtierd-$VERSION" --config.user 65532:65532 \
	--config.entrypoint "$KVTIERD" \
	--config.cmd=--runtime-dir --config.cmd=/run/kvtier --config.cmd=--http --config.cmd=127.0.0.1:8470 \
	--config.exposedports 8470/tcp --config.workingdir / \
	--config.label org.opencontainers.image.title=kvtierd \
	--config.label "org.opencontainers.image.version=$VERSION"
umoci gc --layout "$OUT/oci"
echo "$OUT/oci"
