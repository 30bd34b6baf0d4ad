/*
 * test_lru.c — the LRU eviction policy (lru.h) through the policy
 * interface (evict_policy.h), as L1 uses it: tracked nodes come out least
 * recently used first, a touch makes a node the last candidate, removed
 * nodes never come out, and the count follows.
 */
#include "config.h"

#include <stddef.h>

#include "lru.h"
#include "test_util.h"

#define N 5

/* The candidates of o in order, as indexes into nodes; how many. */
static unsigned candidates(const struct evict_order *o, struct evict_node *nodes, unsigned *out)
{
	unsigned n = 0;
	for (struct evict_node *c = o->ops->first(o); c && n <= N; c = o->ops->next(o, c))
		out[n++] = (unsigned)(c - nodes);
	return n;
}

static void expect(const struct evict_order *o, struct evict_node *nodes, const unsigned *want,
		   unsigned n)
{
	unsigned got[N + 1];
	assert_int_equal(candidates(o, nodes, got), n);
	assert_memory_equal(got, want, n * sizeof(*want));
	assert_int_equal(o->count, n);
}

static void test_least_recent_first(void **state)
{
	(void)state;
	struct evict_order o;
	struct evict_node nodes[N];
	evict_order_init(&o, &lru_policy);
	assert_null(o.ops->first(&o));
	for (unsigned i = 0; i < N; i++)
		o.ops->track(&o, &nodes[i]);
	expect(&o, nodes, (unsigned[]){0, 1, 2, 3, 4}, 5);
	o.ops->touch(&o, &nodes[0]);  /* used: the last candidate */
	expect(&o, nodes, (unsigned[]){1, 2, 3, 4, 0}, 5);
	o.ops->touch(&o, &nodes[0]);  /* already the most recent: nothing moves */
	expect(&o, nodes, (unsigned[]){1, 2, 3, 4, 0}, 5);
	o.ops->remove(&o, &nodes[3]); /* pinned: never a candidate */
	o.ops->remove(&o, &nodes[1]); /* the first candidate goes */
	expect(&o, nodes, (unsigned[]){2, 4, 0}, 3);
	o.ops->track(&o, &nodes[3]);  /* unpinned: the most recent */
	expect(&o, nodes, (unsigned[]){2, 4, 0, 3}, 4);
	o.ops->remove(&o, &nodes[3]); /* the last candidate goes */
	o.ops->remove(&o, &nodes[2]);
	o.ops->remove(&o, &nodes[4]);
	o.ops->remove(&o, &nodes[0]);
	assert_null(o.ops->first(&o));
	assert_int_equal(o.count, 0);
	assert_string_equal(o.ops->name, "lru");
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_least_recent_first)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
