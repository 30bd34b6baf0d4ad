/*
 * evict_policy.h — the order in which L1 evicts, behind one small interface
 * (CacheLib Navy's EvictionPolicy is the model): L1 tells a policy which
 * items may be evicted (track, remove) and which were used (touch), and
 * asks it for candidates, first to evict first (first, next). L1 keeps one
 * order of all its items and one per namespace (its quota's); whether an
 * item is dirty or being written behind is L1's, never the policy's.
 *
 * A policy's node is embedded in each item, its order in L1 and in each
 * namespace; their fields are the policy's. lru.c is the one policy.
 * Adding one: docs/development.md, "How to add an eviction policy".
 *
 * Owner: L1's owner thread (the event loop).
 */
#ifndef KVTD_EVICT_POLICY_H
#define KVTD_EVICT_POLICY_H

#include <stdint.h>
#include <sys/queue.h>

/* An item's place in one order (the policy's fields). */
struct evict_node {
	TAILQ_ENTRY(evict_node) link;
};

TAILQ_HEAD(evict_nodes, evict_node);

/* One order of evictable items (the policy's fields, but for ops). */
struct evict_order {
	const struct evict_policy_ops *ops;
	struct evict_nodes nodes;
	uint64_t count;
};

struct evict_policy_ops {
	const char *name;
	/* n may be evicted from now on (it was stored, or unpinned). */
	void (*track)(struct evict_order *o, struct evict_node *n);
	/* n was used (a load, a lookup hit). */
	void (*touch)(struct evict_order *o, struct evict_node *n);
	/* n may not be evicted (pinned) or is gone. */
	void (*remove)(struct evict_order *o, struct evict_node *n);
	/* The first candidate, and the one after n; NULL past the last. */
	struct evict_node *(*first)(const struct evict_order *o);
	struct evict_node *(*next)(const struct evict_order *o, const struct evict_node *n);
};

/* An empty order kept by ops. */
static inline void evict_order_init(struct evict_order *o, const struct evict_policy_ops *ops)
{
	*o = (struct evict_order){.ops = ops};
	TAILQ_INIT(&o->nodes);
}

#endif
