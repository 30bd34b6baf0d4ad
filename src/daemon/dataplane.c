/* dataplane.c — see dataplane.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"
#include "frame.h"
#include "log.h"
#include "owner_stats.h"
#include "wire.h"

#define DP_READ_CHUNK (256 * 1024)
#define DP_MAX_QUEUED_FDS 4
/* A client that leaves this many reply bytes unread is closed. */
#define DP_MAX_OUT_BYTES (64u << 20)
#define DP_ASYNC 1
/*
 * STOREs and LOADs one connection may have in flight: each pins its blocks,
 * so without a bound one client could pin all of L1 and starve the others.
 */
#define DP_MAX_INFLIGHT 256

struct dp_session {
	uint64_t id;
	pid_t pid;
	uint32_t nconns;
	uint32_t namespaces_created;
	uint32_t nleases;
	uint64_t *leases;
	struct dp_session *next;
};

struct dp_conn {
	struct loop_source src;
	struct dp *dp;
	struct dp_conn *next;
	struct dp_session *session;
	const struct kvt_ns *ns;
	pid_t pid;
	uint8_t role;
	uint16_t rank;
	bool hello_done;
	bool dead;                 /* socket closed; waits for copies in flight */
	bool retired;              /* off the live list; freed after the batch */
	bool flush_queued;         /* on dp->flush_conns */
	struct dp_conn *next_flush;
	bool want_out;             /* EPOLLOUT armed */
	uint32_t inflight;
	int fds[DP_MAX_QUEUED_FDS];  /* received with SCM_RIGHTS, not yet used */
	unsigned nfds;
	uint8_t *in;
	size_t in_len, in_cap;
	uint8_t *out;
	size_t out_len, out_off, out_cap;
};

struct dp_block {
	struct l1_ref ref;
	int32_t status;
	uint32_t length;
	bool pinned;               /* ref pins an L1 part: loaded, or a slot being written */
	bool promoting;            /* ref is a slot being filled from L2, committed at the end */
	uint8_t *bounce;           /* the L2 read's target when no L1 slot could be had */
	uint8_t *staging;          /* where an L2 block goes once read */
	struct dp_req *req;
	struct l2_read rd;
};

/* One STORE or LOAD in flight: its copies run as one batch. */
struct dp_req {
	struct copy_batch batch;   /* first: the engine hands this pointer back */
	struct dp_conn *conn;
	uint64_t id;
	uint16_t op;
	uint64_t start_ns;
	struct stbuf *buf;
	struct copy_engine *engine;  /* host memcpy for shm buffers, CUDA for GPU ones */
	uint32_t l2_pending;       /* L2 reads not back, +1 until every block is issued */
	uint32_t n;
	struct dp_block blocks[];
};

/* The data plane's counters have one writer, the loop thread (owner_stats.h). */
#define REJECT(dp, reason) STAT_ADD(dp, rejected_##reason, 1)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t dp_now_ms(void)
{
	return now_ns() / 1000000u;
}

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
	uint64_t ns = now_ns() - start_ns;
	unsigned b = 0;
	while (b < DP_HIST_BUCKETS - 1 && (double)ns > bounds[b] * 1e9)
		b++;
	atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sum_ns, ns, memory_order_relaxed);
	if (status)
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
}

/* --- sessions --- */

static struct dp_session *session_new(struct dp *dp, pid_t pid)
{
	struct dp_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->leases = calloc(dp->max_leases_per_client, sizeof(*s->leases));
	if (!s->leases || getrandom(&s->id, sizeof(s->id), 0) != sizeof(s->id)) {
		free(s->leases);
		free(s);
		return NULL;
	}
	s->id |= 1; /* never 0: 0 asks for a new session */
	s->pid = pid;
	s->next = dp->sessions;
	dp->sessions = s;
	STAT_ADD(dp, clients_active, 1);
	return s;
}

