/* dp_helpers.c — see dp_helpers.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dp_helpers.h"
#include "fdpass.h"
#include "kvtier/protocol.h"
#include "wire.h"

void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* The test's daemon; the teardown stops it even when the test failed. */
struct daemon_fixture *current;

struct daemon_fixture *start(const char *const *flags)
{
	struct daemon_fixture *d = calloc(1, sizeof(*d));
	current = d;
	if (daemon_start(d, flags))
		fail_msg("kvtierd did not start; see its log under %s", d->dir);
	return d;
}

/* Stops the daemon and checks it exited 0 after SIGTERM. */
void stop(struct daemon_fixture *d)
{
	current = NULL;
	int rc = daemon_stop(d);
	free(d);
	assert_int_equal(rc, 0);
}

int teardown(void **state)
{
	(void)state;
	if (current) {
		/* The stop removes the daemon's directory: show its log's end first. */
		char cmd[256];
		fprintf(stderr, "test failed; the end of kvtierd's log (%s):\n", current->log);
		snprintf(cmd, sizeof(cmd), "tail -n 40 '%s' >&2", current->log);
		(void)!system(cmd);
		daemon_stop(current);
		free(current);
		current = NULL;
	}
	return 0;
}

struct kvt_client *client(struct daemon_fixture *d, const char *model, uint64_t block,
				 uint16_t tp, uint16_t rank, int scheduler, unsigned lanes)
{
	struct kvt_client_options o = {.socket_path = d->socket, .model = model,
				       .block_bytes = block, .tp_size = tp, .rank = rank,
				       .scheduler = scheduler, .lanes = lanes};
	struct kvt_client *c = NULL;
	int rc = kvt_client_open(&o, &c);
	if (rc)
		fail_msg("kvt_client_open: %s", kvt_strerror(rc));
	return c;
}


struct staging staging(struct kvt_client *c, uint64_t size)
{
	struct staging s = {.size = size};
	void *addr;
	int rc = kvt_buffer_create(c, size, &addr, &s.index);
	if (rc)
		fail_msg("kvt_buffer_create: %s", kvt_strerror(rc));
	s.p = addr;
	return s;
}

void blocks_for(struct kvt_block *b, uint64_t first_key, uint32_t n, uint32_t block)
{
	for (uint32_t i = 0; i < n; i++)
		b[i] = (struct kvt_block){.key = test_key(first_key + i),
					  .offset = (uint64_t)i * block, .length = block};
}

