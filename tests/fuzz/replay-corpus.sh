#!/bin/sh
# replay-corpus.sh — replays each fuzz target's seed corpus (tests/fuzz/corpus/TARGET)
# through its replay build; a crash or sanitizer report fails the test.
set -eu
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
BUILD=${KVT_BUILDDIR:-.}
for target in config frame l2fmt api_body replies l3name; do
	"$BUILD/fuzz_${target}_replay" "$SRC/tests/fuzz/corpus/$target"
done
echo "6 passed, 0 failed"