static struct dp_session *session_find(struct dp *dp, uint64_t id)
{
	for (struct dp_session *s = dp->sessions; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

/* The last lane of a client is gone: its buffers and leases go at once. */
static void session_end(struct dp *dp, struct dp_session *s)
{
	unsigned nbuf = buffers_drop_session(&dp->buffers, s->id);
	unsigned nleases = 0;
	for (uint32_t i = 0; i < s->nleases; i++)
		nleases += l1_lease_release(dp->l1, s->leases[i]) == 0;
	log_debug("client %016llx (pid %d) gone: %u buffers, %u leases released",
		  (unsigned long long)s->id, (int)s->pid, nbuf, nleases);
	struct dp_session **p = &dp->sessions;
	while (*p != s)
		p = &(*p)->next;
	*p = s->next;
	free(s->leases);
	free(s);
	STAT_SUB(dp, clients_active, 1);
}

/* Forgets leases that expired, so the per-client list holds live ones only. */
static void session_prune_leases(struct dp *dp, struct dp_session *s)
{
	uint32_t kept = 0;
	for (uint32_t i = 0; i < s->nleases; i++)
		if (l1_lease_active(dp->l1, s->leases[i]))
			s->leases[kept++] = s->leases[i];
	s->nleases = kept;
}

static bool session_forget_lease(struct dp_session *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->nleases; i++) {
		if (s->leases[i] == id) {
			s->leases[i] = s->leases[--s->nleases];
			return true;
		}
	}
	return false;
}

/* --- namespaces --- */

static bool ns_idle(const struct kvt_ns *ns)
{
	return ns->dp_conns == 0 && ns->l1_items == 0;
}

static void ns_reclaim(struct dp *dp, struct kvt_ns *ns)
{
	log_debug("namespace %u (%s) reclaimed: no client, nothing in L1", ns->id, ns->model);
	ns_remove(dp->namespaces, ns);
	STAT_ADD(dp, namespaces_reclaimed, 1);
}

uint32_t dp_reclaim_namespaces(struct dp *dp)
{
	uint32_t n = 0;
	for (uint32_t i = dp->namespaces->count; i-- > 0;) { /* removal moves the last into i */
		struct kvt_ns *ns = dp->namespaces->ns[i];
		if (ns_idle(ns)) {
			ns_reclaim(dp, ns);
			n++;
		}
	}
	return n;
}

/* A connection leaves ns: with nothing left in L1, the namespace goes too. */
static void ns_unbind(struct dp *dp, struct kvt_ns *ns)
{
	ns->dp_conns--;
	if (ns_idle(ns))
		ns_reclaim(dp, ns);
}

/*
 * The namespace a HELLO names, created when new within the session's
 * allowance (s NULL: a new session, nothing created yet); a full table is
 * swept of idle namespaces once before it is refused.
 */
static int hello_namespace(struct dp *dp, const struct dp_session *s,
			   const struct frame_hello *hello, struct kvt_ns **out, bool *created)
{
	*created = false;
	struct kvt_ns *ns = ns_find(dp->namespaces, hello->model, hello->salt);
	if (!ns && s && s->namespaces_created >= dp->max_namespaces_per_client) {
		REJECT(dp, namespace_limit);
		return -KVT_ENSLIMIT;
	}
	int err = ns_get(dp->namespaces, hello->model, hello->salt, hello->block_bytes,
			 hello->tp_size, &ns);
	if (err == -ENOSPC && dp_reclaim_namespaces(dp))
		err = ns_get(dp->namespaces, hello->model, hello->salt, hello->block_bytes,
			     hello->tp_size, &ns);
	if (err == -KVT_ENSCONFLICT)
		REJECT(dp, ns_conflict);
	else if (err == -ENOSPC)
		REJECT(dp, namespaces_full);
	else if (err < 0)
		REJECT(dp, bad_hello);
	if (err < 0)
		return err;
	if (err == 1) {
		*created = true;
		ns->l1_quota = dp->namespace_l1_quota;
		ns->l2_quota = dp->namespace_l2_quota;
	}
	if (!ns->l1_class && (err = l1_ns_open(dp->l1, ns)) < 0) {
		REJECT(dp, bad_hello);
		if (*created)
			ns_remove(dp->namespaces, ns);
		return err;
	}
	if (ns->l1_quota && ns->l1_quota < ns->l1_class->slot_size)
		ns->l1_quota = ns->l1_class->slot_size; /* a default quota below one block: one block */
	*out = ns;
	return 0;
}

/* --- connections: output --- */

static void conn_close(struct dp_conn *c);

static void conn_arm(struct dp_conn *c, bool want_out)
{
	if (c->dead || c->want_out == want_out)
		return;
	c->want_out = want_out;
	loop_mod(c->dp->loop, &c->src, EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0));
}

static void conn_flush(struct dp_conn *c)
{
	while (!c->dead && c->out_off < c->out_len) {
		ssize_t n = send(c->src.fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			conn_arm(c, true);
			return;
		}
		if (n < 0) {
			conn_close(c);
			return;
		}
		c->out_off += (size_t)n;
	}
	c->out_len = c->out_off = 0;
	conn_arm(c, false);
}