/* Stores keys [first, first+n) with content seeded by the key number. */
void store_range(struct kvt_client *c, struct staging *s, uint64_t first, uint32_t n,
			uint32_t block)
{
	struct kvt_block b[64];
	blocks_for(b, first, n, block);
	for (uint32_t i = 0; i < n; i++)
		test_fill(s->p + (uint64_t)i * block, block, first + i);
	assert_int_equal(kvt_store(c, s->index, b, n), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(b[i].status, 0);
}

uint32_t lookup_range(struct kvt_client *c, uint64_t first, uint32_t n, uint32_t lease_ms,
			     uint64_t *lease)
{
	struct kvt_key keys[64];
	uint8_t tiers[64];
	for (uint32_t i = 0; i < n; i++)
		keys[i] = test_key(first + i);
	struct kvt_lookup lk = {.keys = keys, .nkeys = n, .lease_ms = lease_ms, .tiers = tiers};
	assert_int_equal(kvt_lookup(c, &lk), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(tiers[i], i < lk.hits ? 1 : 0);
	if (lease)
		*lease = lk.lease_id;
	return lk.hits;
}


/* --- raw frames --- */

int raw_connect(struct daemon_fixture *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, d->socket);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

void raw_send(int fd, uint32_t magic, uint16_t op, const void *payload, uint32_t len,
	      uint32_t claimed_len)
{
	uint8_t hdr[KVT_HDR_BYTES];
	struct wire_hdr h = {.magic = magic, .op = op, .length = claimed_len, .id = 42};
	wire_hdr_encode(hdr, &h);
	assert_int_equal(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
	if (len)
		assert_int_equal(send(fd, payload, len, MSG_NOSIGNAL), (ssize_t)len);
}

int raw_reply(int fd, uint8_t *payload, uint32_t cap, uint32_t *len)
{
	uint8_t hdr[KVT_HDR_BYTES], skip[4096];
	size_t got = 0;
	while (got < sizeof(hdr)) {
		ssize_t n = recv(fd, hdr + got, sizeof(hdr) - got, 0);
		if (n <= 0)
			return 1; /* closed */
		got += (size_t)n;
	}
	struct wire_hdr h;
	wire_hdr_decode(hdr, &h);
	assert_int_equal(h.magic, KVT_PROTO_MAGIC);
	assert_int_equal(h.id, 42);
	if (len)
		*len = h.length;
	for (uint32_t at = 0; at < h.length;) {
		uint32_t left = h.length - at;
		uint8_t *into = at < cap ? payload + at : skip;
		size_t room = at < cap ? cap - at : sizeof(skip);
		ssize_t n = recv(fd, into, left < room ? left : room, 0);
		assert_true(n > 0);
		at += (uint32_t)n;
	}
	return h.status;
}

int raw_status(int fd)
{
	return raw_reply(fd, NULL, 0, NULL);
}

int raw_hello_as(int fd, const char *model, uint64_t session, uint64_t *session_out)
{
	uint8_t p[KVT_HELLO_BYTES + 256];
	uint16_t mlen = (uint16_t)strlen(model);
	struct wire_wr w = {p, sizeof(p), false};
	wire_put_u16(&w, KVT_PROTO_VERSION);
	wire_put_u8(&w, KVT_ROLE_WORKER);
	wire_put_u8(&w, 0);
	wire_put_u16(&w, 1);
	wire_put_u16(&w, 0);
	wire_put_u64(&w, 4096);
	wire_put_u64(&w, session);
	wire_put_u16(&w, mlen);
	wire_put_u16(&w, 0);
	wire_put_u32(&w, 0);
	memcpy(p + KVT_HELLO_BYTES, model, mlen);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_HELLO, p, KVT_HELLO_BYTES + mlen, KVT_HELLO_BYTES + mlen);
	uint8_t reply[KVT_HELLO_REPLY_BYTES];
	uint32_t len = 0;
	int status = raw_reply(fd, reply, sizeof(reply), &len);
	if (status == 0 && session_out) {
		assert_int_equal(len, KVT_HELLO_REPLY_BYTES);
		struct wire_rd r = {reply, len, false};
		*session_out = wire_u64(&r);
	}
	return status;
}

int raw_hello_status(int fd)
{
	return raw_hello_as(fd, "h", 0, NULL);
}

void raw_hello(int fd)
{
	assert_int_equal(raw_hello_status(fd), 0);
}

int raw_register_fd(int fd, int passed, uint64_t size, uint32_t kind, uint32_t *index)
{
	uint8_t frame[KVT_HDR_BYTES + KVT_REGISTER_BYTES];
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = KVT_OP_REGISTER,
			     .length = KVT_REGISTER_BYTES, .id = 42};
	wire_hdr_encode(frame, &h);
	struct wire_wr w = {frame + KVT_HDR_BYTES, KVT_REGISTER_BYTES, false};
	wire_put_u64(&w, size);
	wire_put_u32(&w, kind);
	wire_put_u32(&w, 0);
	assert_int_equal(fdpass_send(fd, frame, sizeof(frame), passed), (ssize_t)sizeof(frame));
	uint8_t body[8];
	uint32_t len = 0;
	int status = raw_reply(fd, body, sizeof(body), &len);
	if (status == 0) {
		assert_int_equal(len, sizeof(body));
		struct wire_rd r = {body, sizeof(body), false};
		*index = wire_u32(&r);
	}
	return status;
}

uint32_t raw_register(int fd, uint64_t size)
{
	int mfd = memfd_create("raw", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(mfd, (off_t)size), 0);
	uint32_t index = 0;
	assert_int_equal(raw_register_fd(fd, mfd, size, KVT_BUFFER_SHM, &index), 0);
	close(mfd);
	return index;
}
