/* index.c — see index.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "index.h"
#include "prefault.h"

int index_init(struct index *ix, uint64_t initial_buckets)
{
	uint64_t n = 16;
	while (n < initial_buckets)
		n <<= 1;
	memset(ix, 0, sizeof(*ix));
	ix->buckets = calloc(n, sizeof(*ix->buckets));
	if (!ix->buckets)
		return -ENOMEM;
	/* Fault the pages in now, not one per insert on the event loop later.
	 * (A memset of zeros does not: the compiler turns malloc + memset into
	 * calloc, which leaves a fresh mapping untouched.) */
	prefault_touch(ix->buckets, n * sizeof(*ix->buckets));
	ix->mask = n - 1;
	if (getrandom(&ix->seed, sizeof(ix->seed), 0) != sizeof(ix->seed))
		ix->seed = (uint64_t)(uintptr_t)ix ^ UINT64_C(0x9e3779b97f4a7c15);
	return 0;
}

void index_destroy(struct index *ix)
{
	free(ix->buckets);
	memset(ix, 0, sizeof(*ix));
}

uint64_t index_hash(const struct index *ix, uint64_t ns_tag, const struct kvt_key *key)
{
	uint8_t buf[sizeof(ns_tag) + KVT_KEY_BYTES];
	memcpy(buf, &ns_tag, sizeof(ns_tag));
	memcpy(buf + sizeof(ns_tag), key->bytes, KVT_KEY_BYTES);
	return XXH3_64bits_withSeed(buf, sizeof(buf), ix->seed);
}

struct index_entry *index_find(const struct index *ix, uint64_t ns_tag,
			       const struct kvt_key *key, uint64_t hash)
{
	for (struct index_entry *e = ix->buckets[hash & ix->mask]; e; e = e->next)
		if (e->hash == hash && e->ns_tag == ns_tag &&
		    memcmp(e->key.bytes, key->bytes, KVT_KEY_BYTES) == 0)
			return e;
	return NULL;
}

static int index_grow(struct index *ix)
{
	uint64_t n = (ix->mask + 1) * 2;
	struct index_entry **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	for (uint64_t b = 0; b <= ix->mask; b++) {
		struct index_entry *e = ix->buckets[b];
		while (e) {
			struct index_entry *next = e->next;
			e->next = nb[e->hash & (n - 1)];
			nb[e->hash & (n - 1)] = e;
			e = next;
		}
	}
	free(ix->buckets);
	ix->buckets = nb;
	ix->mask = n - 1;
	return 0;
}

void index_insert(struct index *ix, struct index_entry *e)
{
	/* A failed growth is not fatal: chains only get longer. */
	if (ix->count + 1 > (ix->mask + 1) + (ix->mask + 1) / 2)
		(void)index_grow(ix);
	struct index_entry **head = &ix->buckets[e->hash & ix->mask];
	e->next = *head;
	*head = e;
	ix->count++;
}

void index_remove(struct index *ix, struct index_entry *e)
{
	struct index_entry **p = &ix->buckets[e->hash & ix->mask];
	while (*p && *p != e)
		p = &(*p)->next;
	if (*p) {
		*p = e->next;
		ix->count--;
	}
}
