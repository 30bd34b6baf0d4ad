/*
 * test_tiers.c — the tier stack (tiers.h) over L1 and memory tiers
 * (mem_tier.h): LOOKUP's chain across tiers in their order and the mode,
 * read-through from the first tier holding a part, write-through offers,
 * the mode's rules, registration limits, the stack's counters in each
 * tier's stats, and a stop that flushes then closes top down.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_tier.h"
#include "test_util.h"
#include "tiers.h"

#define BLOCK 4096u
#define MiB (1u << 20)

struct fixture {
	struct loop loop;
	struct l1 l1;
	struct ns_registry reg;
	struct kvt_ns *ns, *tp2;
	struct tiers stack;
	struct mem_tier m2, m3;    /* a victim tier (wire 2) and a write-through one (wire 3) */
	unsigned clock;
};

static struct fixture *fixture_new(void)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_int_equal(loop_init(&f->loop), 0);
	struct l1_config cfg = {.size = 8 * MiB, .region_size = MiB, .high_watermark = 1.0,
				.low_watermark = 0.99, .max_leases = 4, .max_lease_ms = 1000};
	assert_int_equal(l1_init(&f->l1, &cfg), 0);
	ns_registry_init(&f->reg);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, BLOCK, 1, &f->ns), 1);
	assert_int_equal(ns_get(&f->reg, "model-a", "tp2", BLOCK, 2, &f->tp2), 1);
	assert_int_equal(l1_ns_open(&f->l1, f->ns), 0);
	assert_int_equal(l1_ns_open(&f->l1, f->tp2), 0);
	tiers_init(&f->stack, &f->l1, &f->loop);
	mem_tier_init(&f->m2, "m2", KVT_TIER_L2, true, &f->clock);
	mem_tier_init(&f->m3, "m3", KVT_TIER_L3, false, &f->clock);
	assert_int_equal(tiers_add(&f->stack, &f->m2.tier), 0);
	assert_int_equal(tiers_add(&f->stack, &f->m3.tier), 0);
	return f;
}

static void fixture_free(struct fixture *f)
{
	tiers_close(&f->stack, 0);
	l1_destroy(&f->l1);
	ns_registry_destroy(&f->reg);
	loop_destroy(&f->loop);
	free(f);
}

#define TIERS_TEST(name)                                  \
	static void name##_body(struct fixture *f);        \
	static void name(void **state)                     \
	{                                                  \
		(void)state;                               \
		struct fixture *f = fixture_new();         \
		name##_body(f);                            \
		fixture_free(f);                           \
	}                                                  \
	static void name##_body(struct fixture *f)

static void l1_put(struct fixture *f, uint64_t n)
{
	struct l1_ref ref;
	struct kvt_key key = test_key(n);
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &key, 0, BLOCK, 0, &ref), 0);
	test_fill(ref.data, BLOCK, n);
	assert_true(l1_store_commit(&f->l1, &ref));
}

static void tier_put(struct mem_tier *m, const struct kvt_ns *ns, uint64_t n, uint16_t rank)
{
	uint8_t bytes[MEM_TIER_PART_BYTES];
	struct kvt_key key = test_key(n);
	test_fill(bytes, sizeof(bytes), n * 16 + rank);
	mem_tier_put(m, ns, &key, rank, bytes, sizeof(bytes));
}

static uint32_t lookup(struct fixture *f, const uint64_t *ids, uint32_t n, uint8_t *tiers)
{
	struct kvt_key keys[8];
	for (uint32_t i = 0; i < n; i++)
		keys[i] = test_key(ids[i]);
	uint32_t hits;
	uint64_t lease;
	assert_int_equal(tiers_lookup(&f->stack, f->ns, keys, n, tiers, 0, 0, &hits, &lease), 0);
	return hits;
}

static uint64_t counter(const struct mem_tier *m, const char *field)
{
	if (strcmp(field, "lookup_hits") == 0)
		return atomic_load(&m->tier.counters.lookup_hits);
	if (strcmp(field, "blocks_loaded") == 0)
		return atomic_load(&m->tier.counters.blocks_loaded);
	return atomic_load(&m->tier.counters.blocks_promoted);
}