/* Room for a reply of len payload bytes; writes the header. NULL: dropped. */
static uint8_t *reply_begin(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status,
			    size_t len)
{
	if (c->dead)
		return NULL;
	size_t need = c->out_len + KVT_HDR_BYTES + len;
	if (need > DP_MAX_OUT_BYTES) {
		REJECT(c->dp, slow_reader);
		log_warn("data plane: closing a client that leaves %zu reply bytes unread", c->out_len);
		conn_close(c);
		return NULL;
	}
	if (need > c->out_cap) {
		if (c->out_off) { /* compact before growing */
			memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
			c->out_len -= c->out_off;
			c->out_off = 0;
			need = c->out_len + KVT_HDR_BYTES + len;
		}
		size_t cap = c->out_cap ? c->out_cap : 4096;
		while (cap < need)
			cap *= 2;
		uint8_t *p = realloc(c->out, cap);
		if (!p) {
			conn_close(c);
			return NULL;
		}
		c->out = p;
		c->out_cap = cap;
	}
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = op, .flags = KVT_FLAG_REPLY,
			     .length = (uint32_t)len, .status = status, .id = id};
	uint8_t *at = c->out + c->out_len;
	wire_hdr_encode(at, &h);
	c->out_len = need;
	return at + KVT_HDR_BYTES;
}

static void reply_status(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status)
{
	reply_begin(c, op, id, status, 0);
}

/* --- connections: lifecycle --- */

/*
 * A closed connection with no copy in flight leaves the live list and ends its
 * session's share; its memory waits for the batch to end (after_batch), as
 * a later event of the same batch may still name it (loop.h).
 */
static void conn_retire(struct dp_conn *c)
{
	struct dp *dp = c->dp;
	struct dp_conn **p = &dp->conns;
	while (*p != c)
		p = &(*p)->next;
	*p = c->next;
	if (c->session && --c->session->nconns == 0)
		session_end(dp, c->session);
	c->session = NULL;
	if (c->ns)
		ns_unbind(dp, (struct kvt_ns *)c->ns);
	c->ns = NULL;
	c->next = dp->dead_conns;
	dp->dead_conns = c;
	dp->nconns--;
}

static void conn_release_if_done(struct dp_conn *c);

/* Completion replies go out once per batch: several finished copies, one send. */
static void queue_flush(struct dp_conn *c)
{
	if (c->flush_queued || c->dead)
		return;
	c->flush_queued = true;
	c->next_flush = c->dp->flush_conns;
	c->dp->flush_conns = c;
}

/*
 * After each batch (loop.h): the replies the batch's completions queued are
 * sent, then the connections that died in it are freed.
 */
static void after_batch(struct loop_hook *hook)
{
	struct dp *dp = (struct dp *)((char *)hook - offsetof(struct dp, batch_hook));
	while (dp->flush_conns) {
		struct dp_conn *c = dp->flush_conns;
		dp->flush_conns = c->next_flush;
		c->flush_queued = false;
		conn_flush(c);
		conn_release_if_done(c);
	}
	while (dp->dead_conns) {
		struct dp_conn *c = dp->dead_conns;
		dp->dead_conns = c->next;
		free(c->in);
		free(c->out);
		free(c);
	}
}

/* Retires a closed connection once no copy of it is in flight. */
static void conn_release_if_done(struct dp_conn *c)
{
	if (c->dead && c->inflight == 0 && !c->retired) {
		c->retired = true;
		conn_retire(c);
	}
}

/*
 * Closes the socket now; the connection is retired once its last copy is
 * done (conn_release_if_done) and freed after the batch.
 */
static void conn_close(struct dp_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	loop_del(c->dp->loop, &c->src);
	close(c->src.fd);
	for (unsigned i = 0; i < c->nfds; i++)
		close(c->fds[i]);
	c->nfds = 0;
	STAT_SUB(c->dp, connections_active, 1);
}

/* --- ops --- */

/* Counts a payload that did not decode: over a limit, or malformed. */
static int decode_failed(struct dp *dp, int err)
{
	if (err == -E2BIG)
		REJECT(dp, too_many);
	else
		REJECT(dp, malformed);
	return err;
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
	struct dp_session *s = NULL;
	if (hello.session) {
		s = session_find(dp, hello.session);
		if (!s || (s->pid && c->pid && s->pid != c->pid)) {
			REJECT(dp, bad_hello);
			return -EPERM;
		}
	}
	struct kvt_ns *ns;
	bool created;
	if ((err = hello_namespace(dp, s, &hello, &ns, &created)))
		return err;
	if (!s && !(s = session_new(dp, c->pid))) {
		if (ns_idle(ns))
			ns_reclaim(dp, ns);
		return -ENOMEM;
	}
	s->nconns++;
	s->namespaces_created += created;
	c->session = s;
	c->ns = ns;
	ns->dp_conns++;
	c->role = hello.role;
	c->rank = hello.role == KVT_ROLE_WORKER ? hello.rank : 0;
	c->hello_done = true;
	uint8_t *out = reply_begin(c, h->op, h->id, 0, KVT_HELLO_REPLY_BYTES);
	if (out) {
		struct wire_wr w = {out, KVT_HELLO_REPLY_BYTES, false};
		wire_put_u64(&w, s->id);
		wire_put_u32(&w, ns->id);
		wire_put_u32(&w, KVT_MAX_BLOCKS);
		wire_put_u32(&w, KVT_MAX_KEYS);
		wire_put_u32(&w, KVT_MAX_FRAME_BYTES);
	}
	return 0;
}

