#!/bin/sh
# api.sh — every control-plane endpoint: its answer, each documented error,
# the auth rules, an oversized body, invalid JSON, a wrong media type and a
# wrong method; the error shape is the same everywhere.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
TOKEN=kvtier-test-token-0123456789
echo "  $TOKEN  " >"$TMP/token"
if ! start_daemon "$TMP/d.log" --l1-size 64MiB --admin-token-file "$TMP/token"; then
	not_ok "kvtierd starts"; cat "$TMP/d.log"; finish; exit 1
fi
B="http://127.0.0.1:$PORT"

# req METHOD PATH [BODY [CONTENT-TYPE [TOKEN]]]: sets CODE and BODY.
req() {
	set -- "$1" "$2" "${3-}" "${4-application/json}" "${5-$TOKEN}"
	if [ -n "$3" ]; then
		printf '%s' "$3" >"$TMP/body"
		CODE=$(curl -s -o "$TMP/out" -w '%{http_code}' -X "$1" -H "Content-Type: $4" \
			-H "Authorization: Bearer $5" --data-binary @"$TMP/body" "$B$2")
	else
		CODE=$(curl -s -o "$TMP/out" -w '%{http_code}' -X "$1" \
			-H "Authorization: Bearer $5" "$B$2")
	fi
	BODY=$(cat "$TMP/out")
}
expect() { # expect DESCRIPTION CODE FRAGMENT
	if [ "$CODE" = "$2" ] && printf '%s' "$BODY" | grep -qF -- "$3"; then
		ok "$1"
	else
		not_ok "$1: got $CODE $BODY, wanted $2 with $3"
	fi
}

req GET /v1/tiers
expect "GET /v1/tiers lists l1" 200 '{"tiers":[{"name":"l1","capacity_bytes":67108864,"used_bytes":0,"items":0,"hits":0,"misses":0,"evictions":0,"dirty_items":0,"dirty_bytes":0}]}'
req POST /v1/tiers
expect "POST /v1/tiers is 405" 405 '{"error":{"code":"method_not_allowed","message":"use GET"}}'
req GET /v1/stats
expect "GET /v1/stats has l1 and dataplane" 200 '"dataplane":{'
req GET /v1/namespaces
expect "GET /v1/namespaces, none yet" 200 '{"namespaces":[]}'
req DELETE /v1/namespaces
expect "DELETE /v1/namespaces is 405" 405 'method_not_allowed'
req GET /v1/nope
expect "an unknown /v1 path is 404" 404 '{"error":{"code":"not_found"'

# Policy: read, auth, validation, live change, echo.
req GET /v1/policy "" "" none
expect "GET /v1/policy needs no token" 200 '{"mode":"l1-only","tiers":{"l1":{"high_watermark":0.95,"low_watermark":0.9}},"lease_max_ms":30000,"lease_default_ms":5000,"store_wait_ms":1000}'
req PUT /v1/policy '{"lease_max_ms": 5000}' application/json wrong-token-0123456789
expect "PUT with a wrong token is 401" 401 '{"error":{"code":"unauthorized"'
CODE=$(curl -s -o "$TMP/out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
	--data-binary '{}' "$B/v1/policy")