/* A chain goes L1, then each lower tier in order; the victim tier only in evict mode. */
TIERS_TEST(test_lookup_chain_crosses_tiers)
{
	l1_put(f, 0);
	tier_put(&f->m3, f->ns, 1, 0);
	l1_put(f, 2);
	tier_put(&f->m2, f->ns, 3, 0);
	tier_put(&f->m3, f->ns, 3, 0);
	uint64_t chain[5] = {0, 1, 2, 3, 4};
	uint8_t tiers[5];
	assert_int_equal(lookup(f, chain, 5, tiers), 4);
	uint8_t l1_only[5] = {KVT_TIER_L1, KVT_TIER_L3, KVT_TIER_L1, KVT_TIER_L3, KVT_TIER_NONE};
	assert_memory_equal(tiers, l1_only, 5);
	assert_int_equal(counter(&f->m3, "lookup_hits"), 2);
	assert_int_equal(counter(&f->m2, "lookup_hits"), 0);

	assert_int_equal(tiers_set_evict(&f->stack, true), 0);
	assert_int_equal(lookup(f, chain, 5, tiers), 4);
	uint8_t evict[5] = {KVT_TIER_L1, KVT_TIER_L3, KVT_TIER_L1, KVT_TIER_L2, KVT_TIER_NONE};
	assert_memory_equal(tiers, evict, 5);
	assert_int_equal(counter(&f->m2, "lookup_hits"), 1);
	assert_int_equal(counter(&f->m3, "lookup_hits"), 3);
}

struct reader {
	struct tier_read rd;
	uint8_t buf[MEM_TIER_PART_BYTES];
	bool refuse;
	int status;
	uint32_t length;
	unsigned done;
};

static uint8_t *reader_target(struct tier_read *rd, uint32_t length)
{
	struct reader *r = (struct reader *)rd;
	return r->refuse || length > rd->cap ? NULL : r->buf;
}

static void reader_done(struct tier_read *rd, int status, uint32_t length)
{
	struct reader *r = (struct reader *)rd;
	r->status = status;
	r->length = length;
	r->done++;
}

static int read_part(struct fixture *f, uint64_t n, struct reader *r, unsigned *from)
{
	struct kvt_key key = test_key(n);
	r->rd = (struct tier_read){.cap = sizeof(r->buf), .target = reader_target,
				   .done = reader_done};
	*from = 0;
	return tiers_read_begin(&f->stack, from, f->ns, &key, 0, &r->rd);
}

/* A read goes to the first tier that reads through and holds the part: its bytes, once. */
TIERS_TEST(test_read_through_first_holder)
{
	tier_put(&f->m2, f->ns, 7, 0);
	tier_put(&f->m3, f->ns, 8, 0);
	struct reader r = {0};
	unsigned from;
	assert_int_equal(read_part(f, 8, &r, &from), 0);
	assert_int_equal(from, 1);
	assert_int_equal(r.done, 1);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.length, MEM_TIER_PART_BYTES);
	assert_true(test_check(r.buf, sizeof(r.buf), 8 * 16));
	/* l1-only: the victim tier is not read through, and no other holds 7. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(read_part(f, 7, &r, &from), -ENOENT);
	assert_int_equal(r.done, 0);
	assert_int_equal(tiers_set_evict(&f->stack, true), 0);
	assert_int_equal(read_part(f, 7, &r, &from), 0);
	assert_int_equal(from, 0);
	assert_true(test_check(r.buf, sizeof(r.buf), 7 * 16));
	/* A refused target ends the read as a miss, once. */
	memset(&r, 0, sizeof(r));
	r.refuse = true;
	assert_int_equal(read_part(f, 8, &r, &from), 0);
	assert_int_equal(r.done, 1);
	assert_int_equal(r.status, -ENOENT);
	/* Nowhere: -ENOENT, nothing runs. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(read_part(f, 9, &r, &from), -ENOENT);
	assert_int_equal(r.done, 0);
	/* A tier above another: the one below reads what the one above holds. */
	struct kvt_key key = test_key(7);
	memset(&r, 0, sizeof(r));
	r.rd = (struct tier_read){.cap = sizeof(r.buf), .target = reader_target,
				  .done = reader_done};
	assert_int_equal(tiers_read_above(&f->stack, &f->m3.tier, f->ns, &key, 0, &r.rd), 0);
	assert_int_equal(r.status, 0);
	assert_int_equal(tiers_read_above(&f->stack, &f->m2.tier, f->ns, &key, 0, &r.rd), -ENOENT);
}

/* A completed STORE is offered to every write-through tier, each part; never to the victim tier. */
TIERS_TEST(test_stored_offers_each_part)
{
	struct kvt_key key = test_key(11);
	tiers_stored(&f->stack, f->tp2, &key);
	assert_int_equal(f->m3.offered, 2);
	assert_int_equal(f->m2.offered, 0);
}

