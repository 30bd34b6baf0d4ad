#!/bin/sh
# daemon.sh — kvtierd comes up on a temporary runtime dir, answers its probes,
# reloads on SIGHUP, stops cleanly on SIGTERM and SIGINT, and refuses bad
# settings with a non-zero exit and one clear message.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"

# --- a daemon that comes up and stops ---
cat >"$TMP/kvtier.json" <<JSON
{"l1-size": "64MiB", "log-level": "info"}
JSON
if start_daemon "$TMP/d1.log" --config "$TMP/kvtier.json"; then
	ok "kvtierd starts and logs ready"
else
	not_ok "kvtierd starts and logs ready"; cat "$TMP/d1.log"; finish; exit 1
fi
check "the runtime dir was created" test -d "$TMP/run"
# A control-plane address in use, or not of this host: the reason, never "port 0".
"$KVTIERD" --runtime-dir "$TMP/run-dup" --http "127.0.0.1:$PORT" >"$TMP/dup.out" 2>&1
check "an address in use is named with why" \
	grep -q "cannot listen on 127.0.0.1:$PORT: Address already in use (another process listens there)" "$TMP/dup.out"
echo "0123456789abcdef0123" >"$TMP/token"
"$KVTIERD" --runtime-dir "$TMP/run-foreign" --http "192.0.2.1:0" --admin-token-file "$TMP/token" \
	--l1-size 16MiB >"$TMP/foreign.out" 2>&1
check "an address not of this host is named with why" \
	grep -q "cannot listen on 192.0.2.1:0: Cannot assign requested address (not an address of this host)" "$TMP/foreign.out"
# Issue 37, item 5: the socket is group-writable whatever the umask, so workers of
# another user in the daemon's group connect.
check "the socket is mode 0660" test "$(stat -c %a "$TMP/run/kvtierd.sock")" = 660
check "the log line has a timestamp and a level" \
	grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z info  ready:' "$TMP/d1.log"
check "l1 size from the config file" grep -q "l1: 64 MiB in 16 regions of 4 MiB" "$TMP/d1.log"

body=$(curl -s -o - -w ' %{http_code} %{content_type}' "http://127.0.0.1:$PORT/healthz")
check "/healthz answers 200 JSON" test "$body" = '{"status":"ok"}
 200 application/json'
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")
check "/readyz answers 200 once ready" test "$code" = 200
body=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$PORT/nope")
check "an unknown path answers the JSON error shape with 404" \
	test "$body" = '{"error":{"code":"not_found","message":"no such endpoint"}} 404'
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$PORT/healthz")
check "a wrong method answers 405" test "$code" = 405

# SIGHUP: a live key is applied, a restart-only key is reported as such.
cat >"$TMP/kvtier.json" <<JSON
{"l1-size": "64MiB", "log-level": "debug", "l1-high-watermark": 0.9, "l1-low-watermark": 0.8,
 "max-leases": 10, "lease-default-ms": 700}
JSON
kill -HUP "$DAEMON_PID"
check "SIGHUP applies log-level" wait_for_line "$TMP/d1.log" "reload: log-level changed, applied"
check "SIGHUP applies watermarks" wait_for_line "$TMP/d1.log" "reload: l1-low-watermark changed, applied"
check "SIGHUP reports restart-only keys" \
	wait_for_line "$TMP/d1.log" "reload: max-leases changed, takes effect at the next restart"
check "SIGHUP applies lease-default-ms" \
	wait_for_line "$TMP/d1.log" "reload: lease-default-ms changed, applied"
check "the reloaded lease default is the policy's" \
	sh -c "curl -s http://127.0.0.1:$PORT/v1/policy | grep -q '\"lease_default_ms\": *700'"
echo '{"l1-size": ' >"$TMP/kvtier.json"
kill -HUP "$DAEMON_PID"
check "a broken file on reload is reported and the daemon carries on" \
	wait_for_line "$TMP/d1.log" "keeping the running settings"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")
check "still serving after a bad reload" test "$code" = 200

kill -TERM "$DAEMON_PID"
wait_exit
check "SIGTERM exits 0" test "$EXIT_CODE" = 0
check "SIGTERM logs stopping and stopped" grep -q "Terminated: stopping" "$TMP/d1.log"
check "the last line says stopped" sh -c "tail -n 1 '$TMP/d1.log' | grep -q 'info  stopped'"

if start_daemon "$TMP/d2.log" --l1-size 16MiB; then
	kill -INT "$DAEMON_PID"
	wait_exit
	check "SIGINT exits 0" test "$EXIT_CODE" = 0
else
	not_ok "second start"; cat "$TMP/d2.log"
fi

# --- bad settings: non-zero exit, one message naming what and where ---
refuses() { # refuses DESCRIPTION EXPECTED-FRAGMENT ARGS...
	desc=$1; want=$2; shift 2
	"$KVTIERD" --runtime-dir "$TMP/run-bad" --http 127.0.0.1:1 "$@" >"$TMP/bad.out" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && grep -q -- "$want" "$TMP/bad.out"; then
		ok "$desc"
	else
		not_ok "$desc (exit $rc): $(cat "$TMP/bad.out")"
	fi
}
refuses "an unknown flag" "kvtierd: --frobnicate: unknown option" --frobnicate
refuses "a bad size" "kvtierd: --l1-size: bad size '10QB'" --l1-size 10QB
refuses "L1 larger than memory" "kvtierd: l1-size: 64 TiB is more than" --l1-size 64TiB
echo '{"l1_size": "1GiB"}' >"$TMP/bad.json"
refuses "an unknown config key" "key \"l1_size\": unknown key" --config "$TMP/bad.json"
echo '{"l1-size": "1GiB",}' >"$TMP/bad.json"
refuses "invalid JSON, with the line" "config file $TMP/bad.json: line 1" --config "$TMP/bad.json"
refuses "a missing config file" "config file $TMP/none.json" --config "$TMP/none.json"
refuses "an unwritable socket directory" "socket /etc/passwd/kvtierd.sock: directory /etc/passwd is not writable" \
	--socket /etc/passwd/kvtierd.sock
refuses "a runtime dir that cannot be made" "runtime-dir /etc/passwd/rt: cannot create" \
	--runtime-dir /etc/passwd/rt
"$KVTIERD" --runtime-dir "$TMP/run-bad" --l1-size 10QB >/dev/null 2>"$TMP/bad.out"
check "a bad flag exits with status 2" test $? = 2
check "a bad flag prints exactly one line" test "$(wc -l <"$TMP/bad.out")" = 1

out=$("$KVTIERD" --version)
check "--version names the version" sh -c "echo '$out' | grep -q '^kvtierd (kvtier) [0-9]'"
"$KVTIERD" --help >"$TMP/help.out"
check "--help exits 0 and lists --l1-size" grep -q -- "--l1-size SIZE" "$TMP/help.out"
finish
