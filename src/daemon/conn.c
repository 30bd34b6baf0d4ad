/* conn.c — see conn.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "codec.h"
#include "dp.h"
#include "log.h"
#include "owner_stats.h"
#include "sessions.h"
#include "wire.h"

#define DP_READ_CHUNK (256 * 1024)
/* A client that leaves this many reply bytes unread is closed. */
#define DP_MAX_OUT_BYTES (64u << 20)
/* Reads at most this many times per wakeup, so one busy lane cannot starve others. */
#define DP_READS_PER_EVENT 16

/* --- output --- */

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

/* Room for need bytes in the output buffer, compacting before growing. */
static bool out_reserve(struct dp_conn *c, size_t more)
{
	size_t need = c->out_len + more;
	if (need <= c->out_cap)
		return true;
	if (c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
		need = c->out_len + more;
	}
	size_t cap = c->out_cap ? c->out_cap : 4096;
	while (cap < need)
		cap *= 2;
	uint8_t *p = realloc(c->out, cap);
	if (!p)
		return false;
	c->out = p;
	c->out_cap = cap;
	return true;
}

uint8_t *conn_reply_begin(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status,
			  size_t len)
{
	if (c->dead)
		return NULL;
	if (c->out_len + KVT_HDR_BYTES + len > DP_MAX_OUT_BYTES) {
		STAT_ADD(c->dp, rejected.slow_reader, 1);
		log_warn("data plane: closing a client that leaves %zu reply bytes unread", c->out_len);
		conn_close(c);
		return NULL;
	}
	if (!out_reserve(c, KVT_HDR_BYTES + len)) {
		conn_close(c);
		return NULL;
	}
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = op, .flags = KVT_FLAG_REPLY,
			     .length = (uint32_t)len, .status = status, .id = id};
	uint8_t *at = c->out + c->out_len;
	wire_hdr_encode(at, &h);
	c->out_len += KVT_HDR_BYTES + len;
	return at + KVT_HDR_BYTES;
}

void conn_reply_status(struct dp_conn *c, uint16_t op, uint64_t id, int32_t status)
{
	conn_reply_begin(c, op, id, status, 0);
}

/* --- lifecycle --- */

/*
 * A closed connection with no copy in flight leaves the live list and ends its
 * session's share; its memory waits for the batch to end (conn_after_batch).
 */
static void conn_retire(struct dp_conn *c)
{
	struct dp *dp = c->dp;
	LIST_REMOVE(c, link);
	if (c->session)
		session_leave(dp, c->session);
	c->session = NULL;
	if (c->ns)
		ns_unbind(dp, (struct kvt_ns *)c->ns);
	c->ns = NULL;
	SLIST_INSERT_HEAD(&dp->dead_conns, c, dead_link);
	dp->nconns--;
}

/* Retires a closed connection once no copy of it is in flight. */
static void conn_release_if_done(struct dp_conn *c)
{
	if (c->dead && c->inflight == 0 && !c->retired) {
		c->retired = true;
		conn_retire(c);
	}
}

void conn_close(struct dp_conn *c)
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

void conn_close_all(struct dp *dp)
{
	for (struct dp_conn *c = LIST_FIRST(&dp->conns), *next; c; c = next) {
		next = LIST_NEXT(c, link); /* before: c may be retired */
		conn_close(c);
		conn_release_if_done(c);
	}
}

/* Completion replies go out once per batch: several finished copies, one send. */
void conn_request_done(struct dp_conn *c)
{
	c->inflight--;
	if (!c->flush_queued && !c->dead) {
		c->flush_queued = true;
		SLIST_INSERT_HEAD(&c->dp->flush_conns, c, flush_link);
	}
	conn_release_if_done(c);
}

void conn_after_batch(struct dp *dp)
{
	struct dp_conn *c;
	while ((c = SLIST_FIRST(&dp->flush_conns))) {
		SLIST_REMOVE_HEAD(&dp->flush_conns, flush_link);
		c->flush_queued = false;
		conn_flush(c);
		conn_release_if_done(c);
	}
	while ((c = SLIST_FIRST(&dp->dead_conns))) {
		SLIST_REMOVE_HEAD(&dp->dead_conns, dead_link);
		free(c->in);
		free(c->out);
		free(c);
	}
}

/* --- input --- */

int conn_take_fd(struct dp_conn *c)
{
	if (c->nfds == 0)
		return -1;
	int fd = c->fds[0];
	memmove(c->fds, c->fds + 1, --c->nfds * sizeof(c->fds[0]));
	return fd;
}

/*
 * fds that no frame took: whatever came with a frame other than the
 * REGISTER that uses it. Kept only while a frame is still partly read (its
 * fd comes with its first bytes), so a connection parks at most
 * DP_MAX_QUEUED_FDS.
 */
