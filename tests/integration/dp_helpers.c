/* dp_helpers.c — see dp_helpers.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_helpers.h"

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
		fprintf(stderr, "test failed: kvtierd log kept under %s\n", current->dir);
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