BODY=$(cat "$TMP/out")
expect "PUT without a token is 401" 401 'Authorization: Bearer'
req PUT /v1/policy '{"tiers":{"l1":{"high_watermark":0.8,"low_watermark":0.6}},"lease_max_ms":5000,"lease_default_ms":2000,"store_wait_ms":250}'
expect "PUT /v1/policy applies and echoes" 200 '{"mode":"l1-only","tiers":{"l1":{"high_watermark":0.8,"low_watermark":0.6}},"lease_max_ms":5000,"lease_default_ms":2000,"store_wait_ms":250}'
req GET /v1/policy
expect "the change is live" 200 '"high_watermark":0.8'
req PUT /v1/policy '{"tiers":{"l1":{"low_watermark":0.9}}}'
expect "watermarks out of order name the field" 400 '{"error":{"code":"invalid_field","message":"tiers.l1.low_watermark: 0.9 must be below high_watermark 0.8"}}'
req PUT /v1/policy '{"tiers":{"l1":{"high_watermark":0.02,"low_watermark":0.01}}}'
expect "near-zero watermarks are refused (issue 36, item 19)" 400 '{"error":{"code":"invalid_field","message":"tiers.l1.low_watermark: 0.01 is below 0.5: each eviction would empty most of L1"}}'
req PUT /v1/policy '{"tiers":{"l1":{"high_watermark":"high"}}}'
expect "a wrong type names the field" 400 'tiers.l1.high_watermark: must be a number in (0, 1]'
req PUT /v1/policy '{"colour":"blue"}'
expect "an unknown key names the field" 400 'colour: unknown field'
req PUT /v1/policy '{"tiers":{"l2":{}}}'
expect "an unknown tier key names the field" 400 'tiers.l2: unknown field'
req PUT /v1/policy '{"lease_max_ms": 0}'
expect "lease_max_ms out of range" 400 'lease_max_ms: must be an integer in 1..3600000'
req PUT /v1/policy '{"store_wait_ms": -1}'
expect "store_wait_ms out of range" 400 'store_wait_ms: must be an integer in 0..3600000'
req PUT /v1/policy '{"lease_max_ms": 1000, "lease_default_ms": 2000}'
expect "a default lease longer than the longest is 400" 400 '{"error":{"code":"invalid_field","message":"lease_default_ms: 2000 must not be longer than lease_max_ms 1000"}}'
req PUT /v1/policy '{"lease_max_ms": 1000}'
expect "so is a longest lease cut below the default" 400 'lease_default_ms: 2000 must not be longer than lease_max_ms 1000'
req PUT /v1/policy '{"lease_default_ms": "soon"}'
expect "lease_default_ms of the wrong type" 400 'lease_default_ms: must be an integer in 1..3600000'
req PUT /v1/policy '{"mode":"evict"}'
expect "evict mode without L2 is 409" 409 '{"error":{"code":"no_l2"'
req PUT /v1/policy '{"mode":"fast"}'
expect "an unknown mode is 400" 400 'mode: must be \"evict\" or \"l1-only\"'
req PUT /v1/policy '{"mode": '
expect "invalid JSON is 400 with the place" 400 '{"error":{"code":"invalid_json","message":"invalid JSON at line 1'
req PUT /v1/policy '[1]'
expect "a non-object body is 400" 400 'the body must be a JSON object'
req PUT /v1/policy '{"mode":"l1-only"}' text/plain
expect "a wrong media type is 415" 415 'unsupported_media_type'
req PUT /v1/policy '{"mode":"l1-only"}' application/jsonx
expect "a media type that only begins with application/json is 415" 415 'unsupported_media_type'
req PUT /v1/policy '{"lease_max_ms": 5000}' 'Application/JSON; charset=utf-8'
expect "application/json with a parameter, any case, is JSON" 200 '"lease_max_ms":5000'
head -c 70000 /dev/zero | tr '\0' ' ' >"$TMP/big"
req PUT /v1/policy "$(cat "$TMP/big")"
expect "a body over 64 KiB is 413" 413 'body_too_large'
req GET /v1/policy
expect "refused changes changed nothing" 200 '"high_watermark":0.8,"low_watermark":0.6}},"lease_max_ms":5000,"lease_default_ms":2000,"store_wait_ms":250}'

