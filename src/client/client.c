/*
 * client.c — libkvtier's data-plane client: lanes (connections), HELLO,
 * buffer registration, and asynchronous LOOKUP / STORE / LOAD with
 * out-of-order completions matched by request id.
 *
 * Each lane owns fixed buffers made at open (a frame buffer for sending, one
 * for receiving, and a table of max_inflight request slots), so a request
 * allocates nothing. A request id carries its slot in the low 16 bits.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvtier/kvtier.h"
#include "kvtier/protocol.h"
#include "client_internal.h"
#include "codec.h"
#include "fdpass.h"
#include "wire.h"

#define SLOT_BITS 16
#define SLOT_MASK ((1u << SLOT_BITS) - 1)

enum slot_state { SLOT_FREE, SLOT_WAITING, SLOT_DONE };

struct slot {
	uint64_t id;
	uint16_t op;
	uint8_t state;
	int status;
	struct kvt_block *blocks;
	uint32_t nblocks;
	struct kvt_lookup *lookup;
	uint8_t *reply;            /* sync ops that need the payload (HELLO, REGISTER) */
	size_t reply_len;
};

struct lane {
	pthread_mutex_t lock;
	int fd;
	int error;                 /* set once the connection failed */
	uint64_t seq;
	struct slot *slots;
	uint32_t nslots;
	uint8_t *tx;
	uint8_t *rx;
	size_t rx_len;
};

struct kvt_client {
	struct lane *lanes;
	unsigned nlanes;
	uint64_t session;
	uint64_t block_bytes;
};

#define RX_BYTES (KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES)

/* --- sending --- */

static int send_all(int fd, const uint8_t *p, size_t len, int pass_fd)
{
	while (len) {
		ssize_t n = fdpass_send(fd, p, len, pass_fd);
		if (n < 0)
			return (int)n;
		p += n;
		len -= (size_t)n;
		pass_fd = -1; /* the fd went with the first bytes */
	}
	return 0;
}

/* Claims a slot for a request of op; the caller holds the lane lock. */
static struct slot *slot_claim(struct lane *l, uint16_t op)
{
	for (uint32_t i = 0; i < l->nslots; i++) {
		uint32_t s = (uint32_t)((l->seq + i) % l->nslots);
		if (l->slots[s].state != SLOT_FREE)
			continue;
		l->seq++;
		struct slot *slot = &l->slots[s];
		memset(slot, 0, sizeof(*slot));
		slot->id = (l->seq << SLOT_BITS) | s;
		slot->op = op;
		slot->state = SLOT_WAITING;
		return slot;
	}
	return NULL;
}

/* Sends tx[0..KVT_HDR_BYTES + len) as op for slot. */
static int lane_send(struct lane *l, struct slot *slot, size_t len, int pass_fd)
{
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = slot->op, .length = (uint32_t)len,
			     .id = slot->id};
	wire_hdr_encode(l->tx, &h);
	int err = l->error ? l->error : send_all(l->fd, l->tx, KVT_HDR_BYTES + len, pass_fd);
	if (err) {
		l->error = err;
		slot->state = SLOT_FREE;
	}
	return err;
}

/* --- receiving --- */

static void finish(struct lane *l, const struct wire_hdr *h, const uint8_t *p)
{
	uint32_t s = (uint32_t)(h->id & SLOT_MASK);
	if (s >= l->nslots || l->slots[s].id != h->id || l->slots[s].state != SLOT_WAITING)
		return; /* not ours: ignore */
	struct slot *slot = &l->slots[s];
	slot->status = h->status > 0 ? -EBADMSG : h->status;
	if (h->status == 0) {
		if (slot->op == KVT_OP_STORE || slot->op == KVT_OP_LOAD)
			slot->status = reply_decode_transfer(p, h->length, slot->op == KVT_OP_LOAD,
								  slot->blocks, slot->nblocks);
		else if (slot->op == KVT_OP_LOOKUP)
			slot->status = reply_decode_lookup(p, h->length, slot->lookup);
		else if (slot->reply)
			slot->status = reply_decode_fixed(p, h->length, slot->reply,
							       slot->reply_len);
		else if (h->length) /* PING, UNREGISTER, RELEASE answer nothing */
			slot->status = -EBADMSG;
	}
	slot->state = SLOT_DONE;
}

/* Fails every outstanding request of a lane whose connection broke. */
static void lane_fail(struct lane *l, int err)
{
	l->error = err;
	for (uint32_t s = 0; s < l->nslots; s++) {
		if (l->slots[s].state != SLOT_WAITING)
			continue;
		l->slots[s].status = err;
		l->slots[s].state = SLOT_DONE;
	}
}

