/*
 * dp.h — what the data plane's rooms share: struct dp, the one object that
 * connections (conn.h), sessions (sessions.h) and op handlers (ops.h) are
 * handed. dataplane.h opens and closes it and wires those rooms together;
 * none of them calls up into another: a connection runs its frames through
 * dp->dispatch.
 *
 * Owner: the event loop thread.
 */
#ifndef KVTD_DP_H
#define KVTD_DP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "buffers.h"
#include "copy.h"
#include "dp_stats.h"
#include "l1.h"
#include "loop.h"
#include "ns.h"
#include "tiering.h"
#include "wire.h"

struct dp_conn;
struct dp_session;

/*
 * What the clients of one uid may hold at once (SO_PEERCRED's uid, which is
 * right across PID namespaces, where the pid reads 0). Sessions are cheap (a
 * connection makes one), so limits per session alone do not stop one
 * process; buffers' limits are the buffer table's (buffers.h).
 */
struct dp_peer_limits {
	uint32_t connections;
	uint32_t namespaces;         /* created and not yet reclaimed */
	uint64_t leased_bytes;       /* L1 bytes pinned by leases */
	uint32_t hello_timeout_ms;   /* a connection's time to send HELLO */
};

struct dp {
	struct loop *loop;
	struct loop_hook batch_hook;  /* after each batch: flushes queued replies, frees the dead */
	struct loop_source listen_src;
	struct loop_source copy_src;
	struct loop_source gpu_copy_src;
	char socket_path[108];
	uint32_t max_connections;
	uint32_t max_leases_per_client;
	uint32_t lease_default_ms;   /* for LOOKUPs asking KVT_LEASE_DEFAULT; policy */
	uint32_t max_namespaces_per_client;
	struct dp_peer_limits peer;
	uint64_t namespace_l1_quota, namespace_l2_quota;
	int spare_fd;                /* closed to accept and shed a connection at the fd limit */
	bool listen_resting;         /* out of fds, no spare: the listener waits for hello_timer */
	struct loop_timer hello_timer; /* closes connections past hello_timeout_ms */
	struct l1 *l1;
	struct tiering tiering;      /* L2 and the mode, set by l2svc.h and policy.h */
	struct ns_registry *namespaces;
	struct copy_engine *copy;     /* memcpy: shm buffers */
	struct copy_engine *gpu_copy; /* CUDA: GPU buffers; NULL without a GPU */
	struct buffer_table buffers;
	LIST_HEAD(dp_sessions, dp_session) sessions;
	LIST_HEAD(dp_conns, dp_conn) conns;
	SLIST_HEAD(, dp_conn) dead_conns;   /* closed, idle, freed after the batch (loop.h) */
	SLIST_HEAD(, dp_conn) flush_conns;  /* with completion replies to send after the batch */
	uint32_t nconns;
	struct dp_stats stats;
	/* Runs one whole frame of a connection (ops_dispatch, set by dp_open). */
	void (*dispatch)(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *payload);
};

#endif