# Eviction: fill L1 through the data plane, then evict some, then all.
"$KVTIER_BENCH" --socket "$TMP/run/kvtierd.sock" --blocks 8 --block-size 1MiB >"$TMP/bench.out" 2>&1
check "traffic for the eviction tests" grep -q "verified: every byte" "$TMP/bench.out"
req GET /v1/namespaces
expect "the bench's namespace is listed, salted or not, never its salt" 200 '"model":"kvtier-bench-1048576","salted":false,"digest":"'
expect "the bench's namespace's numbers" 200 '"block_bytes":1048576,"tp_size":1,"connections":0,"l1_items":16,"l1_bytes":16777216,"l1_quota_bytes":0,"l1_quota_evictions":0}]}'
req PUT /v1/namespaces/1 '{"l1_quota_bytes": "14MiB"}'
expect "PUT a namespace's L1 quota evicts down to it" 200 '"l1_items":14,"l1_bytes":14680064,"l1_quota_bytes":14680064,"l1_quota_evictions":2'
req PUT /v1/namespaces/1 '{"l1_quota_bytes": "18446744073709551615"}'
expect "a quota past 2^63 - 1 is 400, never echoed negative" 400 'l1_quota_bytes: must be bytes'
req PUT /v1/namespaces/1 '{"l1_quota_bytes": 4095}'
expect "a quota under one slot is 400" 400 'l1_quota_bytes: 4095 is less than one block slot (1048576 bytes)'
req PUT /v1/namespaces/1 '{"l1_quota_bytes": "lots"}'
expect "a quota that is no size is 400" 400 'l1_quota_bytes: must be bytes'
req PUT /v1/namespaces/1 '{"l2_quota_bytes": 1048576}'
expect "an L2 quota without L2 is 409" 409 '{"error":{"code":"no_l2"'
req PUT /v1/namespaces/1 '{"l1_quota": 1}'
expect "an unknown namespace field is 400" 400 'l1_quota: unknown field'
req PUT /v1/namespaces/77 '{"l1_quota_bytes": 0}'
expect "PUT an unknown namespace is 404" 404 'no namespace with id 77'
req PUT /v1/namespaces/1 '{"l1_quota_bytes": 0}' application/json ""
expect "PUT a namespace without the token is 401" 401 unauthorized
req PUT /v1/namespaces/1 '{"l1_quota_bytes": 0}'
expect "quota 0 removes it" 200 '"l1_quota_bytes":0'
req POST /v1/tiers/l1/evict '{"bytes": 2097152}'
expect "evict 2 MiB" 200 '{"tier":"l1","evicted_bytes":2097152,"complete":true,"blocks_evicted":2,"blocks_to_l2":0,"blocks_dropped":0}'
req POST /v1/tiers/l1/evict '{"all": true}'
expect "evict all" 200 '{"tier":"l1","evicted_bytes":12582912,"complete":true,"blocks_evicted":12'
req GET /v1/tiers
expect "the tier is empty and counts the evictions" 200 '"used_bytes":0,"items":0,"hits":16000,"misses":0,"evictions":16,"dirty_items":0,"dirty_bytes":0}'
req GET /metrics
expect "/metrics has the namespace's quota" 200 'kvtier_namespace_l1_quota_bytes{namespace="1",model="kvtier-bench-1048576"} 0'
req POST /v1/tiers/l1/evict '{"bytes": -1}'
expect "a bad evict body is 400" 400 'give either \"bytes\": a positive integer, or \"all\": true'
req POST /v1/tiers/l1/evict '{"bytes": 1, "all": true}'
expect "both bytes and all is 400" 400 'give either'
req POST /v1/tiers/l9/evict '{"all": true}'
expect "an unknown tier is 404" 404 'no tier named \"l9\"'
req GET /v1/tiers/l1/evict
expect "GET on evict is 405" 405 'use POST'
req POST /v1/tiers/l1/evict '{"all": true}' application/json ""
expect "evict without the token is 401" 401 unauthorized