/*
 * Reads what is there (waiting up to timeout_ms) and finishes whole frames.
 * Returns how many it finished, or the lane's error.
 */
static int lane_receive(struct lane *l, int timeout_ms)
{
	if (l->error)
		return l->error;
	struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
	int rc = poll(&pfd, 1, timeout_ms);
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	if (rc == 0)
		return 0;
	ssize_t n = recv(l->fd, l->rx + l->rx_len, RX_BYTES - l->rx_len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		lane_fail(l, n == 0 ? -ECONNRESET : -errno);
		return l->error;
	}
	l->rx_len += (size_t)n;
	size_t off = 0;
	int finished = 0;
	while (l->rx_len - off >= KVT_HDR_BYTES) {
		struct wire_hdr h;
		wire_hdr_decode(l->rx + off, &h);
		if (h.magic != KVT_PROTO_MAGIC || !(h.flags & KVT_FLAG_REPLY) ||
		    h.length > KVT_MAX_FRAME_BYTES) {
			lane_fail(l, -EPROTO);
			return l->error;
		}
		if (l->rx_len - off < KVT_HDR_BYTES + h.length)
			break;
		finish(l, &h, l->rx + off + KVT_HDR_BYTES);
		off += KVT_HDR_BYTES + h.length;
		finished++;
	}
	memmove(l->rx, l->rx + off, l->rx_len - off);
	l->rx_len -= off;
	return finished;
}

/* Waits for one slot; returns its status and frees it. Lock held. */
static int lane_wait_slot(struct lane *l, struct slot *slot, int timeout_ms)
{
	while (slot->state == SLOT_WAITING) {
		int rc = lane_receive(l, timeout_ms);
		if (rc < 0)
			return rc;
		if (rc == 0 && timeout_ms >= 0 && slot->state == SLOT_WAITING)
			return -ETIMEDOUT;
	}
	slot->state = SLOT_FREE;
	return slot->status;
}

/* --- lanes --- */

static int lane_open(struct lane *l, const char *path, unsigned nslots)
{
	memset(l, 0, sizeof(*l));
	l->fd = -1;
	pthread_mutex_init(&l->lock, NULL);
	l->nslots = nslots;
	l->slots = calloc(nslots, sizeof(*l->slots));
	l->tx = malloc(KVT_HDR_BYTES + KVT_MAX_FRAME_BYTES);
	l->rx = malloc(RX_BYTES);
	if (!l->slots || !l->tx || !l->rx)
		return -ENOMEM;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0 || connect(l->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	return 0;
}

static void lane_close(struct lane *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->slots);
	free(l->tx);
	free(l->rx);
	pthread_mutex_destroy(&l->lock);
}

/* The payload area of the lane's send buffer; only with the lane lock held. */
static uint8_t *lane_payload(struct lane *l)
{
	return l->tx + KVT_HDR_BYTES;
}

/*
 * A synchronous request on lane l whose payload is in tx; with the lane lock
 * held, which it releases.
 */
static int lane_call_unlock(struct lane *l, uint16_t op, size_t len, int pass_fd,
			    uint8_t *reply, size_t reply_len)
{
	struct slot *slot = slot_claim(l, op);
	int err = slot ? 0 : -EBUSY;
	if (slot) {
		slot->reply = reply;
		slot->reply_len = reply_len;
		err = lane_send(l, slot, len, pass_fd);
	}
	if (!err)
		err = lane_wait_slot(l, slot, -1);
	pthread_mutex_unlock(&l->lock);
	return err;
}

static int hello(struct kvt_client *c, struct lane *l, const struct kvt_client_options *o)
{
	const char *salt = o->cache_salt ? o->cache_salt : "";
	size_t mlen = strlen(o->model), slen = strlen(salt);
	if (mlen == 0 || mlen > KVT_MAX_NAME || slen > KVT_MAX_NAME)
		return -EINVAL;
	struct frame_hello fh = {
		.version = KVT_PROTO_VERSION, .role = o->scheduler ? KVT_ROLE_SCHEDULER : KVT_ROLE_WORKER,
		.flags = KVT_HELLO_TIER3,
		.tp_size = o->tp_size ? o->tp_size : 1, .rank = o->rank, .block_bytes = o->block_bytes,
		.session = c->session,
	};
	memcpy(fh.model, o->model, mlen + 1);
	memcpy(fh.salt, salt, slen + 1);
	pthread_mutex_lock(&l->lock);
	size_t len = frame_encode_hello(lane_payload(l), &fh);
	uint8_t reply[KVT_HELLO_REPLY_BYTES] = {0};
	int err = lane_call_unlock(l, KVT_OP_HELLO, len, -1, reply, sizeof(reply));
	if (err)
		return err;
	struct reply_hello hr;
	err = reply_decode_hello(reply, sizeof(reply), &hr);
	if (!err)
		c->session = hr.session;
	return err;
}

