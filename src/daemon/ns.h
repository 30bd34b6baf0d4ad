/*
 * ns.h — the namespace registry: which (model id, cache salt) pairs exist,
 * with the block size per rank and the tensor-parallel size fixed by the
 * first client that named them. Owns nothing of the tiers; a tier keeps its
 * own per-namespace state in the fields marked below.
 */
#ifndef KVTD_NS_H
#define KVTD_NS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "evict_policy.h"

#define KVT_NS_MODEL_MAX 255
#define KVT_NS_SALT_MAX 255
#define KVT_NS_MAX 1024
#define KVT_TP_MAX 64

struct arena_class;
struct l1_item;

struct kvt_ns {
	uint32_t id;                /* this run's number, for the API */
	uint64_t digest;            /* XXH3-64 of model, salt, block and TP sizes: stable across runs (L2 keys) */
	uint16_t tp_size;
	uint64_t block_bytes;       /* bytes of one rank's part of a block */
	char model[KVT_NS_MODEL_MAX + 1];
	char salt[KVT_NS_SALT_MAX + 1];
	/* Byte quotas (0: none), set by the policy; L1 and L2 enforce them. */
	uint64_t l1_quota;
	uint64_t l2_quota;
	/* L1's per-namespace state (l1.c). */
	struct arena_class *l1_class;
	uint64_t l1_items;
	uint64_t l1_bytes;
	uint64_t l1_quota_evictions;
	struct evict_order l1_order;  /* its unpinned items, in L1's policy's order (l1_ns_open) */
	/* The data plane's (dataplane.c). */
	uint32_t dp_conns;          /* connections bound to it */
	uid_t creator_uid;          /* of the client that created it (its uid's namespace limit) */
};

struct ns_registry {
	struct kvt_ns *ns[KVT_NS_MAX];
	uint32_t count;
	uint32_t next_id;
};

void ns_registry_init(struct ns_registry *reg);
void ns_registry_destroy(struct ns_registry *reg);

/*
 * The namespace (model, salt), created when new. Returns 1 when created, 0
 * when it existed with the same block size and TP size, -KVT_ENSCONFLICT when
 * it exists with others, -EINVAL for empty or over-long names, a zero block
 * size or a TP size outside 1..KVT_TP_MAX, -ENOSPC past KVT_NS_MAX.
 */
int ns_get(struct ns_registry *reg, const char *model, const char *salt,
	   uint64_t block_bytes, uint16_t tp_size, struct kvt_ns **out);

/* The stable digest of a namespace's identity (kvt_ns.digest). */
uint64_t ns_digest(const char *model, const char *salt, uint64_t block_bytes,
		   uint16_t tp_size);

struct kvt_ns *ns_find_id(const struct ns_registry *reg, uint32_t id);
/* The namespace (model, salt) when it exists (salt NULL: ""), else NULL. */
struct kvt_ns *ns_find(const struct ns_registry *reg, const char *model, const char *salt);
/* Removes and frees ns; nothing may point at it any more. */
void ns_remove(struct ns_registry *reg, struct kvt_ns *ns);

#endif
