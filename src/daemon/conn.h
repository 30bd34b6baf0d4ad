/*
 * conn.h — the data plane's connections (lanes): reading the socket and the
 * fds that come with it, cutting the byte stream into whole frames for the
 * op handlers (ops.h), the reply buffer and its flush, and a connection's
 * end: closed at once, retired once no copy of it is in flight, freed after
 * the loop's batch (a later event of the same batch may still name it).
 *
 * Owner: the event loop thread.
 */
#ifndef KVTD_CONN_H
#define KVTD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "loop.h"
#include "ns.h"
#include "sessions.h"

/* fds one frame may bring (REGISTER takes one); more are closed at once. */
#define DP_MAX_QUEUED_FDS 1

struct dp;

struct dp_conn {
	struct loop_source src;
	struct dp *dp;
	LIST_ENTRY(dp_conn) link;    /* dp->conns, while open or closing */
	SLIST_ENTRY(dp_conn) dead_link;  /* dp->dead_conns, once retired */
	struct dp_session *session;  /* set by HELLO */
	const struct kvt_ns *ns;     /* set by HELLO */
	struct peer peer;            /* SO_PEERCRED; pid 0 when unknown */
	uint64_t opened_ms;          /* its HELLO is due by opened_ms + hello_timeout_ms */
	uint8_t role;
	uint16_t rank;
	bool reads_tier3;            /* its HELLO had KVT_HELLO_TIER3 */
	bool hello_done;
	bool dead;                   /* socket closed; waits for copies in flight */
	bool retired;                /* off the live list; freed after the batch */
	bool flush_queued;           /* on dp->flush_conns */
	SLIST_ENTRY(dp_conn) flush_link;
	bool want_out;               /* EPOLLOUT armed */
	uint32_t inflight;           /* STOREs and LOADs not yet answered */
	int fds[DP_MAX_QUEUED_FDS];  /* received with SCM_RIGHTS, not yet used */
	unsigned nfds;
	uint8_t *in;
	size_t in_len, in_cap;
	uint8_t *out;
	size_t out_len, out_off, out_cap;
};

/*
 * Adds an accepted, non-blocking socket as a new lane. 0, or -errno (fd
 * closed): -EDQUOT when its uid has dp->peer.connections lanes (counted as
 * peer_limit).
 */
int conn_open(struct dp *dp, int fd);

/*
 * Closes the oldest connection still without a HELLO (counted as
 * hello_timeout), to make room at max-connections. False when there is none.
 */
bool conn_shed_oldest_unbound(struct dp *dp);
/* Closes every connection without a HELLO past dp->peer.hello_timeout_ms (each counted). */
void conn_close_overdue(struct dp *dp, uint64_t now_ms);

/*
 * Room for a reply of len payload bytes after the header it writes; sent
 * when the connection's input is parsed, or after the batch. NULL when the
 * reply is dropped: the connection is dead, or was closed now for leaving
 * too many reply bytes unread (counted as slow_reader) or for want of memory.
 */
uint8_t *conn_reply_begin(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status,
			  size_t len);
void conn_reply_status(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status);

/* The oldest fd that came with the connection's frames (the caller owns it), or -1. */
int conn_take_fd(struct dp_conn *c);

/* A STORE or LOAD of c has been answered: its reply goes after the batch. */
void conn_request_done(struct dp_conn *c);

/* Closes the socket now; the rest waits for the copies in flight. */
void conn_close(struct dp_conn *c);
/* Closes every connection (shutdown). */
void conn_close_all(struct dp *dp);

/* The data plane's after-batch step: queued replies sent, then the retired freed. */
void conn_after_batch(struct dp *dp);

#endif