/* Takes the oldest fd that came with the connection's frames, or -1. */
static int take_fd(struct dp_conn *c)
{
	if (c->nfds == 0)
		return -1;
	int fd = c->fds[0];
	memmove(c->fds, c->fds + 1, --c->nfds * sizeof(c->fds[0]));
	return fd;
}

/* Maps a GPU buffer of reg (fd for cuda_vmm) and registers it for c's session. */
static int register_gpu(struct dp_conn *c, const struct frame_register *reg, int fd)
{
	struct gpu_mem m;
	int err = reg->kind == KVT_BUFFER_CUDA_VMM
			  ? gpu_import_vmm(fd, reg->device_uuid, reg->size, &m)
			  : gpu_open_ipc(reg->device_uuid, reg->ipc_handle, reg->offset, reg->size, &m);
	if (err)
		return err;
	int index = buffers_register_gpu(&c->dp->buffers, c->session->id, 0, &m);
	if (index < 0)
		gpu_close(&m);
	return index;
}

static int op_register(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		        uint64_t start_ns)
{
	(void)start_ns;
	struct dp *dp = c->dp;
	struct frame_register reg;
	int err = frame_decode_register(p, h->length, &reg);
	if (err)
		return decode_failed(dp, err);
	int fd = reg.kind == KVT_BUFFER_CUDA_IPC ? -1 : take_fd(c);
	if (fd < 0 && reg.kind != KVT_BUFFER_CUDA_IPC) {
		REJECT(dp, bad_buffer);
		return -EBADF;
	}
	int index;
	if (reg.kind == KVT_BUFFER_SHM)
		index = buffers_register_shm(&dp->buffers, c->session->id, fd, reg.size);
	else if (reg.kind == KVT_BUFFER_CUDA_VMM || reg.kind == KVT_BUFFER_CUDA_IPC)
		index = register_gpu(c, &reg, fd);
	else
		index = -EOPNOTSUPP;
	if (fd >= 0)
		close(fd);
	if (index < 0) {
		REJECT(dp, bad_buffer);
		return index;
	}
	uint8_t *out = reply_begin(c, h->op, h->id, 0, 8);
	if (out) {
		struct wire_wr w = {out, 8, false};
		wire_put_u32(&w, (uint32_t)index);
		wire_put_u32(&w, 0);
	}
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
	struct buffer_user user = {c->session->id, c->pid};
	err = buffers_unregister(&c->dp->buffers, &user, index);
	if (err)
		return count_buffer_error(c->dp, err);
	reply_status(c, h->op, h->id, 0);
	return 0;
}

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
	struct dp_session *s = c->session;
	if (lease_ms && s->nleases == dp->max_leases_per_client)
		session_prune_leases(dp, s);
	if (lease_ms && s->nleases == dp->max_leases_per_client) {
		REJECT(dp, lease_limit);
		lease_ms = 0; /* answer the lookup, without a lease */
	}
	uint8_t *out = reply_begin(c, h->op, h->id, 0, 16 + (size_t)lk.nkeys);
	if (!out)
		return 0;
	uint32_t hits;
	uint64_t lease = 0;
	err = l1_lookup(dp->l1, c->ns, lk.keys, lk.nkeys, out + 16, lease_ms, dp_now_ms(),
			&hits, &lease);
	if (err == -ENOSPC)
		REJECT(dp, lease_limit);
	else if (err) { /* no memory for the lease list: answer "nothing found" */
		hits = 0;
		memset(out + 16, KVT_TIER_NONE, lk.nkeys);
	}
	if (lease)
		s->leases[s->nleases++] = lease;
	struct wire_wr w = {out, 16, false};
	wire_put_u32(&w, hits);
	wire_put_u32(&w, lk.nkeys);
	wire_put_u64(&w, lease);
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
	/* A lease is released only by the client that took it. */
	if (!session_forget_lease(c->session, lease))
		return -ENOENT;
	err = l1_lease_release(c->dp->l1, lease);
	if (err)
		return err;
	reply_status(c, h->op, h->id, 0);
	return 0;
}

/* Checks a block against the block size and the buffer; 0 or a status. */
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

/* Whether LOADs go to L2 for blocks L1 misses: evict mode, L2 ready (failed or not: reads verify). */
static bool dp_l2_on(const struct dp *dp)
{
	return dp->l2 && dp->l2_evict && l2_readable(dp->l2);
}

/* The request's copies are all queued once its last L2 read is back: seal it. */
static void l2_reads_settled(struct dp_req *r)
{
	if (--r->l2_pending == 0)
		copy_batch_seal(r->engine, &r->batch);
}

