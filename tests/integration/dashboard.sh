#!/bin/sh
# dashboard.sh — starts kvtierd (with L2, L3 and an admin token) and runs
# dashboard.py in headless Chromium against it, with kvtier-bench traffic.
# Screenshots land in dashboard-screenshots/ of the build directory.
# Needs Debian's chromium, chromium-driver and python3-selenium (scripts/dev.sh
# installs them).
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
: "${KVTIER_BENCH:?KVTIER_BENCH must name the kvtier-bench binary}"
PY=/usr/bin/python3  # Debian's, where python3-selenium is
for need in /usr/bin/chromium /usr/bin/chromedriver; do
	[ -x "$need" ] || { not_ok "$need is installed (Debian chromium, chromium-driver)"; finish; exit 1; }
done
$PY -c 'import selenium' 2>/dev/null || { not_ok "python3-selenium is installed"; finish; exit 1; }
TOKEN=kvtier-dashboard-token-0123456789
echo "$TOKEN" >"$TMP/token"
mkdir -p "$TMP/l3"
if ! start_daemon "$TMP/d.log" --l1-size 256MiB --l2-path "$TMP/l2" --l2-size 64MiB \
	--l3-path "$TMP/l3" --admin-token-file "$TMP/token"; then
	not_ok "kvtierd starts"; cat "$TMP/d.log"; finish; exit 1
fi
SHOTS=${KVT_BUILDDIR:-.}/dashboard-screenshots
rm -rf "$SHOTS"; mkdir -p "$SHOTS/frames"
# dashboard.py asks for the daemon to stop by writing $SHOTS/frames/../stop-daemon.
(
	while [ ! -e "$SHOTS/stop-daemon" ]; do sleep 0.1; done
	kill -TERM "$DAEMON_PID"
) &
WATCH=$!
HOME=$TMP $PY "$KVT_SRCDIR/tests/integration/dashboard.py" "$PORT" "$TOKEN" "$SHOTS/frames" \
	"$KVTIER_BENCH" --socket "$TMP/run/kvtierd.sock" --blocks 96 --block-size 1MiB \
	--lanes 2 >"$TMP/py.out" 2>&1
rc=$?
cat "$TMP/py.out"
PASSED=$((PASSED + $(grep -c '^ok - ' "$TMP/py.out")))
FAILED=$((FAILED + $(grep -c '^not ok - ' "$TMP/py.out")))
check "dashboard.py exits 0" test "$rc" = 0
kill "$WATCH" 2>/dev/null
# dashboard.py stops the daemon itself; one that failed before it did leaves it running.
[ -e "$SHOTS/stop-daemon" ] || kill -TERM "$DAEMON_PID" 2>/dev/null
wait_exit
rm -f "$SHOTS/stop-daemon"
finish