# Namespaces and buffers (the bench client is gone: its buffers went with it).
req GET /v1/buffers
expect "GET /v1/buffers, none left" 200 '{"buffers":[]}'
req PUT /v1/buffers '{}'
expect "PUT /v1/buffers is 405" 405 'use GET or POST'
req POST /v1/buffers '{}'
expect "POST /v1/buffers without a kind is 400" 400 'kind: must be'
# A path the file system refuses is the client's error, never a 500 (issue 36, item 19).
LONG=$(printf 'n%.0s' $(seq 300))
req POST /v1/buffers "{\"kind\":\"shm\",\"path\":\"/dev/shm/$LONG\",\"size\":4096,\"pid\":$$}"
expect "POST /v1/buffers with a name too long is 400" 400 '"code":"invalid_field","message":"path: '
SHMDIR=$(mktemp -d /dev/shm/kvtier-api-dir.XXXXXX)
req POST /v1/buffers "{\"kind\":\"shm\",\"path\":\"$SHMDIR\",\"size\":4096,\"pid\":$$}"
rmdir "$SHMDIR"
expect "POST /v1/buffers naming a directory is 400" 400 '"code":"invalid_field","message":"path: '
req POST /v1/buffers '{"kind":"cuda_ipc","handle":"AAAA","size":4096,"device":"GPU-00000000-0000-0000-0000-000000000000","pid":1}'
expect "a cuda_ipc handle that is not 128 hex digits is 400" 400 '{"error":{"code":"invalid_field","message":"handle:'
req POST /v1/buffers '{"kind":"cuda_ipc","handle":"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000","size":4096,"device":"0","pid":1}'
expect "a cuda_ipc device that is not a UUID is 400" 400 '{"error":{"code":"invalid_field","message":"device:'
req POST /v1/buffers '{"kind":"cuda_ipc","handle":"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000","size":4096,"device":"GPU-00000000-0000-0000-0000-000000000000","offset":-1,"pid":1}'
expect "a negative cuda_ipc offset is 400" 400 '{"error":{"code":"invalid_field","message":"offset:'
req POST /v1/buffers '{"kind":"cuda_ipc","handle":"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000","size":4096,"device":"GPU-00000000-0000-0000-0000-000000000000","pid":1}'
expect "a cuda_ipc buffer on a daemon without a GPU is 409 no_cuda" 409 '{"error":{"code":"no_cuda"'
req POST /v1/buffers '{"kind":"shm","path":"/etc/passwd","size":1,"pid":1}'
expect "a path outside /dev/shm is 400" 400 'path: must name a regular file directly under /dev/shm/'
req POST /v1/buffers '{"kind":"shm","path":"/dev/shm/../etc/passwd","size":1,"pid":1}'
expect "a path that climbs out is 400" 400 'path: must name'
req POST /v1/buffers '{"kind":"shm","path":"/dev/shm/kvtier-none-here","size":1,"pid":1}'
expect "a missing file is 400" 400 'path: No such file'
req POST /v1/buffers '{"kind":"shm","path":"/dev/shm/x","size":0,"pid":1}'
expect "size 0 is 400" 400 'size: must be a positive integer'
req POST /v1/buffers '{"kind":"shm","path":"/dev/shm/x","size":1}'
expect "no pid is 400" 400 'pid: must be'
req POST /v1/buffers '{"kind":"shm","path":"/dev/shm/x","size":1,"pid":1,"extra":1}'
expect "an unknown field is 400" 400 'extra: unknown field'
req DELETE /v1/buffers/999
expect "DELETE an unknown buffer is 404" 404 'no buffer with index 999'
req GET /v1/buffers/1
expect "GET on one buffer is 405" 405 'use DELETE'
req GET /v1/namespaces/1
expect "GET on a namespace is 405" 405 'use PUT or DELETE'
req DELETE /v1/namespaces/1 "" "" ""
expect "DELETE a namespace without the token is 401" 401 unauthorized
req DELETE /v1/namespaces/abc
expect "DELETE an unparsable namespace id is 404" 404 'no namespace with id \"abc\"'
req DELETE /v1/namespaces/1
expect "DELETE an unused namespace" 200 '{"deleted":1,"evicted_bytes":0}'
req DELETE /v1/namespaces/1
expect "DELETE it again is 404" 404 'no namespace with id 1'
req GET /v1/namespaces
expect "it is gone" 200 '{"namespaces":[]}'

