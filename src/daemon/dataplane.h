/*
 * dataplane.h — the data plane as one object: the Unix-socket listener, the
 * copy engines' completions and the after-batch hook on the event loop, and
 * what its rooms share (struct dp): connections (conn.h), sessions and
 * namespaces (sessions.h), op handlers (ops.h), the tiered transfer
 * (tiering.h), buffers (buffers.h) and the counters (dp_stats.h).
 *
 * Owner: the event loop thread; nothing here blocks on a client. Bad input
 * gets an error reply and a counter, or, when the stream can no longer be
 * parsed, a closed connection; other connections never notice.
 */
#ifndef KVTD_DATAPLANE_H
#define KVTD_DATAPLANE_H

#include <stdint.h>
#include <sys/types.h>

#include "copy.h"
#include "dp.h"
#include "l1.h"
#include "loop.h"
#include "ns.h"

struct dp_config {
	const char *socket_path;
	uint32_t max_connections;
	uint32_t max_leases_per_client;
	uint32_t lease_default_ms;
	uint32_t store_wait_ms;
	uint32_t max_namespaces_per_client;
	struct dp_peer_limits peer;
	struct buffer_limits buffers;
	uint64_t namespace_l1_quota;  /* what a new namespace gets; 0: none */
	uint64_t namespace_l2_quota;
};


/*
 * Binds and listens on cfg->socket_path (refusing when another daemon
 * answers there, replacing a stale socket file) and adds the listener and
 * the copy engines' eventfds to the loop (gpu_copy may be NULL), with a hook
 * that frees the connections a batch ended; transfers go through stack (its
 * between step becomes the waiting STOREs' retries). 0 or -errno with the
 * reason in why.
 */
int dp_open(struct dp *dp, const struct dp_config *cfg, struct loop *loop, struct l1 *l1,
	    struct tiers *stack, struct ns_registry *namespaces, struct copy_engine *copy,
	    struct copy_engine *gpu_copy,
	    char *why, size_t whylen);
/*
 * Closes every connection and the listener, then runs the loop (loop_run has
 * returned: L2's ring and the copy engines are still its sources) until the
 * copies and L2 reads in flight have finished.
 */
void dp_close(struct dp *dp);

/* Connections bound to ns, open or closing. */
uint32_t dp_ns_connections(const struct dp *dp, const struct kvt_ns *ns);

/*
 * The control plane reads the data plane's counters through these, never
 * inside struct dp (any thread, relaxed loads). Each stat of DP_TOTALS, or
 * of DP_REJECTS, with its value now:
 */
void dp_totals_visit(const struct dp *dp, stat_visit_fn fn, void *ctx);
void dp_rejects_visit(const struct dp *dp, stat_visit_fn fn, void *ctx);

/* One op's counts and latency histogram, copied now. */
struct dp_op_snapshot {
	const char *name;          /* as DP_OPS names it */
	uint64_t requests, errors, sum_ns;
	uint64_t buckets[DP_HIST_BUCKETS];  /* per bucket, not cumulative (bounds: DP_HIST_BOUNDS) */
};
/* Calls fn with each op's counts, in DP_OPS order. */
void dp_ops_visit(const struct dp *dp, void (*fn)(void *ctx, const struct dp_op_snapshot *op),
		  void *ctx);
/* Calls fn with each kind of staging buffer: how many are registered, and their bytes. */
void dp_buffer_kinds_visit(const struct dp *dp,
			   void (*fn)(void *ctx, const char *kind, uint64_t count, uint64_t bytes),
			   void *ctx);

/* Calls fn for each registered buffer (loop thread). */
/*
 * Registers spec for the control plane (loop thread): owned by the client
 * session whose secret is session_secret (its id in *owner), or, when that
 * is 0, by process pid (*owner 0). The index, or -ESRCH (no session has the
 * secret) or an error of buffers_register.
 */
int dp_register_buffer(struct dp *dp, uint64_t session_secret, pid_t pid,
		       const struct buffer_spec *spec, uint64_t *owner);
void dp_buffers_foreach(const struct dp *dp,
			void (*fn)(uint32_t index, const struct stbuf *b, pid_t pid, void *ctx),
			void *ctx);

#endif
