#!/bin/sh
# prometheus.sh — /metrics passes `promtool check metrics`, and a real
# Prometheus server on loopback scrapes kvtierd: kvtier_up is 1, and a
# data-plane counter it scraped moves after kvtier-bench traffic. The
# operators' files of deploy/monitoring: the alert rules pass promtool check
# rules and their unit tests, and every PromQL expression of the Grafana
# dashboard returns series from that Prometheus.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
: "${KVTIER_BENCH:?KVTIER_BENCH must name the kvtier-bench binary}"
for tool in promtool prometheus; do
	command -v $tool >/dev/null || { not_ok "$tool is installed (Debian package prometheus)"; finish; exit 1; }
done

MON=$KVT_SRCDIR/deploy/monitoring
check "deploy/monitoring/kvtier-alerts.yaml passes promtool check rules" \
	promtool check rules "$MON/kvtier-alerts.yaml"
check "the alert rules pass their unit tests (promtool test rules)" \
	sh -c 'cd "$1" && promtool test rules kvtier-alerts.test.yaml' sh "$MON"

mkdir -p "$TMP/l3"
if ! start_daemon "$TMP/d.log" --l1-size 128MiB --l2-path "$TMP/l2" --l2-size 64MiB \
	--l3-path "$TMP/l3"; then
	not_ok "kvtierd starts"; cat "$TMP/d.log"; finish; exit 1
fi
KVT_PORT=$PORT
curl -s -D "$TMP/h" -o "$TMP/metrics" "http://127.0.0.1:$KVT_PORT/metrics"
check "/metrics answers the Prometheus content type" \
	grep -qi '^Content-Type: text/plain; version=0.0.4' "$TMP/h"
check "/metrics passes promtool check metrics" sh -c "promtool check metrics <'$TMP/metrics'"
for fam in kvtier_build_info kvtier_up kvtier_lookup_blocks_total kvtier_stored_bytes_total \
	kvtier_loaded_bytes_total kvtier_evictions_total kvtier_tier_capacity_bytes \
	kvtier_tier_used_bytes kvtier_tier_items kvtier_leases_active kvtier_pins_active \
	kvtier_clients_connected kvtier_lanes_connected kvtier_buffers_registered \
	kvtier_op_duration_seconds kvtier_l2_io_errors_total kvtier_l2_checksum_failures_total \
	kvtier_l2_victims_total kvtier_l2_direct_writes_total kvtier_l2_reads_total kvtier_l2_retries_total kvtier_l2_ready \
	kvtier_l2_failed kvtier_tier_blocks_loaded_total kvtier_requests_rejected_total; do
	check "/metrics has HELP and TYPE for $fam" grep -q "^# TYPE $fam " "$TMP/metrics"
done

check "/metrics has the L2 tier's capacity" \
	grep -q '^kvtier_tier_capacity_bytes{tier="l2"} 67108864$' "$TMP/metrics"

# A real Prometheus on loopback, scraping every second, on a port free now
# (other tests run at the same time and hold ports of their own).
PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: kvtier
    static_configs:
      - targets: ['127.0.0.1:$KVT_PORT']
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
	--web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PROM_PID=$!
trap 'kill $PROM_PID 2>/dev/null; cleanup' EXIT

# query EXPR: the first sample's value, or nothing.
query() {
	curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
		sed -n 's/.*"value":\[[0-9.]*,"\([^"]*\)"\].*/\1/p'
}
# wait_value EXPR WANT: polls (at most 60 s) until EXPR evaluates to WANT.
wait_value() {
	i=0
	while [ $i -lt 300 ]; do
		[ "$(query "$1")" = "$2" ] && return 0
		sleep 0.2
		i=$((i + 1))
	done
	echo "  $1 = '$(query "$1")', wanted '$2'"
	return 1
}
check "Prometheus scraped kvtier_up == 1" wait_value 'kvtier_up' 1 ||
	{ echo "  prometheus log:"; tail -20 "$TMP/prom.log"; }
check "no blocks stored before traffic" wait_value 'kvtier_blocks_stored_total' 0
"$KVTIER_BENCH" --socket "$TMP/run/kvtierd.sock" --blocks 8 --block-size 1MiB >"$TMP/bench.out" 2>&1
check "kvtier-bench ran and verified" grep -q "verified: every byte" "$TMP/bench.out"
check "Prometheus saw kvtier_blocks_stored_total move" \
	wait_value 'kvtier_blocks_stored_total > bool 0' 1
check "Prometheus saw the store op histogram count" \
	wait_value 'kvtier_op_duration_seconds_count{op="store"} > bool 0' 1
# Every expression of the dashboard, its $__rate_interval as a minute: series come back.
python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["panels"]:
    for t in p["targets"]:
        print(p["title"] + "\t" + t["expr"].replace("$__rate_interval", "1m"))
' "$MON/kvtier-grafana.json" >"$TMP/exprs"
check "the dashboard has expressions" test -s "$TMP/exprs"
while IFS="$(printf '\t')" read -r title expr; do
	n=$(curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$expr" |
		python3 -c 'import json, sys; r = json.load(sys.stdin); print(len(r["data"]["result"]) if r["status"] == "success" else -1)')
	check "dashboard, $title: $expr returns series (got ${n:-none})" test "${n:-0}" -gt 0
done <"$TMP/exprs"
kill -TERM "$DAEMON_PID"
wait_exit
check "kvtierd stops cleanly" test "$EXIT_CODE" = 0
finish
