/* ops.c — see ops.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "codec.h"
#include "dp.h"
#include "ops.h"
#include "owner_stats.h"
#include "sessions.h"
#include "tiering.h"

/* A handler's answer when the reply comes with the request's copies. */
#define OP_ASYNC 1
/*
 * STOREs and LOADs one connection may have in flight: each pins its blocks,
 * so without a bound one client could pin all of L1 and starve the others.
 */
#define OP_MAX_INFLIGHT 256

/* The data plane's counters have one writer, the loop thread (owner_stats.h). */
#define REJECT(dp, reason) STAT_ADD(dp, rejected.reason, 1)

/* One STORE or LOAD in flight: answered when its transfer's copies are done. */
struct op_transfer {
	struct dp_conn *conn;
	uint64_t id;
	uint16_t op;
	uint64_t start_ns;
	struct stbuf *buf;
	struct tier_xfer xfer;
	struct tier_block blocks[];
};

static struct dp_op_stats *op_stats(struct dp *dp, uint16_t op)
{
	switch (op) {
#define DP_OP_CASE(name, opcode) \
	case opcode: return &dp->stats.op_##name;
	DP_OPS(DP_OP_CASE)
#undef DP_OP_CASE
	}
	return NULL;
}

static void observe(struct dp *dp, uint16_t op, int32_t status, uint64_t start_ns)
{
	static const double bounds[DP_HIST_BUCKETS - 1] = DP_HIST_BOUNDS;
	struct dp_op_stats *s = op_stats(dp, op);
	if (!s)
		return;
	uint64_t ns = kvt_now_ns() - start_ns;
	unsigned b = 0;
	while (b < DP_HIST_BUCKETS - 1 && (double)ns > bounds[b] * 1e9)
		b++;
	STATS_ADD(s, requests, 1);
	STATS_ADD(s, buckets[b], 1);
	STATS_ADD(s, sum_ns, ns);
	if (status)
		STATS_ADD(s, errors, 1);
}

/* Counts a payload that did not decode: over a limit, or malformed. */
static int decode_failed(struct dp *dp, int err)
{
	if (err == -E2BIG)
		REJECT(dp, too_many);
	else
		REJECT(dp, malformed);
	return err;
}

/* --- HELLO, PING --- */

/* The session a HELLO joins with its secret (NULL: 0 asks for a new one), or -EPERM. */
static int hello_session(struct dp_conn *c, uint64_t secret, struct dp_session **out)
{
	*out = NULL;
	return secret ? session_join(c->dp, secret, &c->peer, out) : 0;
}

static int op_hello(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	            uint64_t start_ns)
{
	(void)start_ns;
	struct dp *dp = c->dp;
	struct frame_hello hello;
	int err = frame_decode_hello(p, h->length, &hello);
	if (err == -EBADMSG)
		return decode_failed(dp, err);
	if (err || c->hello_done || hello.version != KVT_PROTO_VERSION) {
		REJECT(dp, bad_hello);
		return err ? err : c->hello_done ? -EALREADY : -EPROTONOSUPPORT;
	}
	struct dp_session *s;
	struct kvt_ns *ns;
	bool created;
	if ((err = hello_session(c, hello.session, &s)) ||
	    (err = session_hello_namespace(dp, s, &c->peer, &hello, &ns, &created)))
		return err;
	if (!s && !(s = session_new(dp, &c->peer))) {
		ns_reclaim_if_idle(dp, ns);
		return -ENOMEM;
	}
	s->nconns++;
	s->namespaces_created += created;
	c->session = s;
	c->ns = ns;
	ns_bind(ns);
	c->role = hello.role;
	c->rank = hello.role == KVT_ROLE_WORKER ? hello.rank : 0;
	c->reads_tier3 = hello.flags & KVT_HELLO_TIER3;
	c->hello_done = true;
	uint8_t *out = conn_reply_begin(c, h->op, h->id, 0, KVT_HELLO_REPLY_BYTES);
	if (out)
		reply_encode_hello(out, &(struct reply_hello){s->secret, ns->id, KVT_MAX_BLOCKS,
							      KVT_MAX_KEYS, KVT_MAX_FRAME_BYTES});
	return 0;
}

/* One rule for every op: the payload is exactly its size (PING's is empty). */
static int op_ping(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	           uint64_t start_ns)
{
	(void)start_ns;
	(void)p;
	if (h->length)
		return decode_failed(c->dp, -EBADMSG);
	conn_reply_status(c, h->op, h->id, 0);
	return 0;
}

/* --- buffers --- */