/* Gives back what an L2 read held (slot being filled, bounce buffer). */
static void l2_block_undo(struct dp *dp, struct dp_block *b)
{
	if (b->promoting)
		l1_store_abort(dp->l1, &b->ref);
	b->promoting = b->pinned = false;
	free(b->bounce);
	b->bounce = NULL;
}

static void l2_block_arrived(struct dp_req *r, struct dp_block *b)
{
	b->length = b->rd.length;
	copy_add(r->engine, &r->batch, b->staging, b->promoting ? b->ref.data : b->bounce,
		 b->length);
}

/* An L2 read is back (loop thread): hand the block to the copy engine now. */
static void on_l2_read(struct l2_read *rd, int status)
{
	struct dp_block *b = (struct dp_block *)((char *)rd - offsetof(struct dp_block, rd));
	struct dp_req *r = b->req;
	struct dp *dp = r->conn->dp;
	if (status) { /* an I/O error or a checksum failure: a miss, counted by L2 */
		l2_block_undo(dp, b);
		b->status = -ENOENT;
	} else {
		l2_block_arrived(r, b);
	}
	l2_reads_settled(r);
}

/*
 * Reads a block L1 misses from L2 into a new L1 slot (promoting it), or into
 * a bounce buffer when no slot can be had; the copy to staging starts when
 * the read completes.
 */
static void load_from_l2(struct dp *dp, struct dp_req *r, struct dp_block *b,
			 const struct frame_block *blk, uint8_t *staging)
{
	const struct dp_conn *c = r->conn;
	int64_t len = l2_part_length(dp->l2, c->ns, &blk->key, c->rank);
	if (len < 0)
		return; /* b->status stays -ENOENT */
	if ((uint64_t)len > blk->length) {
		REJECT(dp, out_of_range);
		b->status = -ERANGE;
		return;
	}
	uint64_t cap = arena_slot_size(c->ns->block_bytes);
	uint8_t *dst;
	if (l1_store_begin(dp->l1, c->ns, &blk->key, c->rank, (uint32_t)len, &b->ref) == 0) {
		b->promoting = b->pinned = true;
		dst = b->ref.data;
	} else if (posix_memalign((void **)&b->bounce, ARENA_SLOT_ALIGN, cap) == 0) {
		dst = b->bounce;
	} else {
		return;
	}
	b->staging = staging;
	b->req = r;
	b->rd.done = on_l2_read;
	int rc = l2_read_begin(dp->l2, c->ns, &blk->key, c->rank, dst, cap, &b->rd);
	if (rc < 0) {
		l2_block_undo(dp, b);
		return;
	}
	b->status = 0;
	if (rc == 1) {
		l2_block_arrived(r, b);
		return;
	}
	r->l2_pending++;
}

static void req_complete(struct dp *dp, struct dp_req *r);

static int op_transfer(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		       uint64_t start_ns)
{
	struct dp *dp = c->dp;
	if (c->inflight >= DP_MAX_INFLIGHT) {
		REJECT(dp, inflight_limit);
		return -EBUSY;
	}
	struct frame_blocks fb;
	int err = frame_decode_blocks(p, h->length, &fb);
	if (err)
		return decode_failed(dp, err);
	struct stbuf *buf;
	struct buffer_user user = {c->session->id, c->pid};
	err = buffers_get(&dp->buffers, &user, fb.buffer, &buf);
	if (err)
		return count_buffer_error(dp, err);
	struct dp_req *r = calloc(1, sizeof(*r) + fb.nblocks * sizeof(r->blocks[0]));
	if (!r)
		return -ENOMEM;
	r->engine = buf->kind == KVT_BUFFER_SHM ? dp->copy : dp->gpu_copy;
	copy_batch_init(&r->batch, stbuf_device(buf), (unsigned)c->src.fd);
	r->conn = c;
	r->id = h->id;
	r->op = h->op;
	r->start_ns = start_ns;
	r->buf = buf;
	r->l2_pending = 1;
	r->n = fb.nblocks;
	buffers_hold(buf);
	buf->last_use_ms = dp_now_ms();
	c->inflight++;
	bool store = h->op == KVT_OP_STORE;
	for (uint32_t i = 0; i < fb.nblocks; i++) {
		struct frame_block blk;
		struct dp_block *b = &r->blocks[i];
		frame_block_at(&fb, i, &blk);
		if ((b->status = check_block(dp, c->ns, buf, &blk)))
			continue;
		uint8_t *staging = buf->base + blk.offset;
		if (store) {
			err = l1_store_begin(dp->l1, c->ns, &blk.key, c->rank, blk.length, &b->ref);
			b->status = err == -EEXIST ? 0 : err; /* a stored part is a no-op */
			if (err == -KVT_EQUOTA)
				REJECT(dp, quota);
			if (err)
				continue;
			b->length = blk.length;
			copy_add(r->engine, &r->batch, b->ref.data, staging, blk.length);
		} else {
			b->status = l1_load_begin(dp->l1, c->ns, &blk.key, c->rank, &b->ref);
			if (b->status == -ENOENT && dp_l2_on(dp)) {
				load_from_l2(dp, r, b, &blk, staging);
				continue;
			}
			if (b->status)
				continue;
			if (b->ref.length > blk.length) { /* the part does not fit its space */
				l1_load_end(dp->l1, &b->ref);
				REJECT(dp, out_of_range);
				b->status = -ERANGE;
				continue;
			}
			b->length = b->ref.length;
			copy_add(r->engine, &r->batch, staging, b->ref.data, b->ref.length);
		}
		b->pinned = true;
	}
	l2_reads_settled(r);
	return DP_ASYNC;
}