# Generated hostile requests: never a 5xx, a crash or a dropped connection.
if python3 "$KVT_SRCDIR/tests/integration/api_hostile.py" "$PORT" "$TOKEN" 400 >"$TMP/hostile.out" 2>&1; then
	ok "400 generated hostile requests answered with the error shape"
else
	not_ok "generated hostile requests"; cat "$TMP/hostile.out"
fi
req GET /healthz
expect "the daemon is alive after them" 200 '"status":"ok"'

kill -TERM "$DAEMON_PID"
wait_exit
check "kvtierd stops cleanly" test "$EXIT_CODE" = 0

# With an L2 tier: it is listed, the mode changes both ways, it can be evicted.
if start_daemon "$TMP/l2.log" --l1-size 16MiB --l2-path "$TMP/l2file" --l2-size 64MiB \
	--admin-token-file "$TMP/token"; then
	B="http://127.0.0.1:$PORT"
	req GET /v1/tiers
	expect "GET /v1/tiers lists l2, ready" 200 '{"name":"l2","state":"ready","capacity_bytes":67108864,"used_bytes":0,"items":0,"hits":0,"misses":0,"evictions":0}'
	req GET /v1/policy
	expect "the mode is evict with L2" 200 '{"mode":"evict"'
	req PUT /v1/policy '{"mode":"l1-only"}'
	expect "PUT mode l1-only" 200 '{"mode":"l1-only"'
	req PUT /v1/policy '{"mode":"evict"}'
	expect "PUT mode evict" 200 '{"mode":"evict"'
	req PUT /v1/policy '{"mode":"l3"}'
	expect "an unknown mode is 400" 400 'mode: must be \"evict\" or \"l1-only\"'
	req POST /v1/tiers/l2/evict '{"all": true}'
	expect "POST /v1/tiers/l2/evict" 200 '{"tier":"l2","evicted_bytes":0,"complete":true}'
	req POST /v1/tiers/l3/evict '{"all": true}'
	expect "an unknown tier names the ones there are" 404 '(tiers: l1, l2)'
	req GET /v1/stats
	expect "/v1/stats has the l2 counters" 200 '"victims_dropped_behind":0'
	req GET /healthz
	expect "/healthz says L2's state" 200 '{"status":"ok","l2":{"state":"ready","writes":"on","reads":"served"}}'
	req GET /readyz
	expect "/readyz says it too" 200 '{"status":"ready","l2":{"state":"ready","writes":"on","reads":"served"}}'
	kill -TERM "$DAEMON_PID"
	wait_exit
	check "kvtierd with L2 stops cleanly" test "$EXIT_CODE" = 0
else
	not_ok "kvtierd starts with L2"; cat "$TMP/l2.log"
fi
"$KVTIERD" --runtime-dir "$TMP/run3" --l1-size 16MiB --l2-path "$TMP/no-such-dir/l2" --l2-size 64MiB \
	>"$TMP/bad.out" 2>&1
check "an L2 path it cannot create exits non-zero" test $? != 0
check "and names the path and the cause" grep -q "l2-path $TMP/no-such-dir/l2: No such file or directory" "$TMP/bad.out"

# Binding beyond loopback without a token is refused at start.
"$KVTIERD" --runtime-dir "$TMP/run2" --http 0.0.0.0:1 >"$TMP/bad.out" 2>&1
check "a non-loopback address without a token exits 2" test $? = 2
check "and says why" grep -q "reachable beyond this host; give --admin-token-file" "$TMP/bad.out"
echo "short" >"$TMP/short"
"$KVTIERD" --runtime-dir "$TMP/run2" --admin-token-file "$TMP/short" >"$TMP/bad.out" 2>&1
check "a token under 16 characters is refused" grep -q "at least 16 characters" "$TMP/bad.out"
finish