static int op_register(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	               uint64_t start_ns)
{
	(void)start_ns;
	struct dp *dp = c->dp;
	struct frame_register reg;
	int err = frame_decode_register(p, h->length, &reg);
	if (err)
		return decode_failed(dp, err);
	struct buffer_spec spec = {.kind = reg.kind, .size = reg.size, .offset = reg.offset,
				   .fd = reg.kind == KVT_BUFFER_CUDA_IPC ? -1 : conn_take_fd(c)};
	memcpy(spec.device_uuid, reg.device_uuid, sizeof(spec.device_uuid));
	memcpy(spec.ipc_handle, reg.ipc_handle, sizeof(spec.ipc_handle));
	int index = spec.fd < 0 && reg.kind != KVT_BUFFER_CUDA_IPC
			    ? -EBADF
			    : buffers_register(&dp->buffers,
					       &(struct buffer_user){c->session->id, 0, c->peer.uid}, &spec);
	if (spec.fd >= 0)
		close(spec.fd);
	if (index == -EDQUOT) {
		REJECT(dp, peer_limit);
		return index;
	}
	if (index < 0) {
		REJECT(dp, bad_buffer);
		return index;
	}
	uint8_t *out = conn_reply_begin(c, h->op, h->id, 0, 8);
	if (out)
		reply_encode_register(out, (uint32_t)index);
	return 0;
}

static int count_buffer_error(struct dp *dp, int err)
{
	if (err == -EPERM)
		REJECT(dp, foreign_buffer);
	else
		REJECT(dp, unknown_buffer);
	return err;
}

static int op_unregister(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	                 uint64_t start_ns)
{
	(void)start_ns;
	uint32_t index;
	int err = frame_decode_u32(p, h->length, &index);
	if (err)
		return decode_failed(c->dp, err);
	struct buffer_user user = {c->session->id, c->peer.pid, c->peer.uid};
	err = buffers_unregister(&c->dp->buffers, &user, index);
	if (err)
		return count_buffer_error(c->dp, err);
	conn_reply_status(c, h->op, h->id, 0);
	return 0;
}

/* --- LOOKUP, RELEASE --- */

static int op_lookup(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	             uint64_t start_ns)
{
	(void)start_ns;
	struct dp *dp = c->dp;
	struct frame_lookup lk;
	int err = frame_decode_lookup(p, h->length, &lk);
	if (err)
		return decode_failed(dp, err);
	uint32_t lease_ms = lk.lease_ms == KVT_LEASE_DEFAULT ? dp->lease_default_ms : lk.lease_ms;
	if (lease_ms && !session_lease_room(dp, c->session))
		lease_ms = 0; /* answer the lookup, without a lease */
	uint8_t *out = conn_reply_begin(c, h->op, h->id, 0, REPLY_LOOKUP_HEAD_BYTES + lk.nkeys);
	if (!out)
		return 0;
	uint8_t *tiers = out + REPLY_LOOKUP_HEAD_BYTES;
	uint32_t hits;
	uint64_t lease = 0;
	err = tiers_lookup(dp->tiering.stack, c->ns, lk.keys, lk.nkeys, tiers, lease_ms, kvt_now_ms(),
			   &hits, &lease);
	if (err == -ENOSPC)
		REJECT(dp, lease_limit);
	else if (err) { /* no memory for the lease list: answer "nothing found" */
		hits = 0;
		memset(tiers, KVT_TIER_NONE, lk.nkeys);
	}
	if (lease && !session_keep_lease(dp, c->session, lease))
		lease = 0; /* past its uid's leased bytes: released, the lookup answered without */
	for (uint32_t i = 0; !c->reads_tier3 && i < hits; i++)
		if (tiers[i] > KVT_TIER_L2) /* a client older than L3 is told 2 (protocol.h) */
			tiers[i] = KVT_TIER_L2;
	reply_encode_lookup_head(out, hits, lk.nkeys, lease);
	return 0;
}

static int op_release(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
	              uint64_t start_ns)
{
	(void)start_ns;
	uint64_t lease;
	int err = frame_decode_u64(p, h->length, &lease);
	if (err)
		return decode_failed(c->dp, err);
	if (!session_forget_lease(c->session, lease))
		return -ENOENT;
	err = l1_lease_release(c->dp->l1, lease);
	if (err)
		return err;
	conn_reply_status(c, h->op, h->id, 0);
	return 0;
}

/* --- STORE, LOAD --- */

/* A block's place in the buffer, against the block size and the buffer: 0 or -ERANGE. */
static int32_t check_block(struct dp *dp, const struct kvt_ns *ns, const struct stbuf *buf,
			   const struct frame_block *fb)
{
	if (fb->length == 0 || fb->length > ns->block_bytes || fb->offset > buf->size ||
	    fb->length > buf->size - fb->offset) {
		REJECT(dp, out_of_range);
		return -ERANGE;
	}
	return 0;
}

static struct op_transfer *transfer_new(struct dp_conn *c, const struct wire_hdr *h,
					struct stbuf *buf, uint32_t n, uint64_t start_ns)
{
	struct dp *dp = c->dp;
	struct op_transfer *r = calloc(1, sizeof(*r) + n * sizeof(r->blocks[0]));
	if (!r)
		return NULL;
	struct copy_engine *engine = buf->kind == KVT_BUFFER_SHM ? dp->copy : dp->gpu_copy;
	tier_xfer_init(&r->xfer, &dp->tiering, engine, stbuf_device(buf), (unsigned)c->src.fd,
		       h->op == KVT_OP_STORE, r->blocks, n);
	r->conn = c;
	r->id = h->id;
	r->op = h->op;
	r->start_ns = start_ns;
	r->buf = buf;
	buffers_hold(buf);
	buf->last_use_ms = kvt_now_ms();
	c->inflight++;
	return r;
}