/* Commits or unpins one block of a finished request and counts it. */
static void block_finish(struct dp *dp, bool store, struct dp_block *b, int32_t fault)
{
	bool writing = store || b->promoting; /* ref is a slot being written */
	bool copied = b->pinned || b->bounce;
	if (copied && fault) { /* which block faulted is not known: fail all */
		b->status = fault;
		if (writing && b->pinned)
			l1_store_abort(dp->l1, &b->ref);
		else if (b->pinned)
			l1_load_end(dp->l1, &b->ref);
	} else if (b->pinned && writing) {
		l1_store_commit(dp->l1, &b->ref);
	} else if (b->pinned) {
		l1_load_end(dp->l1, &b->ref);
	}
	free(b->bounce);
	if (fault || !copied) {
		if (!store && b->status == -ENOENT)
			STAT_ADD(dp, blocks_load_missing, 1);
		return;
	}
	if (store) {
		STAT_ADD(dp, blocks_stored, 1);
		STAT_ADD(dp, bytes_stored, b->length);
		return;
	}
	STAT_ADD(dp, blocks_loaded, 1);
	STAT_ADD(dp, bytes_loaded, b->length);
	if (b->promoting || b->bounce)
		STAT_ADD(dp, blocks_loaded_l2, 1);
	if (b->promoting)
		STAT_ADD(dp, blocks_promoted, 1);
}

/* On the loop thread once every copy of r is done: commit, unpin, reply. */
static void req_complete(struct dp *dp, struct dp_req *r)
{
	struct dp_conn *c = r->conn;
	bool store = r->op == KVT_OP_STORE;
	int32_t fault = atomic_load(&r->batch.failed);
	if (fault)
		REJECT(dp, buffer_fault);
	uint8_t *out = reply_begin(c, r->op, r->id, 0, 8 + (size_t)r->n * KVT_BLOCK_STATUS_BYTES);
	struct wire_wr w = {out, out ? 8 + (size_t)r->n * KVT_BLOCK_STATUS_BYTES : 0, false};
	wire_put_u32(&w, r->n);
	wire_put_u32(&w, 0);
	for (uint32_t i = 0; i < r->n; i++) {
		struct dp_block *b = &r->blocks[i];
		block_finish(dp, store, b, fault);
		wire_put_u32(&w, (uint32_t)b->status);
		wire_put_u32(&w, b->status ? 0 : b->length);
	}
	observe(dp, r->op, 0, r->start_ns);
	buffers_put(r->buf);
	c->inflight--;
	free(r);
	queue_flush(c);
	conn_release_if_done(c);
}

static void complete_reaped(struct dp *dp, struct copy_engine *e)
{
	struct copy_batch *b = copy_engine_reap(e);
	while (b) {
		struct copy_batch *next = b->next_done;
		req_complete(dp, (struct dp_req *)b);
		b = next;
	}
}

static void on_copies_done(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, copy_src));
	complete_reaped(dp, dp->copy);
}

static void on_gpu_copies_done(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, gpu_copy_src));
	complete_reaped(dp, dp->gpu_copy);
}

/* --- frames --- */

/* One rule for every op: the payload is exactly its size (PING's is empty). */
static int op_ping(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		   uint64_t start_ns)
{
	(void)p;
	(void)start_ns;
	if (h->length)
		return decode_failed(c->dp, -EBADMSG);
	reply_status(c, h->op, h->id, 0);
	return 0;
}

/*
 * The ops: each handler answers 0 (replied), DP_ASYNC (the reply comes with
 * its copies) or a negative status for an error reply. The checks before a
 * handler run in docs/protocol.md's order: a known op, HELLO first, the role.
 */
struct dp_op {
	int (*handle)(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *p,
		      uint64_t start_ns);
	bool before_hello;         /* allowed before HELLO (HELLO itself) */
	bool workers_only;         /* a scheduler gets -EPERM */
};

