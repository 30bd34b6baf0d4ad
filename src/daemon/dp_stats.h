/*
 * dp_stats.h — the data plane's counters and latency histograms, as X-macro
 * lists (stat_table.h's shape) so the struct and every exporter come from
 * one place. Written by the
 * loop thread with relaxed atomics, read from any thread.
 */
#ifndef KVTD_DP_STATS_H
#define KVTD_DP_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "stat_table.h"

/* (name, wire op) */
#define DP_OPS(X) \
	X(hello, KVT_OP_HELLO) \
	X(ping, KVT_OP_PING) \
	X(register, KVT_OP_REGISTER) \
	X(unregister, KVT_OP_UNREGISTER) \
	X(lookup, KVT_OP_LOOKUP) \
	X(release, KVT_OP_RELEASE) \
	X(store, KVT_OP_STORE) \
	X(load, KVT_OP_LOAD)

/* Why a request or a connection was refused (stat_table.h's shape). */
#define DP_REJECTS(X) \
	X(bad_magic, COUNTER, "kvtier_requests_rejected_total", "reason=\"bad_magic\"", \
	  "Data-plane requests or connections refused, by reason: a wrong magic or a reply flag (connection closed).") \
	X(oversized, COUNTER, "kvtier_requests_rejected_total", "reason=\"oversized\"", \
	  "Frames longer than the limit (connection closed).") \
	X(malformed, COUNTER, "kvtier_requests_rejected_total", "reason=\"malformed\"", \
	  "Payloads that do not parse.") \
	X(unknown_op, COUNTER, "kvtier_requests_rejected_total", "reason=\"unknown_op\"", \
	  "Unknown operations.") \
	X(no_hello, COUNTER, "kvtier_requests_rejected_total", "reason=\"no_hello\"", \
	  "Requests before HELLO.") \
	X(bad_hello, COUNTER, "kvtier_requests_rejected_total", "reason=\"bad_hello\"", \
	  "HELLOs refused: version, role, rank, names, second HELLO.") \
	X(ns_conflict, COUNTER, "kvtier_requests_rejected_total", "reason=\"ns_conflict\"", \
	  "HELLOs whose block or TP size differs from the namespace.") \
	X(namespace_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"namespace_limit\"", \
	  "HELLOs refused: the client created max-namespaces-per-client already.") \
	X(namespaces_full, COUNTER, "kvtier_requests_rejected_total", "reason=\"namespaces_full\"", \
	  "HELLOs refused: the namespace table is full of namespaces in use.") \
	X(quota, COUNTER, "kvtier_requests_rejected_total", "reason=\"quota\"", \
	  "Blocks refused: their namespace is at its L1 quota, all of it pinned.") \
	X(role, COUNTER, "kvtier_requests_rejected_total", "reason=\"role\"", \
	  "Operations the connection's role may not do.") \
	X(foreign_buffer, COUNTER, "kvtier_requests_rejected_total", "reason=\"foreign_buffer\"", \
	  "Buffer indexes of another client.") \
	X(unknown_buffer, COUNTER, "kvtier_requests_rejected_total", "reason=\"unknown_buffer\"", \
	  "Buffer indexes not registered.") \
	X(bad_buffer, COUNTER, "kvtier_requests_rejected_total", "reason=\"bad_buffer\"", \
	  "Registrations refused: fd, size, seals or limits.") \
	X(out_of_range, COUNTER, "kvtier_requests_rejected_total", "reason=\"out_of_range\"", \
	  "Blocks whose offset or length falls outside the buffer or block.") \
	X(buffer_fault, COUNTER, "kvtier_requests_rejected_total", "reason=\"buffer_fault\"", \
	  "Requests whose copy faulted: a staging file truncated under it.") \
	X(too_many, COUNTER, "kvtier_requests_rejected_total", "reason=\"too_many\"", \
	  "Counts over the protocol limits.") \
	X(lease_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"lease_limit\"", \
	  "Leases refused: table or per-client limit full.") \
	X(inflight_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"inflight_limit\"", \
	  "STOREs and LOADs refused: the connection has too many in flight.") \
	X(slow_reader, COUNTER, "kvtier_requests_rejected_total", "reason=\"slow_reader\"", \
	  "Connections closed for not reading their replies.") \
	X(connection_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"connection_limit\"", \
	  "Connections refused at the limit.") \
	X(peer_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"peer_limit\"", \
	  "Refused for the limits of the client's uid: connections, namespaces, buffers, buffer bytes, leased bytes (a LOOKUP past it is answered without a lease).") \
	X(hello_timeout, COUNTER, "kvtier_requests_rejected_total", "reason=\"hello_timeout\"", \
	  "Connections closed without a HELLO: past hello-timeout-ms, or the oldest such at max-connections.") \
	X(fd_limit, COUNTER, "kvtier_requests_rejected_total", "reason=\"fd_limit\"", \
	  "Connections accepted and closed at once: the daemon was out of file descriptors.") \
	X(stray_fds, COUNTER, "kvtier_requests_rejected_total", "reason=\"stray_fds\"", \
	  "File descriptors a client sent with anything but a REGISTER that takes them (closed).")

