/*
 * dp_helpers.h — what the C integration tests share: a daemon per test that
 * the teardown stops even when the test failed, clients, staging buffers,
 * and stores and lookups of key ranges whose bytes derive from the key.
 */
#ifndef KVT_DP_HELPERS_H
#define KVT_DP_HELPERS_H

#include <stdint.h>

#include "daemon_fixture.h"
#include "kvtier/kvtier.h"
#include "test_util.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* The running test's daemon, stopped by teardown when the test failed. */
extern struct daemon_fixture *current;

void sleep_ms(long ms);
/* Starts kvtierd with flags (NULL-terminated) as the current daemon. */
struct daemon_fixture *start(const char *const *flags);
/* Stops the daemon and checks it exited 0 after SIGTERM. */
void stop(struct daemon_fixture *d);
int teardown(void **state);

struct kvt_client *client(struct daemon_fixture *d, const char *model, uint64_t block,
			  uint16_t tp, uint16_t rank, int scheduler, unsigned lanes);

/* A staging buffer made by libkvtier. */
struct staging {
	uint8_t *p;
	uint64_t size;
	uint32_t index;
};

struct staging staging(struct kvt_client *c, uint64_t size);
/* n blocks of keys first_key.., laid out one after another. */
void blocks_for(struct kvt_block *b, uint64_t first_key, uint32_t n, uint32_t block);
/* Stores keys [first, first+n) (n <= 64) with content seeded by the key number. */
void store_range(struct kvt_client *c, struct staging *s, uint64_t first, uint32_t n,
		 uint32_t block);
/* The leading hits of keys [first, first+n), asserting they are L1 hits. */
uint32_t lookup_range(struct kvt_client *c, uint64_t first, uint32_t n, uint32_t lease_ms,
		      uint64_t *lease);

/* Raw frames on a socket of the daemon's, for what libkvtier never sends. */
int raw_connect(struct daemon_fixture *d);
/* A frame header with id 42 claiming claimed_len bytes, then len bytes of payload. */
void raw_send(int fd, uint32_t magic, uint16_t op, const void *payload, uint32_t len,
	      uint32_t claimed_len);
/* Reads one reply: its status (1 when the daemon closed), up to cap payload bytes, its length. */
int raw_reply(int fd, uint8_t *payload, uint32_t cap, uint32_t *len);
/* Reads one reply and skips its payload; returns its status. */
int raw_status(int fd);
/* HELLO as a worker (4 KiB blocks, TP 1) of model, joining session (0: new); its status. */
int raw_hello_as(int fd, const char *model, uint64_t session, uint64_t *session_out);
/* HELLO of model "h"; its status. */
int raw_hello_status(int fd);
void raw_hello(int fd);
/* REGISTER of kind and size passing fd `passed` (-1: none); the status, *index on 0. */
int raw_register_fd(int fd, int passed, uint64_t size, uint32_t kind, uint32_t *index);
/* REGISTER of a new sealable memfd of size bytes, asserting success; its index. */
uint32_t raw_register(int fd, uint64_t size);

#endif
