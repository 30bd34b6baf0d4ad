/*
 * index.h — the item index: a chained hash table from (namespace id, key) to
 * an entry embedded in the caller's item. Owns the buckets only; entries
 * belong to the caller. The hash is XXH3-64 under a per-table random seed, so
 * clients that choose their own key bytes cannot aim collisions at a bucket.
 * Doubles when the load passes 1.5 entries per bucket. One owner thread.
 */
#ifndef KVTD_INDEX_H
#define KVTD_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvtier.h"

struct index_entry {
	struct index_entry *next;
	uint64_t hash;
	uint64_t ns_tag;           /* names the namespace for the engine: L1 its id, L2 its digest */
	struct kvt_key key;
};

struct index {
	struct index_entry **buckets;
	uint64_t mask;       /* buckets - 1 */
	uint64_t count;
	uint64_t seed;
};

int index_init(struct index *ix, uint64_t initial_buckets);
void index_destroy(struct index *ix);

/* The hash of (ns_tag, key), for index_find and an entry's hash field. */
uint64_t index_hash(const struct index *ix, uint64_t ns_tag, const struct kvt_key *key);

struct index_entry *index_find(const struct index *ix, uint64_t ns_tag,
			       const struct kvt_key *key, uint64_t hash);
/* Inserts e (hash, ns_tag and key set; not already present). */
void index_insert(struct index *ix, struct index_entry *e);
void index_remove(struct index *ix, struct index_entry *e);

#endif