int kvt_client_open(const struct kvt_client_options *o, struct kvt_client **out)
{
	if (!o || !o->socket_path || !o->model || o->block_bytes == 0)
		return -EINVAL;
	unsigned nlanes = o->lanes ? o->lanes : 1;
	unsigned nslots = o->max_inflight ? o->max_inflight : 64;
	if (nslots > SLOT_MASK + 1u || nlanes > 1024)
		return -EINVAL;
	struct kvt_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->block_bytes = o->block_bytes;
	c->lanes = calloc(nlanes, sizeof(*c->lanes));
	int err = c->lanes ? 0 : -ENOMEM;
	for (unsigned i = 0; !err && i < nlanes; i++) {
		c->nlanes++;
		err = lane_open(&c->lanes[i], o->socket_path, nslots);
		if (!err)
			err = hello(c, &c->lanes[i], o);
	}
	if (err) {
		kvt_client_close(c);
		return err;
	}
	*out = c;
	return 0;
}

void kvt_client_close(struct kvt_client *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->nlanes; i++)
		lane_close(&c->lanes[i]);
	free(c->lanes);
	free(c);
}

unsigned kvt_client_lanes(const struct kvt_client *c)
{
	return c->nlanes;
}

int kvt_client_session(const struct kvt_client *c, char *buf, size_t buflen)
{
	if (buflen < 17)
		return -ENOSPC;
	snprintf(buf, buflen, "%016llx", (unsigned long long)c->session);
	return 0;
}

int kvt__lane_fd(struct kvt_client *c, unsigned lane)
{
	return lane < c->nlanes ? c->lanes[lane].fd : -1;
}

/* --- buffers --- */

int kvt__buffer_register_frame(struct kvt_client *c, const struct frame_register *reg, int fd,
			       uint32_t *index)
{
	struct lane *l = &c->lanes[0];
	pthread_mutex_lock(&l->lock);
	size_t len = frame_encode_register(lane_payload(l), reg);
	uint8_t reply[8] = {0};
	int err = lane_call_unlock(l, KVT_OP_REGISTER, len, fd, reply, sizeof(reply));
	return err ? err : reply_decode_register(reply, sizeof(reply), index);
}

int kvt_buffer_register(struct kvt_client *c, int fd, uint64_t size, uint32_t *index)
{
	struct frame_register reg = {.kind = KVT_BUFFER_SHM, .size = size};
	return kvt__buffer_register_frame(c, &reg, fd, index);
}

int kvt_buffer_create(struct kvt_client *c, uint64_t size, void **addr, uint32_t *index)
{
	int fd = memfd_create("kvtier-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int err = 0;
	if (ftruncate(fd, (off_t)size))
		err = -errno;
	void *p = err ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!err && p == MAP_FAILED)
		err = -errno;
	if (!err && (err = kvt_buffer_register(c, fd, size, index)))
		munmap(p, size);
	close(fd);
	if (!err)
		*addr = p;
	return err;
}

int kvt_buffer_unregister(struct kvt_client *c, uint32_t index)
{
	struct lane *l = &c->lanes[0];
	pthread_mutex_lock(&l->lock);
	size_t len = frame_encode_u32(lane_payload(l), index);
	return lane_call_unlock(l, KVT_OP_UNREGISTER, len, -1, NULL, 0);
}

/* --- asynchronous requests --- */

static int submit_transfer(struct kvt_client *c, unsigned lane, uint16_t op, uint32_t buffer,
			   struct kvt_block *blocks, uint32_t n, uint64_t *id)
{
	if (lane >= c->nlanes)
		return -EINVAL;
	if (n > KVT_MAX_BLOCKS)
		return -E2BIG;
	struct lane *l = &c->lanes[lane];
	pthread_mutex_lock(&l->lock);
	struct slot *slot = slot_claim(l, op);
	int err = -EBUSY;
	if (slot) {
		slot->blocks = blocks;
		slot->nblocks = n;
		size_t len = frame_encode_blocks(lane_payload(l), buffer, blocks, n);
		err = lane_send(l, slot, len, -1);
		if (!err)
			*id = slot->id;
	}
	pthread_mutex_unlock(&l->lock);
	return err;
}

