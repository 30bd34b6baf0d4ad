# lib.sh — shared by the integration tests: a temporary directory, a daemon
# started on a free loopback port, bounded waits, and checks that say what failed.
set -u
: "${KVTIERD:?KVTIERD must name the kvtierd binary}"
TMP=$(mktemp -d /tmp/kvtier-it.XXXXXX)
DAEMON_PID=
PASSED=0
FAILED=0

cleanup() {
	[ -n "$DAEMON_PID" ] && kill -9 "$DAEMON_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }
check() { # check DESCRIPTION COMMAND...: 0 when it passed, 1 when not
	desc=$1; shift
	if "$@"; then ok "$desc"; else not_ok "$desc"; return 1; fi
}

# Waits (at most 10 s, polling) until FILE contains PATTERN.
wait_for_line() {
	i=0
	while [ $i -lt 200 ]; do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
		i=$((i + 1))
	done
	return 1
}

# Waits (at most 10 s) for the daemon to exit; sets EXIT_CODE.
wait_exit() {
	i=0
	while kill -0 "$DAEMON_PID" 2>/dev/null && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	wait "$DAEMON_PID"
	EXIT_CODE=$?
	DAEMON_PID=
}

# start_daemon LOG ARGS...: starts kvtierd on a free loopback port (PORT),
# waits for its "ready:" line; returns non-zero when it never came up. LOG
# is emptied before the fork, so that a restart on the same LOG cannot take
# the last daemon's "ready:" line for this one's (the background child
# truncates it only when it gets to run).
start_daemon() {
	log=$1; shift
	: >"$log"
	# Port 0: the kernel picks a free one, named by the ready line; a daemon
	# already running on this machine (on 8470) never stands in the way.
	"$KVTIERD" --runtime-dir "$TMP/run" --http "127.0.0.1:0" "$@" >"$log" 2>&1 &
	DAEMON_PID=$!
	i=0
	while [ $i -lt 1200 ]; do  # at most 60 s: a loaded machine maps L1 slowly
		PORT=$(sed -n 's|.*ready: control plane on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$log")
		if [ -n "$PORT" ]; then return 0; fi
		if ! kill -0 "$DAEMON_PID" 2>/dev/null; then break; fi
		sleep 0.05
		i=$((i + 1))
	done
	wait "$DAEMON_PID" 2>/dev/null
	DAEMON_PID=
	return 1
}

finish() {
	echo "$PASSED passed, $FAILED failed"
	[ "$FAILED" -eq 0 ]
}
