#!/bin/sh
# dev.sh — set up a Debian machine for kvtier and run it, or run every test.
#
#   scripts/dev.sh run [KVTIERD-FLAGS...]  install what is missing, build, run kvtierd
#   scripts/dev.sh test                    install what is missing, build three ways
#                                          (plain -Werror with distcheck, ASan+UBSan,
#                                          without CUDA) and run every test on each
#
# Missing Debian packages are installed with apt-get (as root, or through sudo).
# What Debian lacks comes from PyPI at pinned versions, one virtual environment
# per tests/requirements-*.txt, made under build/venv by scripts/venv.sh and
# reused while its file is unchanged.
set -eu
cd "$(dirname "$0")/.."
TOP=$(pwd)
JOBS=$(nproc 2>/dev/null || echo 2)

# What building and running kvtierd needs (run; python3-venv for make wheel),
# and what the tests add (test): a browser, Prometheus, PyTorch, the image
# tools. Run installs no recommended packages, so a host that only runs
# kvtier gets no services it did not ask for.
RUN_PACKAGES="build-essential autoconf automake libtool pkg-config \
libmicrohttpd-dev libjansson-dev liburing-dev libxxhash-dev nettle-dev python3 python3-venv curl"
TEST_PACKAGES="libcmocka-dev prometheus python3-pytest python3-numpy python3-torch
python3-setuptools python3-matplotlib chromium chromium-driver python3-selenium
yamllint systemd mmdebstrap umoci"

say() { printf '==> %s\n' "$*"; }

# install_packages [APT-FLAGS] -- PACKAGES...: installs those not yet installed.
install_packages() {
	flags=
	while [ "$1" != "--" ]; do flags="$flags $1"; shift; done
	shift
	missing=
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	say "installing Debian packages:$missing"
	if [ "$(id -u)" -eq 0 ]; then
		SUDO=
	elif command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		echo "dev.sh: need root (or sudo) to install:$missing" >&2
		exit 1
	fi
	$SUDO apt-get update -q
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $flags $missing
}

generate() {
	# ./configure run in the source tree by hand stops every out-of-tree build.
	if [ -f config.status ]; then
		say "the source tree was configured in place (./configure by hand): make distclean, so that build/* configure"
		make distclean >/dev/null 2>&1 || rm -f config.status config.h Makefile
	fi
	if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
		say "generating ./configure"
		./autogen.sh >/dev/null
	fi
}

# build DIR CONFIGURE-FLAGS...: configure (once per flag set) and make in DIR.
build() {
	dir=$1; shift
	mkdir -p "$dir"
	if [ ! -f "$dir/config.status" ] || [ "$(cat "$dir/.flags" 2>/dev/null)" != "$*" ] ||
		[ configure -nt "$dir/config.status" ]; then
		say "configuring $dir: $*"
		(cd "$dir" && "$TOP/configure" "$@" >configure.out) ||
			{ cat "$dir/configure.out" "$dir/config.log" | tail -40; exit 1; }
		echo "$*" >"$dir/.flags"
	fi
	say "building $dir"
	make -C "$dir" -j"$JOBS" >"$dir/make.out" 2>&1 || { tail -40 "$dir/make.out"; exit 1; }
}

# check DIR TARGET: runs the test target; prints the suite summary.
TOTAL_PASS=0
TOTAL_FAIL=0
check() {
	dir=$1 target=$2
	say "make $target in $dir"
	rc=0
	make -C "$dir" -j"$JOBS" "$target" >"$dir/$target.out" 2>&1 || rc=$?
	grep -E '^# (TOTAL|PASS|FAIL|ERROR):' "$dir/$target.out" | tail -4 | sed 's/^/    /'
	pass=$(grep -E '^# PASS:' "$dir/$target.out" | tail -1 | awk '{print $3}')
	fail=$(grep -E '^# (FAIL|ERROR):' "$dir/$target.out" | tail -2 | awk '{s += $3} END {print s + 0}')
	TOTAL_PASS=$((TOTAL_PASS + ${pass:-0}))
	TOTAL_FAIL=$((TOTAL_FAIL + ${fail:-0}))
	if [ $rc -ne 0 ]; then
		tail -60 "$dir/$target.out"
		find "$dir" -name '*.log' -newer "$dir/make.out" ! -name config.log \
			-exec grep -l -E '^(FAIL|ERROR)|not ok|\[  FAILED  \]|ERROR:' {} + 2>/dev/null |
			while read -r log; do
				echo "--- $log: its failures"
				grep -E -B2 -A2 '\[  (FAILED|ERROR)  ? *\]|: error: |^not ok' "$log" | head -60
				echo "--- $log: its end"
				tail -40 "$log"
			done
		# A target that failed with no test counted failing (a build error) counts once.
		[ "${fail:-0}" -gt 0 ] || TOTAL_FAIL=$((TOTAL_FAIL + 1))
	fi
}

case "${1:-}" in
run)
	shift
	# shellcheck disable=SC2086
	install_packages --no-install-recommends -- $RUN_PACKAGES
	generate
	build build/release
	say "starting kvtierd (Ctrl-C stops it)"
	exec build/release/kvtierd "$@"
	;;
test)
	# kubectl renders the Kustomize overlays for tests/deploy: Debian's, unless one is installed.
	command -v kubectl >/dev/null 2>&1 || TEST_PACKAGES="$TEST_PACKAGES kubernetes-client"
	# shellcheck disable=SC2086
	install_packages -- $RUN_PACKAGES $TEST_PACKAGES
	export KVT_VENV_ROOT="$TOP/build/venv"
	# Suites that count their own cases (tests/vllm) write their closing line here.
	export KVT_TEST_SUMMARY="$TOP/build/test-summary"
	mkdir -p build && : >"$KVT_TEST_SUMMARY"
	for req in tests/requirements-*.txt; do
		purpose=${req#tests/requirements-}
		venv=$(scripts/venv.sh "${purpose%.txt}")
		say "virtual environment ${purpose%.txt}: $venv"
	done
	generate
	build build/plain --enable-werror
	check build/plain distcheck
	# tests/vllm takes minutes of real vLLM engines: the plain build ran it.
	export KVT_VLLM_TESTS=0
	build build/sanitize --enable-werror --enable-sanitizers
	check build/sanitize check
	build build/nocuda --enable-werror --without-cuda
	check build/nocuda check
	sed 's/^/    /' "$KVT_TEST_SUMMARY"
	echo "tests: $TOTAL_PASS passed, $TOTAL_FAIL failed"
	[ "$TOTAL_FAIL" -eq 0 ]
	;;
*)
	echo "usage: scripts/dev.sh run [KVTIERD-FLAGS...] | scripts/dev.sh test" >&2
	exit 2
	;;
esac
