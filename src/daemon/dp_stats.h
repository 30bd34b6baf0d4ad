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
	_Atomic uint64_t connections_total;
	_Atomic uint64_t connections_active;   /* gauge: lanes */
	_Atomic uint64_t clients_active;       /* gauge: sessions */
	_Atomic uint64_t blocks_stored;
	_Atomic uint64_t blocks_loaded;
	_Atomic uint64_t blocks_load_missing;
	_Atomic uint64_t bytes_stored;
	_Atomic uint64_t bytes_loaded;
};

#endif
