/* lru.c — see lru.h. */
#include "config.h"

#include <stddef.h>

#include "lru.h"

static void track(struct evict_order *o, struct evict_node *n)
{
	TAILQ_INSERT_HEAD(&o->nodes, n, link);
	o->count++;
}

static void remove_node(struct evict_order *o, struct evict_node *n)
{
	TAILQ_REMOVE(&o->nodes, n, link);
	o->count--;
}

static void touch(struct evict_order *o, struct evict_node *n)
{
	if (TAILQ_FIRST(&o->nodes) == n)
		return;
	TAILQ_REMOVE(&o->nodes, n, link);
	TAILQ_INSERT_HEAD(&o->nodes, n, link);
}

static struct evict_node *first(const struct evict_order *o)
{
	return TAILQ_LAST(&o->nodes, evict_nodes);
}

static struct evict_node *next(const struct evict_order *o, const struct evict_node *n)
{
	(void)o;
	return TAILQ_PREV(n, evict_nodes, link);
}

const struct evict_policy_ops lru_policy = {
	.name = "lru", .track = track, .touch = touch, .remove = remove_node,
	.first = first, .next = next,
};