static int op_transfer(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		       uint64_t start_ns)
{
	struct dp *dp = c->dp;
	if (c->inflight >= OP_MAX_INFLIGHT) {
		REJECT(dp, inflight_limit);
		return -EBUSY;
	}
	struct frame_blocks fb;
	int err = frame_decode_blocks(p, h->length, &fb);
	if (err)
		return decode_failed(dp, err);
	struct stbuf *buf;
	struct buffer_user user = {c->session->id, c->peer.pid, c->peer.uid};
	err = buffers_get(&dp->buffers, &user, fb.buffer, &buf);
	if (err)
		return count_buffer_error(dp, err);
	struct op_transfer *r = transfer_new(c, h, buf, fb.nblocks, start_ns);
	if (!r)
		return -ENOMEM;
	for (uint32_t i = 0; i < fb.nblocks; i++) {
		struct frame_block blk;
		frame_block_at(&fb, i, &blk);
		if ((r->blocks[i].status = check_block(dp, c->ns, buf, &blk)))
			continue; /* TIER_BLOCK_FAILED */
		tier_block_issue(&dp->tiering, &r->xfer, i, c->ns, c->rank, &blk.key,
				 buf->base + blk.offset, blk.length);
	}
	tier_xfer_issued(&r->xfer);
	return OP_ASYNC;
}

/* Every copy of r is done: commit, unpin, reply with each block's status. */
static void transfer_done(struct dp *dp, struct op_transfer *r)
{
	struct dp_conn *c = r->conn;
	if (tier_xfer_finish(&dp->tiering, &r->xfer))
		REJECT(dp, buffer_fault);
	uint8_t *out = conn_reply_begin(c, r->op, r->id, 0, reply_transfer_bytes(r->xfer.n));
	if (out) {
		reply_encode_transfer_head(out, r->xfer.n);
		for (uint32_t i = 0; i < r->xfer.n; i++) {
			const struct tier_block *b = &r->blocks[i];
			reply_encode_transfer_block(out, i, b->status, b->status ? 0 : b->length);
		}
	}
	observe(dp, r->op, 0, r->start_ns);
	buffers_put(r->buf);
	free(r);
	conn_request_done(c);
}

void ops_transfers_done(struct dp *dp, struct copy_batch *done)
{
	while (done) {
		struct copy_batch *next = done->next_done;
		struct tier_xfer *x = tier_xfer_of(done);
		transfer_done(dp, (struct op_transfer *)((char *)x - offsetof(struct op_transfer, xfer)));
		done = next;
	}
}

/* --- the table --- */

/*
 * Each handler answers 0 (replied), OP_ASYNC (the reply comes with its
 * copies) or a negative status for an error reply. The checks before a
 * handler run in docs/protocol.md's order: a known op, HELLO first, the role.
 */
struct op_def {
	int (*handle)(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		      uint64_t start_ns);
	bool before_hello;         /* allowed before HELLO (HELLO itself) */
	bool workers_only;         /* a scheduler gets -EPERM */
};

static const struct op_def op_table[KVT_OP_MAX + 1] = {
	[KVT_OP_HELLO] = {.handle = op_hello, .before_hello = true},
	[KVT_OP_PING] = {.handle = op_ping},
	[KVT_OP_REGISTER] = {.handle = op_register, .workers_only = true},
	[KVT_OP_UNREGISTER] = {.handle = op_unregister, .workers_only = true},
	[KVT_OP_LOOKUP] = {.handle = op_lookup},
	[KVT_OP_RELEASE] = {.handle = op_release},
	[KVT_OP_STORE] = {.handle = op_transfer, .workers_only = true},
	[KVT_OP_LOAD] = {.handle = op_transfer, .workers_only = true},
};

/* The op's handler after the checks, or a negative status. */
static int run_op(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *payload,
		  uint64_t start_ns)
{
	struct dp *dp = c->dp;
	const struct op_def *op = h->op <= KVT_OP_MAX ? &op_table[h->op] : NULL;
	if (!op || !op->handle) {
		REJECT(dp, unknown_op);
		return -EOPNOTSUPP;
	}
	if (!c->hello_done && !op->before_hello) {
		REJECT(dp, no_hello);
		return -ENOTCONN;
	}
	if (op->workers_only && c->role != KVT_ROLE_WORKER) {
		REJECT(dp, role);
		return -EPERM;
	}
	return op->handle(c, h, payload, start_ns);
}

void ops_dispatch(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *payload)
{
	uint64_t start = kvt_now_ns();
	int rc = run_op(c, h, payload, start);
	if (rc == OP_ASYNC)
		return;
	if (rc < 0)
		conn_reply_status(c, h->op, h->id, rc);
	observe(c->dp, h->op, rc < 0 ? rc : 0, start);
}
