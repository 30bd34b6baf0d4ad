/* lru.c — see lru.h. */
#include "config.h"

#include <stddef.h>

#include "lru.h"

static void unlink_node(struct evict_order *o, struct evict_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		o->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		o->tail = n->prev;
	n->prev = n->next = NULL;
	o->count--;
}

static void track(struct evict_order *o, struct evict_node *n)
{
	*n = (struct evict_node){.next = o->head};
	if (o->head)
		o->head->prev = n;
	else
		o->tail = n;
	o->head = n;
	o->count++;
}

static void touch(struct evict_order *o, struct evict_node *n)
{
	if (o->head == n)
		return;
	unlink_node(o, n);
	track(o, n);
}

static struct evict_node *first(const struct evict_order *o)
{
	return o->tail;
}

static struct evict_node *next(const struct evict_order *o, const struct evict_node *n)
{
	(void)o;
	return n->prev;
}

const struct evict_policy_ops lru_policy = {
	.name = "lru", .track = track, .touch = touch, .remove = unlink_node,
	.first = first, .next = next,
};