/* The data plane's counters and gauges (stat_table.h's shape). */
#define DP_TOTALS(X) \
	X(connections_total, COUNTER, "kvtier_connections_total", "", \
	  "Data-plane connections accepted.") \
	X(connections_active, GAUGE, "kvtier_lanes_connected", "", \
	  "Data-plane connections (lanes) open.") \
	X(clients_active, GAUGE, "kvtier_clients_connected", "", \
	  "Clients (processes) connected.") \
	X(namespaces_reclaimed, COUNTER, "kvtier_namespaces_reclaimed_total", "", \
	  "Namespaces removed for holding nothing in L1 with no client bound.") \
	X(blocks_stored, COUNTER, "kvtier_blocks_stored_total", "", \
	  "Blocks stored by STORE requests.") \
	X(blocks_loaded, COUNTER, "kvtier_blocks_loaded_total", "", \
	  "Blocks copied out by LOAD requests.") \
	X(blocks_load_missing, COUNTER, "kvtier_blocks_load_missing_total", "", \
	  "Blocks a LOAD asked for that were not there.") \
	X(bytes_stored, COUNTER, "", "", \
	  "Bytes stored by STORE requests.") \
	X(bytes_loaded, COUNTER, "", "", \
	  "Bytes copied out by LOAD requests.") \
	X(store_waits, COUNTER, "kvtier_store_waits_total", "", \
	  "STORE blocks that waited for the writer: a slot needed a dirty item evicted.") \
	X(store_wait_us, COUNTER, "", "", \
	  "Time STORE blocks spent waiting for the writer.") \
	X(store_wait_timeouts, COUNTER, "kvtier_store_wait_timeouts_total", "", \
	  "STORE blocks that waited past store-wait-ms, then evicted a dirty item.") \
	X(store_waiting, GAUGE, "kvtier_store_waiting_blocks", "", \
	  "STORE blocks waiting for the writer now.")

#define DP_HIST_BUCKETS 16
/* Upper bounds in seconds; the last bucket is +Inf. */
#define DP_HIST_BOUNDS \
	{1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0}

struct dp_op_stats {
	_Atomic uint64_t requests;
	_Atomic uint64_t errors;          /* replies with a non-zero status */
	_Atomic uint64_t buckets[DP_HIST_BUCKETS];
	_Atomic uint64_t sum_ns;
};

struct dp_rejects {
	DP_REJECTS(STAT_LIVE_FIELD)
};

struct dp_stats {
#define DP_OP_FIELD(name, op) struct dp_op_stats op_##name;
	DP_OPS(DP_OP_FIELD)
#undef DP_OP_FIELD
	struct dp_rejects rejected;
	DP_TOTALS(STAT_LIVE_FIELD)
};

#endif