/* The mode moves only with a victim tier that serves; STOREs wait only in evict mode. */
TIERS_TEST(test_mode_needs_a_serving_victim_tier)
{
	f->m2.readable = false;
	assert_int_equal(tiers_set_evict(&f->stack, true), -EAGAIN);
	assert_false(f->stack.evict);
	assert_null(f->l1.lower.take_victim);
	f->m2.readable = true;
	assert_false(tiers_store_may_wait(&f->stack));
	assert_int_equal(tiers_set_evict(&f->stack, true), 0);
	assert_non_null(f->l1.lower.take_victim);
	assert_true(tiers_store_may_wait(&f->stack));
	assert_int_equal(tiers_set_evict(&f->stack, false), 0);
	assert_null(f->l1.lower.take_victim);
	assert_false(tiers_store_may_wait(&f->stack));
	assert_ptr_equal(tiers_victim_tier(&f->stack), &f->m2.tier);
	assert_ptr_equal(tiers_find(&f->stack, "m3"), &f->m3.tier);
	assert_null(tiers_find(&f->stack, "l2"));
}

/* One victim tier at most, and TIERS_MAX_LOWER tiers. */
TIERS_TEST(test_add_refuses)
{
	struct mem_tier extra[TIERS_MAX_LOWER];
	mem_tier_init(&extra[0], "v2", KVT_TIER_L2, true, &f->clock);
	assert_int_equal(tiers_add(&f->stack, &extra[0].tier), -EEXIST);
	unsigned room = TIERS_MAX_LOWER - f->stack.nlower;
	for (unsigned i = 0; i < room; i++) {
		mem_tier_init(&extra[i], "w", KVT_TIER_L3, false, &f->clock);
		assert_int_equal(tiers_add(&f->stack, &extra[i].tier), 0);
	}
	mem_tier_init(&extra[room], "w", KVT_TIER_L3, false, &f->clock);
	assert_int_equal(tiers_add(&f->stack, &extra[room].tier), -ENOSPC);
	f->stack.nlower -= room; /* the extras go with this frame, unclosed */
}

struct seen {
	char fields[8][32];
	char labels[8][48];
	uint64_t values[8];
	unsigned n;
};

static void see(void *ctx, const struct stat_def *def, uint64_t value)
{
	struct seen *s = ctx;
	snprintf(s->fields[s->n], sizeof(s->fields[0]), "%s", def->field);
	snprintf(s->labels[s->n], sizeof(s->labels[0]), "%s", def->labels);
	s->values[s->n++] = value;
}

/* A tier's stats: its own, then the stack's counters of it, labelled with its name. */
TIERS_TEST(test_stats_carry_the_stacks_counters)
{
	tier_put(&f->m3, f->ns, 1, 0);
	tiers_count_loaded(&f->stack, 1, true);
	tiers_count_loaded(&f->stack, 1, false);
	struct seen s = {0};
	tiers_stats_visit(&f->m3.tier, see, &s);
	assert_int_equal(s.n, 4);
	assert_string_equal(s.fields[0], "parts_held");
	assert_int_equal(s.values[0], 1);
	assert_string_equal(s.fields[1], "lookup_hits");
	assert_string_equal(s.labels[1], "tier=\"m3\",result=\"hit\"");
	assert_string_equal(s.fields[2], "blocks_loaded");
	assert_string_equal(s.labels[2], "tier=\"m3\"");
	assert_int_equal(s.values[2], 2);
	assert_string_equal(s.fields[3], "blocks_promoted");
	assert_int_equal(s.values[3], 1);
}

/* A stop flushes every tier, then closes them top down. */
static void test_close_flushes_then_closes_top_down(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	assert_int_equal(tiers_set_evict(&f->stack, true), 0);
	tiers_close(&f->stack, 0);
	assert_int_equal(f->m2.flushed, 1);
	assert_int_equal(f->m3.flushed, 2);
	assert_int_equal(f->m2.closed, 3);
	assert_int_equal(f->m3.closed, 4);
	assert_null(f->l1.lower.take_victim);
	assert_int_equal(f->stack.nlower, 0);
	tiers_init(&f->stack, &f->l1, &f->loop); /* fixture_free closes it again */
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_chain_crosses_tiers),
		cmocka_unit_test(test_read_through_first_holder),
		cmocka_unit_test(test_stored_offers_each_part),
		cmocka_unit_test(test_mode_needs_a_serving_victim_tier),
		cmocka_unit_test(test_add_refuses),
		cmocka_unit_test(test_stats_carry_the_stacks_counters),
		cmocka_unit_test(test_close_flushes_then_closes_top_down),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
