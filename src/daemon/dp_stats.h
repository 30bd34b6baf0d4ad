/*
 * dp_stats.h — the data plane's counters and latency histograms, as X-macro
 * lists so the struct and every exporter come from one place. Written by the
 * loop thread with relaxed atomics, read from any thread.
 */
#ifndef KVTD_DP_STATS_H
#define KVTD_DP_STATS_H

#include <stdatomic.h>
#include <stdint.h>

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

/* Why a request or a connection was refused: (name, help). */
#define DP_REJECTS(X) \
	X(bad_magic, "frames with a wrong magic or a reply flag (connection closed)") \
	X(oversized, "frames longer than the limit (connection closed)") \
	X(malformed, "payloads that do not parse") \
	X(unknown_op, "unknown operations") \
	X(no_hello, "requests before HELLO") \
	X(bad_hello, "HELLOs refused: version, role, rank, names, second HELLO") \
	X(ns_conflict, "HELLOs whose block or TP size differs from the namespace") \
	X(namespace_limit, "HELLOs refused: the client created max-namespaces-per-client already") \
	X(namespaces_full, "HELLOs refused: the namespace table is full of namespaces in use") \
	X(quota, "blocks refused: their namespace is at its L1 quota, all of it pinned") \
	X(role, "operations the connection's role may not do") \
	X(foreign_buffer, "buffer indexes of another client") \
	X(unknown_buffer, "buffer indexes not registered") \
	X(bad_buffer, "registrations refused: fd, size, seals or limits") \
	X(out_of_range, "blocks whose offset or length falls outside the buffer or block") \
	X(buffer_fault, "requests whose copy faulted: a staging file truncated under it") \
	X(too_many, "counts over the protocol limits") \
	X(lease_limit, "leases refused: table or per-client limit full") \
	X(inflight_limit, "STOREs and LOADs refused: the connection has too many in flight") \
	X(slow_reader, "connections closed for not reading their replies") \
	X(connection_limit, "connections refused at the limit")

/*
 * The plain counters and gauges: (field, Prometheus name, type, help). An
 * empty name: not exported on its own (L1's byte counters say the same).
 */
#define DP_TOTALS(X) \
	X(connections_total, "kvtier_connections_total", "counter", "Data-plane connections accepted.") \
	X(connections_active, "kvtier_lanes_connected", "gauge", "Data-plane connections (lanes) open.") \
	X(clients_active, "kvtier_clients_connected", "gauge", "Clients (processes) connected.") \
	X(namespaces_reclaimed, "kvtier_namespaces_reclaimed_total", "counter", \
	  "Namespaces removed for holding nothing in L1 with no client bound.") \
	X(blocks_stored, "kvtier_blocks_stored_total", "counter", "Blocks stored by STORE requests.") \
	X(blocks_loaded, "kvtier_blocks_loaded_total", "counter", "Blocks copied out by LOAD requests.") \
	X(blocks_load_missing, "kvtier_blocks_load_missing_total", "counter", \
	  "Blocks a LOAD asked for that were not there.") \
	X(blocks_loaded_l2, "kvtier_blocks_loaded_l2_total", "counter", \
	  "Blocks LOAD requests read from L2 (a part of kvtier_blocks_loaded_total).") \
	X(blocks_promoted, "kvtier_blocks_promoted_total", "counter", \
	  "Blocks read from L2 and kept in L1 (promoted).") \
	X(bytes_stored, "", "counter", "Bytes stored by STORE requests.") \
	X(bytes_loaded, "", "counter", "Bytes copied out by LOAD requests.")

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

struct dp_stats {
#define DP_OP_FIELD(name, op) struct dp_op_stats op_##name;
	DP_OPS(DP_OP_FIELD)
#undef DP_OP_FIELD
#define DP_REJECT_FIELD(name, help) _Atomic uint64_t rejected_##name;
	DP_REJECTS(DP_REJECT_FIELD)
#undef DP_REJECT_FIELD
#define DP_TOTAL_FIELD(field, metric, type, help) _Atomic uint64_t field;
	DP_TOTALS(DP_TOTAL_FIELD)
#undef DP_TOTAL_FIELD
};

#endif