int kvt_submit_store(struct kvt_client *c, unsigned lane, uint32_t buffer,
		     struct kvt_block *blocks, uint32_t nblocks, uint64_t *id)
{
	return submit_transfer(c, lane, KVT_OP_STORE, buffer, blocks, nblocks, id);
}

int kvt_submit_load(struct kvt_client *c, unsigned lane, uint32_t buffer,
		    struct kvt_block *blocks, uint32_t nblocks, uint64_t *id)
{
	return submit_transfer(c, lane, KVT_OP_LOAD, buffer, blocks, nblocks, id);
}

int kvt_submit_lookup(struct kvt_client *c, unsigned lane, struct kvt_lookup *lk, uint64_t *id)
{
	if (lane >= c->nlanes)
		return -EINVAL;
	if (lk->nkeys > KVT_MAX_KEYS)
		return -E2BIG;
	struct lane *l = &c->lanes[lane];
	pthread_mutex_lock(&l->lock);
	struct slot *slot = slot_claim(l, KVT_OP_LOOKUP);
	int err = -EBUSY;
	if (slot) {
		slot->lookup = lk;
		size_t len = frame_encode_lookup(lane_payload(l), lk);
		err = lane_send(l, slot, len, -1);
		if (!err)
			*id = slot->id;
	}
	pthread_mutex_unlock(&l->lock);
	return err;
}

/* Hands out finished requests (in slot order: completions are unordered). */
static unsigned drain_done(struct lane *l, struct kvt_completion *out, unsigned max)
{
	unsigned n = 0;
	for (uint32_t s = 0; s < l->nslots && n < max; s++) {
		struct slot *slot = &l->slots[s];
		if (slot->state != SLOT_DONE)
			continue;
		out[n++] = (struct kvt_completion){slot->id, slot->status};
		slot->state = SLOT_FREE;
	}
	return n;
}

int kvt_poll(struct kvt_client *c, unsigned lane, struct kvt_completion *out, unsigned max,
	     int timeout_ms)
{
	if (lane >= c->nlanes || max == 0)
		return -EINVAL;
	struct lane *l = &c->lanes[lane];
	pthread_mutex_lock(&l->lock);
	unsigned n = drain_done(l, out, max);
	int rc = 0;
	if (n == 0) {
		rc = lane_receive(l, timeout_ms);
		/* Then take whatever else has arrived, without waiting. */
		while (rc > 0)
			rc = lane_receive(l, 0);
		n = drain_done(l, out, max);
	}
	pthread_mutex_unlock(&l->lock);
	return n ? (int)n : rc;
}

int kvt_wait(struct kvt_client *c, unsigned lane, uint64_t id, int timeout_ms)
{
	if (lane >= c->nlanes)
		return -EINVAL;
	struct lane *l = &c->lanes[lane];
	uint32_t s = (uint32_t)(id & SLOT_MASK);
	pthread_mutex_lock(&l->lock);
	int err;
	if (s >= l->nslots || l->slots[s].id != id || l->slots[s].state == SLOT_FREE)
		err = -ENOENT;
	else
		err = lane_wait_slot(l, &l->slots[s], timeout_ms);
	pthread_mutex_unlock(&l->lock);
	return err;
}

/* --- blocking forms --- */

int kvt_store(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n)
{
	uint64_t id;
	int rc = kvt_submit_store(c, 0, buffer, blocks, n, &id);
	return rc ? rc : kvt_wait(c, 0, id, -1);
}

int kvt_load(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n)
{
	uint64_t id;
	int rc = kvt_submit_load(c, 0, buffer, blocks, n, &id);
	return rc ? rc : kvt_wait(c, 0, id, -1);
}

int kvt_lookup(struct kvt_client *c, struct kvt_lookup *lookup)
{
	uint64_t id;
	int rc = kvt_submit_lookup(c, 0, lookup, &id);
	return rc ? rc : kvt_wait(c, 0, id, -1);
}

int kvt_release(struct kvt_client *c, uint64_t lease_id)
{
	struct lane *l = &c->lanes[0];
	pthread_mutex_lock(&l->lock);
	size_t len = frame_encode_u64(lane_payload(l), lease_id);
	return lane_call_unlock(l, KVT_OP_RELEASE, len, -1, NULL, 0);
}

int kvt_ping(struct kvt_client *c)
{
	pthread_mutex_lock(&c->lanes[0].lock);
	return lane_call_unlock(&c->lanes[0], KVT_OP_PING, 0, -1, NULL, 0);
}