static void close_stray_fds(struct dp_conn *c)
{
	if (c->in_len && c->hello_done)
		return;
	if (c->nfds)
		STAT_ADD(c->dp, rejected.stray_fds, c->nfds);
	for (unsigned i = 0; i < c->nfds; i++)
		close(c->fds[i]);
	c->nfds = 0;
}

/* Hands every whole frame in the input buffer to the op handlers. */
static void process_input(struct dp_conn *c)
{
	size_t off = 0;
	while (!c->dead && c->in_len - off >= KVT_HDR_BYTES) {
		struct wire_hdr h;
		wire_hdr_decode(c->in + off, &h);
		int err = frame_check_header(&h);
		if (err) {
			if (err == -EPROTO)
				STAT_ADD(c->dp, rejected.bad_magic, 1);
			else
				STAT_ADD(c->dp, rejected.oversized, 1);
			log_debug("data plane: closing a connection: %s", kvt_strerror(err));
			conn_close(c);
			return;
		}
		size_t need = KVT_HDR_BYTES + (size_t)h.length;
		if (c->in_len - off < need)
			break;
		c->dp->dispatch(c, &h, c->in + off + KVT_HDR_BYTES);
		off += need;
	}
	if (c->dead)
		return;
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	close_stray_fds(c);
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
			if (c->nfds < DP_MAX_QUEUED_FDS && c->hello_done) {
				c->fds[c->nfds++] = fd;
			} else { /* more than a frame can use, or before HELLO */
				STAT_ADD(c->dp, rejected.stray_fds, 1);
				close(fd);
			}
		}
	}
}

/* Room for the next read: the buffer grows to one frame and a read chunk at most. */
static bool in_reserve(struct dp_conn *c)
{
	if (c->in_cap - c->in_len >= DP_READ_CHUNK / 4)
		return true;
	size_t cap = c->in_cap ? c->in_cap * 2 : DP_READ_CHUNK;
	if (cap > KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES + DP_READ_CHUNK)
		cap = KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES + DP_READ_CHUNK;
	uint8_t *p = cap > c->in_cap ? realloc(c->in, cap) : c->in;
	if (!p)
		return false;
	c->in = p;
	c->in_cap = cap;
	return true;
}

static void conn_read(struct dp_conn *c)
{
	for (int reads = 0; reads < DP_READS_PER_EVENT; reads++) {
		if (!in_reserve(c)) {
			conn_close(c);
			return;
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

/* The open lanes of uid's processes. */
static uint32_t lanes_of(const struct dp *dp, uid_t uid)
{
	uint32_t n = 0;
	const struct dp_conn *c;
	LIST_FOREACH(c, &dp->conns, link)
		n += !c->dead && c->peer.uid == uid;
	return n;
}

static void close_unbound(struct dp_conn *c)
{
	STAT_ADD(c->dp, rejected.hello_timeout, 1);
	log_debug("data plane: closing a connection that sent no HELLO (uid %u, pid %d)",
		  (unsigned)c->peer.uid, (int)c->peer.pid);
	conn_close(c);
	conn_release_if_done(c);
}

bool conn_shed_oldest_unbound(struct dp *dp)
{
	struct dp_conn *c, *oldest = NULL;
	LIST_FOREACH(c, &dp->conns, link)
		if (!c->dead && !c->hello_done && (!oldest || c->opened_ms < oldest->opened_ms))
			oldest = c;
	if (oldest)
		close_unbound(oldest);
	return oldest != NULL;
}

void conn_close_overdue(struct dp *dp, uint64_t now_ms)
{
	for (struct dp_conn *c = LIST_FIRST(&dp->conns), *next; c; c = next) {
		next = LIST_NEXT(c, link); /* before: c may be retired */
		if (!c->dead && !c->hello_done && now_ms - c->opened_ms >= dp->peer.hello_timeout_ms)
			close_unbound(c);
	}
}

int conn_open(struct dp *dp, int fd)
{
	struct dp_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		int err = -errno; /* an AF_UNIX socket always has them: refuse what cannot be told */
		close(fd);
		free(c);
		return err;
	}
	c->peer = (struct peer){.uid = cred.uid, .pid = cred.pid};
	if (lanes_of(dp, cred.uid) >= dp->peer.connections) {
		STAT_ADD(dp, rejected.peer_limit, 1);
		close(fd);
		free(c);
		return -EDQUOT;
	}
	c->opened_ms = kvt_now_ms();
	c->src = (struct loop_source){.fd = fd, .on_event = on_conn_event};
	c->dp = dp;
	int err = loop_add(dp->loop, &c->src, EPOLLIN | EPOLLRDHUP);
	if (err) {
		close(fd);
		free(c);
		return err;
	}
	LIST_INSERT_HEAD(&dp->conns, c, link);
	dp->nconns++;
	STAT_ADD(dp, connections_total, 1);
	STAT_ADD(dp, connections_active, 1);
	return 0;
}