static const struct dp_op dp_ops[KVT_OP_MAX + 1] = {
	[KVT_OP_HELLO] = {op_hello, true, false},
	[KVT_OP_PING] = {op_ping, false, false},
	[KVT_OP_REGISTER] = {op_register, false, true},
	[KVT_OP_UNREGISTER] = {op_unregister, false, true},
	[KVT_OP_LOOKUP] = {op_lookup, false, false},
	[KVT_OP_RELEASE] = {op_release, false, false},
	[KVT_OP_STORE] = {op_transfer, false, true},
	[KVT_OP_LOAD] = {op_transfer, false, true},
};

static int dispatch(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *payload)
{
	struct dp *dp = c->dp;
	uint64_t start = now_ns();
	const struct dp_op *op = h->op <= KVT_OP_MAX ? &dp_ops[h->op] : NULL;
	int rc;
	if (!op || !op->handle) {
		REJECT(dp, unknown_op);
		rc = -EOPNOTSUPP;
	} else if (!c->hello_done && !op->before_hello) {
		REJECT(dp, no_hello);
		rc = -ENOTCONN;
	} else if (op->workers_only && c->role != KVT_ROLE_WORKER) {
		REJECT(dp, role);
		rc = -EPERM;
	} else {
		rc = op->handle(c, h, payload, start);
	}
	if (rc == DP_ASYNC)
		return 0;
	if (rc < 0)
		reply_status(c, h->op, h->id, rc);
	observe(dp, h->op, rc < 0 ? rc : 0, start);
	return 0;
}

/* Parses every whole frame in the input buffer. */
static void process_input(struct dp_conn *c)
{
	size_t off = 0;
	while (!c->dead && c->in_len - off >= KVT_HDR_BYTES) {
		struct wire_hdr h;
		wire_hdr_decode(c->in + off, &h);
		int err = frame_check_header(&h);
		if (err) {
			if (err == -EPROTO)
				REJECT(c->dp, bad_magic);
			else
				REJECT(c->dp, oversized);
			log_debug("data plane: closing a connection: %s", kvt_strerror(err));
			conn_close(c);
			return;
		}
		size_t need = KVT_HDR_BYTES + (size_t)h.length;
		if (c->in_len - off < need)
			break;
		dispatch(c, &h, c->in + off + KVT_HDR_BYTES);
		off += need;
	}
	if (c->dead)
		return;
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
}

static void keep_fds(struct dp_conn *c, struct msghdr *msg)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const uint8_t *data = CMSG_DATA(cm);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, data + i * sizeof(int), sizeof(int));
			if (c->nfds < DP_MAX_QUEUED_FDS)
				c->fds[c->nfds++] = fd;
			else
				close(fd); /* more than any request can use */
		}
	}
}

/* Reads at most this many times per wakeup, so one busy lane cannot starve others. */
#define DP_READS_PER_EVENT 16

