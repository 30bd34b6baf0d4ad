#!/bin/sh
# carry.sh — copies built binaries and every shared library they need (but
# glibc's own) into DEST/bin and DEST/lib, so they run on a machine without
# our Debian packages (the GPU host): LD_LIBRARY_PATH=DEST/lib DEST/bin/...
#
#   bench/carry.sh BUILD-DIR DEST
set -eu
BUILD=$1
DEST=$2
mkdir -p "$DEST/bin" "$DEST/lib"
# The GPU test is a check program: `make` alone does not build it.
make -C "$BUILD" -s test_gpu >/dev/null 2>&1 || true
for b in kvtierd kvtier-bench test_gpu kvtier-gpu-bench kvtier-pipeline-bench kvtier-tp-bench; do
	[ -e "$BUILD/$b" ] || continue # the GPU ones exist in CUDA builds only
	# A libtool wrapper script stands for .libs/$b; a program linked statically to
	# our libraries is $b itself (a stale .libs/$b of an older build may remain).
	if head -c 2 "$BUILD/$b" | grep -q '#!'; then
		cp "$BUILD/.libs/$b" "$DEST/bin/$b"
	else
		cp "$BUILD/$b" "$DEST/bin/$b"
	fi
done
# The disk's ceiling for bench/lib.sh's disk_ceiling, where fio is missing.
CEIL=$(dirname "$0")/../../shared/tools/ceilings/uring_read.c
[ -f "$CEIL" ] && gcc -O2 -static "$CEIL" -o "$DEST/bin/uring_read" -luring
cp -L "$BUILD"/.libs/libkvtier.so.0 "$DEST/lib/"
for b in "$DEST"/bin/*; do
	LD_LIBRARY_PATH="$DEST/lib" ldd "$b" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
	while read -r lib; do
		[ "$(dirname "$lib")" = "$DEST/lib" ] || cp -L "$lib" "$DEST/lib/" # libkvtier is there
	done
ls "$DEST/bin" "$DEST/lib"