static void conn_read(struct dp_conn *c)
{
	for (int reads = 0; reads < DP_READS_PER_EVENT; reads++) {
		if (c->in_cap - c->in_len < DP_READ_CHUNK / 4) {
			size_t cap = c->in_cap ? c->in_cap * 2 : DP_READ_CHUNK;
			if (cap > KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES + DP_READ_CHUNK)
				cap = KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES + DP_READ_CHUNK;
			uint8_t *p = cap > c->in_cap ? realloc(c->in, cap) : c->in;
			if (!p) {
				conn_close(c);
				return;
			}
			c->in = p;
			c->in_cap = cap;
		}
		union {
			char buf[CMSG_SPACE(sizeof(int) * DP_MAX_QUEUED_FDS)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {c->in + c->in_len, c->in_cap - c->in_len};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(c->src.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		keep_fds(c, &msg);
		c->in_len += (size_t)n;
		process_input(c);
		if (c->dead)
			return;
	}
	conn_flush(c);
}

static void on_conn_event(struct loop_source *src, uint32_t events)
{
	struct dp_conn *c = (struct dp_conn *)src;
	if (c->dead) /* closed earlier in this batch: its fd may be another's now */
		return;
	if (events & EPOLLIN)
		conn_read(c);
	if (!c->dead && (events & EPOLLOUT))
		conn_flush(c);
	if (!c->dead && (events & (EPOLLHUP | EPOLLERR)))
		conn_close(c);
	conn_release_if_done(c);
}

static void on_accept(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, listen_src));
	for (;;) {
		int fd = accept4(src->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (dp->nconns >= dp->max_connections) {
			REJECT(dp, connection_limit);
			close(fd);
			continue;
		}
		struct dp_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		struct ucred cred;
		socklen_t len = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
			c->pid = cred.pid;
		c->src = (struct loop_source){.fd = fd, .on_event = on_conn_event};
		c->dp = dp;
		if (loop_add(dp->loop, &c->src, EPOLLIN | EPOLLRDHUP)) {
			close(fd);
			free(c);
			continue;
		}
		c->next = dp->conns;
		dp->conns = c;
		dp->nconns++;
		STAT_ADD(dp, connections_total, 1);
		STAT_ADD(dp, connections_active, 1);
	}
}

/* --- for the control plane (loop thread) --- */

uint32_t dp_ns_connections(const struct dp *dp, const struct kvt_ns *ns)
{
	(void)dp;
	return ns->dp_conns;
}

void dp_buffers_foreach(const struct dp *dp,
			void (*fn)(uint32_t index, const struct stbuf *b, pid_t pid, void *ctx),
			void *ctx)
{
	for (uint32_t i = 0; i < dp->buffers.cap; i++) {
		const struct stbuf *b = &dp->buffers.slots[i];
		if (!b->registered)
			continue;
		const struct dp_session *s = dp->sessions;
		while (s && s->id != b->session)
			s = s->next;
		fn(i, b, s ? s->pid : 0, ctx);
	}
}

/* --- lifecycle --- */

static int bind_socket(const char *path, char *why, size_t whylen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (errno != EADDRINUSE)
			goto fail;
		/* Replace the socket file only when nobody answers on it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			snprintf(why, whylen, "another kvtierd is serving %s", path);
			close(fd);
			return -EADDRINUSE;
		}
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
			goto fail;
	}
	if (listen(fd, 256))
		goto fail;
	return fd;
fail: {
	int err = -errno;
	snprintf(why, whylen, "%s: %s", path, kvt_strerror(err));
	if (fd >= 0)
		close(fd);
	return err;
}
}

int dp_open(struct dp *dp, const struct dp_config *cfg, struct loop *loop, struct l1 *l1,
	    struct ns_registry *namespaces, struct copy_engine *copy, struct copy_engine *gpu_copy,
	    char *why, size_t whylen)
{
	memset(dp, 0, sizeof(*dp));
	dp->loop = loop;
	dp->batch_hook.run = after_batch;
	dp->l1 = l1;
	dp->namespaces = namespaces;
	dp->copy = copy;
	dp->gpu_copy = gpu_copy;
	dp->max_connections = cfg->max_connections;
	dp->max_leases_per_client = cfg->max_leases_per_client;
	dp->lease_default_ms = cfg->lease_default_ms;
	dp->max_namespaces_per_client = cfg->max_namespaces_per_client;
	dp->namespace_l1_quota = cfg->namespace_l1_quota;
	dp->namespace_l2_quota = cfg->namespace_l2_quota;
	snprintf(dp->socket_path, sizeof(dp->socket_path), "%s", cfg->socket_path);
	int err = buffers_init(&dp->buffers, 4096);
	if (err) {
		snprintf(why, whylen, "out of memory");
		return err;
	}
	int fd = bind_socket(cfg->socket_path, why, whylen);
	if (fd < 0) {
		buffers_destroy(&dp->buffers);
		return fd;
	}
	dp->listen_src = (struct loop_source){.fd = fd, .on_event = on_accept};
	dp->copy_src = (struct loop_source){.fd = copy->eventfd, .on_event = on_copies_done};
	dp->gpu_copy_src = (struct loop_source){.fd = gpu_copy ? gpu_copy->eventfd : -1,
						.on_event = on_gpu_copies_done};
	if ((err = loop_add(loop, &dp->listen_src, EPOLLIN)) ||
	    (err = loop_add(loop, &dp->copy_src, EPOLLIN)) ||
	    (gpu_copy && (err = loop_add(loop, &dp->gpu_copy_src, EPOLLIN)))) {
		snprintf(why, whylen, "epoll: %s", kvt_strerror(err));
		close(fd);
		unlink(cfg->socket_path);
		buffers_destroy(&dp->buffers);
		return err;
	}
	loop_add_hook(loop, &dp->batch_hook);
	return 0;
}

void dp_close(struct dp *dp)
{
	loop_del(dp->loop, &dp->listen_src);
	close(dp->listen_src.fd);
	unlink(dp->socket_path);
	for (struct dp_conn *c = dp->conns, *next; c; c = next) {
		next = c->next;
		conn_close(c);
		conn_release_if_done(c);
	}
	/* Copies and L2 reads in flight finish through the loop, which still has their sources. */
	while (dp->conns)
		loop_run_once(dp->loop, 100);
	loop_del(dp->loop, &dp->copy_src);
	if (dp->gpu_copy)
		loop_del(dp->loop, &dp->gpu_copy_src);
	after_batch(&dp->batch_hook); /* those retired without a round after */
	loop_remove_hook(dp->loop, &dp->batch_hook);
	buffers_destroy(&dp->buffers);
}
