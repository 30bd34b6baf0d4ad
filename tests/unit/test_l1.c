/*
 * test_l1.c — the L1 engine: round trips, tensor-parallel parts, LRU order,
 * watermarks, pins, leases, prefix lookups, the lower-tier hooks, size-class
 * changes, write-behind (dirty and clean, the writer's order, waits), and a randomized fill far past capacity that checks every
 * invariant after each step.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "l1.h"
#include "test_util.h"

#define MiB (UINT64_C(1) << 20)
#define BLOCK (64 * 1024)

struct fixture {
	struct ns_registry reg;
	struct kvt_ns *ns;      /* TP 1, BLOCK bytes */
	struct kvt_ns *tp2;     /* TP 2, BLOCK bytes */
	struct kvt_ns *big;     /* TP 1, 1 MiB */
	struct l1 l1;
	const struct l1_below *below;  /* what lookups ask below L1; NULL: nothing */
	uint8_t buf[MiB];
};

static struct fixture *fixture_new(double high, double low)
{
	struct fixture *f = calloc(1, sizeof(*f));
	ns_registry_init(&f->reg);
	struct l1_config cfg = {
		.size = 8 * MiB, .region_size = MiB, .high_watermark = high,
		.low_watermark = low, .max_leases = 4, .max_lease_ms = 1000,
	};
	assert_int_equal(l1_init(&f->l1, &cfg), 0);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, BLOCK, 1, &f->ns), 1);
	assert_int_equal(ns_get(&f->reg, "model-a", "tenant-2", BLOCK, 2, &f->tp2), 1);
	assert_int_equal(ns_get(&f->reg, "model-big", NULL, MiB, 1, &f->big), 1);
	assert_int_equal(l1_ns_open(&f->l1, f->ns), 0);
	assert_int_equal(l1_ns_open(&f->l1, f->tp2), 0);
	assert_int_equal(l1_ns_open(&f->l1, f->big), 0);
	return f;
}

static void verify(struct fixture *f);

/* Checks the invariants one last time and frees all: a leak fails the test. */
static void fixture_free(struct fixture *f)
{
	verify(f);
	l1_destroy(&f->l1);
	ns_registry_destroy(&f->reg);
	free(f);
}

/*
 * A test body runs on a fresh fixture made and freed inside the cmocka test,
 * since cmocka counts blocks allocated by the test and freed by a teardown
 * as leaks. Watermarks 1.0/0.99: eviction only when no slot is left.
 */
#define L1_TEST_WM(name, high, low)                       \
	static void name##_body(struct fixture *f);        \
	static void name(void **state)                     \
	{                                                  \
		(void)state;                               \
		struct fixture *f = fixture_new(high, low); \
		name##_body(f);                            \
		fixture_free(f);                           \
	}                                                  \
	static void name##_body(struct fixture *f)
#define L1_TEST(name) L1_TEST_WM(name, 1.0, 0.99)

static void verify(struct fixture *f)
{
	const char *what = NULL;
	if (l1_verify(&f->l1, &what))
		fail_msg("invariant broken: %s", what);
}

static struct l1_stats_snapshot stats(struct fixture *f)
{
	struct l1_stats_snapshot s;
	l1_stats_read(&f->l1, &s);
	return s;
}

/* Stores rank's part of key n with content seeded by (n, rank). */
static int store(struct fixture *f, const struct kvt_ns *ns, uint64_t n, uint16_t rank,
		 uint32_t len)
{
	struct kvt_key k = test_key(n);
	struct l1_ref ref;
	int rc = l1_store_begin(&f->l1, ns, &k, rank, len, 0, &ref);
	if (rc)
		return rc;
	test_fill(ref.data, len, n * 64 + rank);
	l1_store_commit(&f->l1, &ref);
	return 0;
}

/* Loads rank's part of key n and checks every byte. */
static int load_check(struct fixture *f, const struct kvt_ns *ns, uint64_t n, uint16_t rank,
		      uint32_t len)
{
	struct kvt_key k = test_key(n);
	struct l1_ref ref;
	int rc = l1_load_begin(&f->l1, ns, &k, rank, &ref);
	if (rc)
		return rc;
	assert_int_equal(ref.length, len);
	memcpy(f->buf, ref.data, len);
	l1_load_end(&f->l1, &ref);
	assert_true(test_check(f->buf, len, n * 64 + rank));
	return 0;
}

static uint32_t lookup(struct fixture *f, const struct kvt_ns *ns, const uint64_t *ids,
		       uint32_t n, uint8_t *tiers)
{
	struct kvt_key keys[64];
	uint8_t t[64];
	uint32_t hits;
	uint64_t lease;
	for (uint32_t i = 0; i < n; i++)
		keys[i] = test_key(ids[i]);
	assert_int_equal(
		l1_lookup(&f->l1, ns, keys, n, tiers ? tiers : t, 0, 0, f->below, &hits, &lease), 0);
	assert_int_equal(lease, 0);
	return hits;
}

L1_TEST(test_round_trip)
{
	assert_int_equal(store(f, f->ns, 1, 0, BLOCK), 0);
	assert_int_equal(store(f, f->ns, 2, 0, 100), 0); /* shorter than a block */
	assert_int_equal(load_check(f, f->ns, 1, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 2, 0, 100), 0);
	assert_int_equal(load_check(f, f->ns, 3, 0, BLOCK), -ENOENT);
	/* The same key in another namespace is another item. */
	assert_int_equal(load_check(f, f->big, 1, 0, BLOCK), -ENOENT);
	struct l1_stats_snapshot s = stats(f);
	assert_int_equal(s.parts_stored, 2);
	assert_int_equal(s.bytes_stored, BLOCK + 100);
	assert_int_equal(s.loads, 2);
	assert_int_equal(s.bytes_loaded, BLOCK + 100);
	assert_int_equal(s.load_misses, 2);
	assert_int_equal(s.items, 2);
	assert_int_equal(s.used_bytes, 2 * BLOCK);
	assert_int_equal(f->ns->l1_items, 2);
	assert_int_equal(f->ns->l1_bytes, 2 * BLOCK);
	verify(f);
}

L1_TEST(test_store_errors)
{
	struct kvt_key k = test_key(5);
	struct l1_ref ref;
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 1, 10, 0, &ref), -EINVAL);
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 0, 0, 0, &ref), -ERANGE);
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 0, BLOCK + 1, 0, &ref), -ERANGE);
	assert_int_equal(l1_load_begin(&f->l1, f->ns, &k, 3, &ref), -EINVAL);
	assert_int_equal(store(f, f->ns, 5, 0, BLOCK), 0);
	/* A part stored twice is a no-op that reports -EEXIST. */
	assert_int_equal(store(f, f->ns, 5, 0, BLOCK), -EEXIST);
	assert_int_equal(stats(f).parts_duplicate, 1);
	assert_int_equal(stats(f).parts_stored, 1);
	/* So is a store of a part still being written. */
	k = test_key(6);
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 0, BLOCK, 0, &ref), 0);
	struct l1_ref ref2;
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 0, BLOCK, 0, &ref2), -EEXIST);
	/* A block being written is not present yet. */
	assert_int_equal(load_check(f, f->ns, 6, 0, BLOCK), -ENOENT);
	l1_store_abort(&f->l1, &ref);
	assert_int_equal(stats(f).items, 1); /* the aborted item is gone */
	assert_int_equal(stats(f).store_failures, 1);
	verify(f);
}

L1_TEST(test_tensor_parallel_parts)
{
	uint64_t id = 9;
	uint8_t tiers[1];
	assert_int_equal(store(f, f->tp2, id, 1, BLOCK), 0);
	/* One rank of two: not present for lookup or load. */
	assert_int_equal(lookup(f, f->tp2, &id, 1, tiers), 0);
	assert_int_equal(tiers[0], KVT_TIER_NONE);
	assert_int_equal(load_check(f, f->tp2, id, 1, BLOCK), -ENOENT);
	assert_int_equal(stats(f).complete_items, 0);
	assert_int_equal(store(f, f->tp2, id, 0, BLOCK - 7), 0);
	assert_int_equal(lookup(f, f->tp2, &id, 1, tiers), 1);
	assert_int_equal(tiers[0], KVT_TIER_L1);
	/* Each rank gets its own part back. */
	assert_int_equal(load_check(f, f->tp2, id, 0, BLOCK - 7), 0);
	assert_int_equal(load_check(f, f->tp2, id, 1, BLOCK), 0);
	struct l1_stats_snapshot s = stats(f);
	assert_int_equal(s.items, 1);
	assert_int_equal(s.complete_items, 1);
	assert_int_equal(s.used_bytes, 2 * BLOCK);
	verify(f);
}

L1_TEST(test_prefix_lookup)
{
	for (uint64_t i = 1; i <= 5; i++)
		if (i != 4)
			assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	uint64_t chain[5] = {1, 2, 3, 4, 5};
	uint8_t tiers[5];
	assert_int_equal(lookup(f, f->ns, chain, 5, tiers), 3);
	uint8_t want[5] = {KVT_TIER_L1, KVT_TIER_L1, KVT_TIER_L1, KVT_TIER_NONE, KVT_TIER_NONE};
	assert_memory_equal(tiers, want, 5);
	uint64_t miss_first[2] = {7, 1};
	assert_int_equal(lookup(f, f->ns, miss_first, 2, tiers), 0);
	assert_int_equal(lookup(f, f->ns, chain, 0, tiers), 0);
	struct l1_stats_snapshot s = stats(f);
	assert_int_equal(s.lookups, 3);
	assert_int_equal(s.lookup_hits, 3);
	assert_int_equal(s.lookup_misses, 2);
}

L1_TEST(test_lru_order)
{
	/* 8 MiB of 64 KiB blocks: 128 slots. */
	for (uint64_t i = 0; i < 128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_capacity, 0);
	/* Use 0..9 again: they become the most recent. */
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(load_check(f, f->ns, i, 0, BLOCK), 0);
	for (uint64_t i = 128; i < 138; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	/* The ten least recently used (10..19) went, in order. */
	for (uint64_t i = 0; i < 138; i++)
		assert_int_equal(load_check(f, f->ns, i, 0, BLOCK),
				 i >= 10 && i < 20 ? -ENOENT : 0);
	assert_int_equal(stats(f).evictions_capacity, 10);
	assert_int_equal(stats(f).used_bytes, 8 * MiB);
	verify(f);
}

L1_TEST_WM(test_watermarks, 0.5, 0.25)
{
	/* high 0.5 (4 MiB = 64 blocks), low 0.25 (2 MiB = 32 blocks). */
	for (uint64_t i = 0; i < 64; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_watermark, 0);
	/* The 65th would pass high: evict until it fits under low. */
	assert_int_equal(store(f, f->ns, 64, 0, BLOCK), 0);
	struct l1_stats_snapshot s = stats(f);
	assert_int_equal(s.evictions_watermark, 33);
	assert_int_equal(s.used_bytes, 32 * BLOCK);
	assert_int_equal(s.evicted_bytes, 33 * BLOCK);
	for (uint64_t i = 0; i < 33; i++)
		assert_int_equal(load_check(f, f->ns, i, 0, BLOCK), -ENOENT);
	assert_int_equal(load_check(f, f->ns, 33, 0, BLOCK), 0);
	/* Bad watermarks are refused; tighter ones apply at once. */
	assert_int_equal(l1_set_watermarks(&f->l1, 0.5, 0.5), -EINVAL);
	assert_int_equal(l1_set_watermarks(&f->l1, 1.5, 0.5), -EINVAL);
	assert_int_equal(l1_set_watermarks(&f->l1, 0.5, 0.0), -EINVAL);
	assert_int_equal(l1_set_watermarks(&f->l1, 0.125, 0.0625), 0);
	assert_int_equal(stats(f).used_bytes, 8 * BLOCK);
	assert_int_equal(stats(f).evictions_watermark, 33 + 24);
	verify(f);
}

L1_TEST(test_admin_evict)
{
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(l1_evict(&f->l1, 3 * BLOCK, L1_EVICT_ADMIN), 3 * BLOCK);
	assert_int_equal(load_check(f, f->ns, 2, 0, BLOCK), -ENOENT);
	assert_int_equal(load_check(f, f->ns, 3, 0, BLOCK), 0);
	assert_int_equal(l1_evict(&f->l1, UINT64_MAX, L1_EVICT_ADMIN), 7 * BLOCK);
	assert_int_equal(stats(f).evictions_admin, 10);
	assert_int_equal(stats(f).items, 0);
	assert_string_equal(l1_evict_reason_name(L1_EVICT_ADMIN), "admin");
}

/* A namespace past its quota evicts its own least-recent blocks; others keep theirs. */
struct lower_fake {
	uint64_t victims;
	uint64_t bytes_ok;
	uint64_t contains_key;
};

static bool fake_contains(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	struct lower_fake *lf = ctx;
	(void)ns;
	struct kvt_key k = test_key(lf->contains_key);
	return memcmp(k.bytes, key->bytes, KVT_KEY_BYTES) == 0;
}

/* Below L1: the fake holds contains_key (as tier 2). */
static uint8_t fake_held(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	return fake_contains(ctx, ns, key) ? KVT_TIER_L2 : KVT_TIER_NONE;
}

static bool fake_take(void *ctx, const struct l1_victim *v)
{
	struct lower_fake *lf = ctx;
	lf->victims++;
	/* Victims here are keys 0.. in order; check the bytes are the block's own. */
	uint64_t n = lf->victims - 1;
	struct kvt_key k = test_key(n);
	if (memcmp(k.bytes, v->key->bytes, KVT_KEY_BYTES) == 0 && v->nparts == 1 &&
	    v->lengths[0] == BLOCK && test_check(v->parts[0], BLOCK, n * 64) &&
	    v->reason == L1_EVICT_CAPACITY)
		lf->bytes_ok++;
	return false;
}

L1_TEST(test_lower_tier_hooks)
{
	struct lower_fake lf = {.contains_key = 500};
	struct l1_lower_tier lower = {.ctx = &lf, .contains = fake_contains, .take_victim = fake_take};
	l1_set_lower_tier(&f->l1, &lower);
	for (uint64_t i = 0; i < 128 + 5; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(lf.victims, 5);
	assert_int_equal(lf.bytes_ok, 5);
	assert_int_equal(stats(f).victims_to_lower, 5);
	/* A chain through what is below: L1, L2, L1 again, then a miss. */
	struct l1_below below = {.held = fake_held, .ctx = &lf};
	f->below = &below;
	uint64_t chain[4] = {100, 500, 101, 501};
	uint8_t tiers[4];
	uint64_t hits = stats(f).lookup_hits, misses = stats(f).lookup_misses;
	assert_int_equal(lookup(f, f->ns, chain, 4, tiers), 3);
	assert_int_equal(tiers[0], KVT_TIER_L1);
	assert_int_equal(tiers[1], KVT_TIER_L2);
	assert_int_equal(tiers[2], KVT_TIER_L1);
	assert_int_equal(tiers[3], KVT_TIER_NONE);
	assert_int_equal(stats(f).lookup_hits, hits + 2); /* L1's own */
	assert_int_equal(stats(f).lookup_misses, misses + 1);
	f->below = NULL;
	/* Incomplete items are never handed down. */
	l1_evict(&f->l1, UINT64_MAX, L1_EVICT_ADMIN);
	uint64_t before = lf.victims;
	assert_int_equal(store(f, f->tp2, 1, 0, BLOCK), 0);
	l1_evict(&f->l1, UINT64_MAX, L1_EVICT_ADMIN);
	assert_int_equal(lf.victims, before);
	l1_set_lower_tier(&f->l1, NULL);
}

static bool fake_no_room(void *ctx)
{
	(void)ctx;
	return false;
}

static bool fake_count(void *ctx, const struct l1_victim *v)
{
	(void)v;
	((struct lower_fake *)ctx)->victims++;
	return false;
}

L1_TEST(test_namespace_quota)
{
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(store(f, f->big, 100 + i, 0, BLOCK), 0);
	assert_int_equal(l1_ns_set_quota(&f->l1, f->ns, BLOCK - 1), -ERANGE);
	assert_int_equal(l1_ns_set_quota(&f->l1, f->ns, 4 * BLOCK), 0);
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0); /* 0 is now the most recent */
	assert_int_equal(store(f, f->ns, 4, 0, BLOCK), 0);
	assert_int_equal(store(f, f->ns, 5, 0, BLOCK), 0);
	assert_int_equal(f->ns->l1_bytes, 4 * BLOCK);
	assert_int_equal(f->ns->l1_quota_evictions, 2);
	assert_int_equal(stats(f).evictions_quota, 2);
	assert_int_equal(load_check(f, f->ns, 1, 0, BLOCK), -ENOENT); /* least recent first */
	assert_int_equal(load_check(f, f->ns, 2, 0, BLOCK), -ENOENT);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 5, 0, BLOCK), 0);
	for (uint64_t i = 0; i < 4; i++) /* the other namespace lost nothing */
		assert_int_equal(load_check(f, f->big, 100 + i, 0, BLOCK), 0);
	/* Lowering the quota evicts at once. */
	assert_int_equal(l1_ns_set_quota(&f->l1, f->ns, 2 * BLOCK), 0);
	assert_int_equal(f->ns->l1_bytes, 2 * BLOCK);
	assert_int_equal(f->ns->l1_items, 2);
	/* At the quota with everything pinned: the store fails, nothing moves. */
	struct kvt_key k0 = test_key(0), k5 = test_key(5);
	struct l1_ref p0, p5;
	assert_int_equal(l1_load_begin(&f->l1, f->ns, &k0, 0, &p0), 0);
	assert_int_equal(l1_load_begin(&f->l1, f->ns, &k5, 0, &p5), 0);
	assert_int_equal(store(f, f->ns, 6, 0, BLOCK), -KVT_EQUOTA);
	assert_int_equal(f->ns->l1_items, 2);
	l1_load_end(&f->l1, &p0);
	l1_load_end(&f->l1, &p5);
	verify(f);
	/* Quota 0 lifts it. */
	assert_int_equal(l1_ns_set_quota(&f->l1, f->ns, 0), 0);
	for (uint64_t i = 10; i < 20; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(f->ns->l1_items, 12);
	/* A drop offers nothing to the lower tier. */
	struct lower_fake lf = {0};
	struct l1_lower_tier lower = {.ctx = &lf, .take_victim = fake_count};
	l1_set_lower_tier(&f->l1, &lower);
	uint64_t pinned;
	assert_int_equal(l1_ns_drop(&f->l1, f->ns, &pinned), 12 * BLOCK);
	assert_int_equal(pinned, 0);
	assert_int_equal(lf.victims, 0);
	l1_set_lower_tier(&f->l1, NULL);
	assert_int_equal(f->ns->l1_items, 0);
	assert_int_equal(f->ns->l1_order.count, 0);
	assert_int_equal(f->big->l1_items, 4);
	assert_string_equal(l1_evict_reason_name(L1_EVICT_QUOTA), "quota");
}

L1_TEST(test_pins_block_eviction)
{
	for (uint64_t i = 0; i < 128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	/* Pin the least recently used block as a copy in progress would. */
	struct kvt_key k0 = test_key(0);
	struct l1_ref pin;
	assert_int_equal(l1_load_begin(&f->l1, f->ns, &k0, 0, &pin), 0);
	assert_int_equal(stats(f).pinned_items, 1);
	for (uint64_t i = 128; i < 128 + 127; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	/* Everything else turned over; the pinned block is intact. */
	assert_true(test_check(pin.data, BLOCK, 0));
	verify(f);
	l1_load_end(&f->l1, &pin);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0);

	/* With every slot pinned, a store says so and changes nothing. */
	struct l1_ref pins[128];
	uint32_t npins = 0;
	for (uint64_t i = 0; i < 128 + 127; i++) {
		struct kvt_key k = test_key(i);
		if (l1_load_begin(&f->l1, f->ns, &k, 0, &pins[npins]) == 0)
			npins++;
	}
	assert_int_equal(npins, 128);
	uint64_t failures = stats(f).store_failures;
	assert_int_equal(store(f, f->ns, 999, 0, BLOCK), -KVT_EALLPINNED);
	assert_int_equal(stats(f).store_failures, failures + 1);
	assert_int_equal(stats(f).items, 128);
	verify(f);
	for (uint32_t i = 0; i < npins; i++)
		l1_load_end(&f->l1, &pins[i]);
	assert_int_equal(stats(f).pinned_items, 0);
}

L1_TEST(test_leases)
{
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	struct kvt_key keys[4] = {test_key(0), test_key(1), test_key(2), test_key(3)};
	uint8_t tiers[4];
	uint32_t hits;
	uint64_t lease;
	/* Lease the first two (5 ms from t=100). */
	assert_int_equal(l1_lookup(&f->l1, f->ns, keys, 2, tiers, 5, 100, NULL, &hits, &lease), 0);
	assert_int_equal(hits, 2);
	assert_int_not_equal(lease, 0);
	assert_int_equal(stats(f).leases_active, 1);
	assert_int_equal(stats(f).pinned_items, 2);
	assert_int_equal(l1_lease_next_expiry(&f->l1), 105);
	/* Pressure turns over everything but the leased blocks. */
	for (uint64_t i = 100; i < 300; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 1, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 2, 0, BLOCK), -ENOENT);
	/* Not expired before its time; gone at it. */
	assert_int_equal(l1_lease_expire(&f->l1, 104), 0);
	assert_int_equal(l1_lease_expire(&f->l1, 105), 1);
	assert_int_equal(stats(f).leases_active, 0);
	assert_int_equal(stats(f).leases_expired, 1);
	assert_int_equal(stats(f).pinned_items, 0);
	assert_int_equal(l1_lease_release(&f->l1, lease), -ENOENT);
	assert_int_equal(l1_lease_next_expiry(&f->l1), UINT64_MAX);
	verify(f);
	/* Unleased now, so pressure can take them. */
	for (uint64_t i = 300; i < 430; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), -ENOENT);
}

L1_TEST(test_lease_release_cap_and_limit)
{
	assert_int_equal(store(f, f->ns, 1, 0, BLOCK), 0);
	struct kvt_key k = test_key(1), missing = test_key(2);
	uint8_t tiers[1];
	uint32_t hits;
	uint64_t ids[4];
	/* Capped at max_lease_ms (1000). */
	assert_int_equal(l1_lookup(&f->l1, f->ns, &k, 1, tiers, 60000, 0, NULL, &hits, &ids[0]), 0);
	assert_int_equal(l1_lease_next_expiry(&f->l1), 1000);
	for (int i = 1; i < 4; i++)
		assert_int_equal(l1_lookup(&f->l1, f->ns, &k, 1, tiers, 10, 0, NULL, &hits, &ids[i]), 0);
	/* The table holds four: the fifth is refused, the lookup still answered. */
	uint64_t extra = 77;
	assert_int_equal(l1_lookup(&f->l1, f->ns, &k, 1, tiers, 10, 0, NULL, &hits, &extra), -ENOSPC);
	assert_int_equal(hits, 1);
	/* A miss leases nothing. */
	uint64_t none = 77;
	assert_int_equal(l1_lookup(&f->l1, f->ns, &missing, 1, tiers, 10, 0, NULL, &hits, &none), 0);
	assert_int_equal(none, 0);
	/* Sorted by expiry: the 10 ms ones go first. */
	assert_int_equal(l1_lease_next_expiry(&f->l1), 10);
	assert_int_equal(l1_lease_release(&f->l1, ids[2]), 0);
	assert_int_equal(l1_lease_release(&f->l1, ids[2]), -ENOENT);
	assert_int_equal(l1_lease_release(&f->l1, 0), -ENOENT);
	assert_int_equal(l1_lease_release(&f->l1, ids[2] + (UINT64_C(1) << 32)), -ENOENT);
	assert_int_equal(l1_lease_expire(&f->l1, 10), 2);
	assert_int_equal(stats(f).leases_released, 1);
	/* A freed entry is reused under a new id: the old id stays dead. */
	uint64_t again;
	assert_int_equal(l1_lookup(&f->l1, f->ns, &k, 1, tiers, 10, 0, NULL, &hits, &again), 0);
	assert_int_not_equal(again, ids[1]);
	assert_int_not_equal(again, ids[2]);
	assert_int_not_equal(again, ids[3]);
	assert_int_equal(l1_lease_release(&f->l1, ids[1]), -ENOENT);
	assert_int_equal(stats(f).leases_active, 2);
	/* l1_destroy (teardown) releases what is left without leaking. */
}

/* 8 MiB of 64 KiB slots: 128; watermarks 0.5/0.25 are 64 and 32 slots. */
L1_TEST_WM(test_watermark_waits_for_lower_tier, 0.5, 0.25)
{
	struct lower_fake lf = {0};
	struct l1_lower_tier lower = {.ctx = &lf, .take_victim = fake_count,
				      .has_room = fake_no_room};
	l1_set_lower_tier(&f->l1, &lower);
	/* Past the high watermark, a busy lower tier holds watermark eviction back... */
	for (uint64_t i = 0; i < 128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_watermark, 0);
	assert_int_equal(lf.victims, 0);
	/* ...but a store that needs a slot still gets one. */
	assert_int_equal(store(f, f->ns, 128, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_capacity, 1);
	assert_int_equal(lf.victims, 1);
	/* With room again, watermark eviction brings usage down to the low mark. */
	lower.has_room = NULL;
	l1_set_lower_tier(&f->l1, &lower);
	assert_int_equal(store(f, f->ns, 129, 0, BLOCK), 0);
	assert_int_equal(stats(f).items, 32);
	l1_set_lower_tier(&f->l1, NULL);
}

/* A lower tier that remembers what it was handed (keys by number) and has room for `room` more. */
struct behind_fake {
	bool held[256];
	uint64_t handed, evicting, room;
	uint64_t order[256];
	bool refuse;
	bool not_durable;       /* handed items are not on disk yet */
	bool keep;              /* it writes from the slots after the call (l1_write_released) */
	struct l1_item *kept[256];
};

static uint64_t key_number(const struct kvt_key *key)
{
	for (uint64_t n = 0; n < 256; n++) {
		struct kvt_key k = test_key(n);
		if (memcmp(k.bytes, key->bytes, KVT_KEY_BYTES) == 0)
			return n;
	}
	fail_msg("an unknown key");
	return 0;
}

static bool behind_contains(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	(void)ns;
	return ((struct behind_fake *)ctx)->held[key_number(key)];
}

static bool behind_take(void *ctx, const struct l1_victim *v)
{
	struct behind_fake *bf = ctx;
	uint64_t n = key_number(v->key);
	if (v->evicting) {
		bf->evicting++;
		return false;
	}
	assert_true(test_check(v->parts[0], v->lengths[0], n * 64)); /* the item's own bytes */
	bf->order[bf->handed++] = n;
	bf->room--;
	bf->held[n] = !bf->refuse;
	if (bf->keep && !bf->refuse)
		bf->kept[n] = v->item;
	return bf->keep && !bf->refuse;
}

static bool behind_room(void *ctx)
{
	return ((struct behind_fake *)ctx)->room > 0;
}

static bool behind_durable(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	struct behind_fake *bf = ctx;
	return behind_contains(ctx, ns, key) && !bf->not_durable;
}

static int store_waiting(struct fixture *f, uint64_t n)
{
	struct kvt_key k = test_key(n);
	struct l1_ref ref;
	int rc = l1_store_begin(&f->l1, f->ns, &k, 0, BLOCK, L1_STORE_WAIT_DIRTY, &ref);
	if (rc)
		return rc;
	test_fill(ref.data, BLOCK, n * 64);
	l1_store_commit(&f->l1, &ref);
	return 0;
}

/* Dirty and clean: the writer's order, clean victims, waits instead of dirty evictions. */
L1_TEST(test_write_behind)
{
	struct behind_fake bf = {.room = 2};
	struct l1_lower_tier lower = {&bf, behind_contains, behind_take, behind_room,
				      behind_durable};
	l1_set_lower_tier(&f->l1, &lower);
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(stats(f).dirty_items, 4);
	assert_int_equal(stats(f).dirty_bytes, 4 * BLOCK);
	/* LRU end first, as long as the lower tier has room; the items stay. */
	assert_int_equal(l1_write_behind(&f->l1, 10), 2);
	assert_int_equal(bf.order[0], 0);
	assert_int_equal(bf.order[1], 1);
	assert_int_equal(stats(f).dirty_items, 2);
	assert_int_equal(stats(f).written_behind, 2);
	assert_int_equal(stats(f).written_behind_bytes, 2 * BLOCK);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0);
	verify(f);
	/* A touch moves a dirty item away from the end: 3 is written before 2. */
	assert_int_equal(load_check(f, f->ns, 2, 0, BLOCK), 0);
	bf.room = 1;
	assert_int_equal(l1_write_behind(&f->l1, 10), 1);
	assert_int_equal(bf.order[2], 3);
	/* A full L1 whose LRU end is clean: the store evicts it without I/O. */
	for (uint64_t i = 4; i < 128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	bf.room = 0;
	assert_int_equal(store_waiting(f, 128), 0);  /* LRU end: 1, clean */
	assert_int_equal(stats(f).evictions_clean, 1);
	assert_int_equal(load_check(f, f->ns, 1, 0, BLOCK), -ENOENT);
	assert_int_equal(store_waiting(f, 129), 0);  /* then 3 (0 and 2 were touched) */
	assert_int_equal(stats(f).evictions_clean, 2);
	/* Now the LRU end (0) is clean and then 4 is dirty: the second store waits. */
	assert_int_equal(store_waiting(f, 130), 0);
	uint64_t items = stats(f).items;
	assert_int_equal(store_waiting(f, 131), -EAGAIN);
	assert_int_equal(stats(f).store_waits, 1);
	assert_int_equal(stats(f).items, items);     /* nothing evicted, nothing lost */
	assert_int_equal(load_check(f, f->ns, 4, 0, BLOCK), 0);
	verify(f);
	/* Once the writer cleaned the end, it goes through. */
	bf.room = 1;
	assert_int_equal(l1_write_behind(&f->l1, 3), 1);
	assert_int_equal(store_waiting(f, 131), 0);
	assert_int_equal(stats(f).evictions_dirty, 0);
	/* Without the flag, a dirty end is evicted (handed down as a victim). */
	bf.room = 0;
	uint64_t before = bf.evicting;
	assert_int_equal(store(f, f->ns, 132, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_dirty, 1);
	assert_int_equal(bf.evicting, before + 1);
	/* A refused item is not retried, and is no reason to wait. */
	bf.room = 1;
	bf.refuse = true;
	assert_int_equal(l1_write_behind(&f->l1, 1), 1);
	assert_int_equal(stats(f).unwritable_items, 1);
	uint64_t refused = bf.order[bf.handed - 1];
	assert_int_equal(refused, 6);                /* the LRU end now */
	bf.room = 0;
	assert_int_equal(store_waiting(f, 133), 0);
	assert_int_equal(load_check(f, f->ns, refused, 0, BLOCK), -ENOENT); /* went, no wait */
	verify(f);
	l1_set_lower_tier(&f->l1, NULL);
}

/* Handed down is not yet clean: dirty until durable; lost before that, written again. */
L1_TEST(test_dirty_until_durable)
{
	struct behind_fake bf = {.room = 10, .not_durable = true};
	struct l1_lower_tier lower = {&bf, behind_contains, behind_take, behind_room,
				      behind_durable};
	l1_set_lower_tier(&f->l1, &lower);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(l1_write_behind(&f->l1, 10), 3);
	assert_int_equal(stats(f).dirty_items, 3);       /* handed, not on disk */
	assert_int_equal(l1_write_behind(&f->l1, 10), 0);  /* and not handed twice */
	verify(f);
	bf.held[1] = false;                                 /* the lower tier lost key 1 */
	bf.not_durable = false;
	assert_int_equal(l1_write_behind(&f->l1, 10), 1);  /* key 1 again; 0 and 2 clean */
	assert_int_equal(bf.order[3], 1);
	assert_int_equal(stats(f).dirty_items, 0);
	verify(f);
	l1_set_lower_tier(&f->l1, NULL);
}

/* Hands back the slots of key n the lower tier kept, as its write completion does. */
static void release(struct fixture *f, struct behind_fake *bf, uint64_t n)
{
	assert_non_null(bf->kept[n]);
	l1_write_released(&f->l1, bf->kept[n]);
	bf->kept[n] = NULL;
}

/*
 * A lower tier writing from the slots: the items keep their LRU place and
 * serve loads, are never evicted until released, and a store that would
 * evict past them waits; the writer pins at most a quarter of L1.
 */
L1_TEST(test_write_from_slots)
{
	struct behind_fake bf = {.room = 2, .keep = true, .not_durable = true};
	struct l1_lower_tier lower = {&bf, behind_contains, behind_take, behind_room,
				      behind_durable};
	l1_set_lower_tier(&f->l1, &lower);
	for (uint64_t i = 0; i < 128; i++) /* L1 is full */
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(l1_write_behind(&f->l1, 10), 2);  /* 0 and 1, being written */
	assert_int_equal(stats(f).dirty_items, 128);
	verify(f);
	/* The LRU end is written from: a waiting store waits, nothing is evicted. */
	assert_int_equal(store_waiting(f, 128), -EAGAIN);
	assert_int_equal(stats(f).store_waits, 1);
	assert_int_equal(stats(f).items, 128);
	/* One that may not wait evicts past them: 2, the oldest it may free (dirty). */
	assert_int_equal(store(f, f->ns, 128, 0, BLOCK), 0);
	assert_int_equal(stats(f).evictions_dirty, 1);
	assert_int_equal(load_check(f, f->ns, 2, 0, BLOCK), -ENOENT);
	assert_int_equal(load_check(f, f->ns, 0, 0, BLOCK), 0);  /* loads go on meanwhile */
	/* Nor does an operator's eviction (3 and 4 go), or a namespace drop, take them. */
	bf.room = 5;
	assert_int_equal(l1_evict(&f->l1, 2 * BLOCK, L1_EVICT_ADMIN), 2 * BLOCK);
	assert_int_equal(load_check(f, f->ns, 4, 0, BLOCK), -ENOENT);
	assert_int_equal(load_check(f, f->ns, 1, 0, BLOCK), 0);
	verify(f);
	/* Released: durable is clean; lost is dirty again and handed again. */
	bf.not_durable = false;
	release(f, &bf, 0);
	bf.held[1] = false;
	release(f, &bf, 1);
	assert_int_equal(stats(f).dirty_items, 129 - 3 - 1); /* 128 went in; 2, 3, 4 and 0 left */
	verify(f);
	bf.room = 1;
	assert_int_equal(l1_write_behind(&f->l1, 10), 1);
	assert_int_equal(bf.order[bf.handed - 1], 5);  /* the dirty LRU end: 2..4 went, 1 was used */
	release(f, &bf, 5);
	/* The writer stops at a quarter of L1 pinned by writes from slots. */
	bf.room = 1000;
	assert_int_equal(l1_write_behind(&f->l1, 1000), 32);
	assert_int_equal(l1_write_behind(&f->l1, 1000), 0);
	verify(f);
	uint64_t pinned;
	l1_ns_drop(&f->l1, f->ns, &pinned);
	assert_int_equal(pinned, 32);                  /* the drop leaves what is written from */
	for (uint64_t n = 0; n < 256; n++)
		if (bf.kept[n])
			release(f, &bf, n);
	l1_ns_drop(&f->l1, f->ns, &pinned);
	assert_int_equal(pinned, 0);
	verify(f);
	l1_set_lower_tier(&f->l1, NULL);
}

/* A promotion commits clean: the lower tier's own bytes. */
L1_TEST(test_promotion_is_clean)
{
	struct behind_fake bf = {.room = 0};
	struct l1_lower_tier lower = {&bf, behind_contains, behind_take, behind_room,
				      behind_durable};
	l1_set_lower_tier(&f->l1, &lower);
	struct kvt_key k = test_key(7);
	struct l1_ref ref;
	assert_int_equal(l1_store_begin(&f->l1, f->ns, &k, 0, BLOCK, 0, &ref), 0);
	test_fill(ref.data, BLOCK, 7 * 64);
	ref.clean = true;
	l1_store_commit(&f->l1, &ref);
	assert_int_equal(stats(f).dirty_items, 0);
	assert_int_equal(stats(f).complete_items, 1);
	bf.room = 5;
	assert_int_equal(l1_write_behind(&f->l1, 5), 0);  /* nothing to write */
	/* Stored again: a no-op, it stays clean. */
	assert_int_equal(store(f, f->ns, 7, 0, BLOCK), -EEXIST);
	assert_int_equal(stats(f).dirty_items, 0);
	verify(f);
	l1_set_lower_tier(&f->l1, NULL);
}

L1_TEST(test_size_mix_changes)
{
	/* Fill all 8 regions with small blocks... */
	for (uint64_t i = 0; i < 128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	/* ...then switch to 1 MiB blocks: each takes a whole region back. */
	for (uint64_t i = 1000; i < 1008; i++)
		assert_int_equal(store(f, f->big, i, 0, MiB), 0);
	for (uint64_t i = 1000; i < 1008; i++)
		assert_int_equal(load_check(f, f->big, i, 0, MiB), 0);
	assert_int_equal(stats(f).items, 8);
	assert_int_equal(f->ns->l1_items, 0);
	/* And back again. */
	for (uint64_t i = 2000; i < 2128; i++)
		assert_int_equal(store(f, f->ns, i, 0, BLOCK), 0);
	assert_int_equal(f->big->l1_items, 0);
	assert_int_equal(f->ns->l1_items, 128);
	verify(f);
}

L1_TEST(test_namespace_registry)
{
	struct kvt_ns *ns;
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, BLOCK, 1, &ns), 0);
	assert_ptr_equal(ns, f->ns);
	assert_int_equal(ns_get(&f->reg, "model-a", "", BLOCK, 1, &ns), 0);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, BLOCK * 2, 1, &ns), -KVT_ENSCONFLICT);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, BLOCK, 2, &ns), -KVT_ENSCONFLICT);
	assert_int_equal(ns_get(&f->reg, "", NULL, BLOCK, 1, &ns), -EINVAL);
	assert_int_equal(ns_get(&f->reg, "m", NULL, 0, 1, &ns), -EINVAL);
	assert_int_equal(ns_get(&f->reg, "m", NULL, 1, 0, &ns), -EINVAL);
	assert_int_equal(ns_get(&f->reg, "m", NULL, 1, KVT_TP_MAX + 1, &ns), -EINVAL);
	assert_ptr_equal(ns_find_id(&f->reg, f->big->id), f->big);
	assert_null(ns_find_id(&f->reg, 9999));
	struct kvt_ns *huge;
	assert_int_equal(ns_get(&f->reg, "huge", NULL, 2 * MiB, 1, &huge), 1);
	assert_int_equal(l1_ns_open(&f->l1, huge), -E2BIG);
}

/* Random keys, namespaces and lengths, far past capacity, with random pins. */
L1_TEST(test_random_fill_invariants)
{
	struct kvt_ns *nss[3] = {f->ns, f->tp2, f->big};
	uint64_t rng = 12345;
	struct l1_ref held[6];
	unsigned nheld = 0;
	uint64_t present_checked = 0;
	for (int step = 0; step < 3000; step++) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		uint64_t r = rng >> 33;
		struct kvt_ns *ns = nss[r % 13 == 0 ? 2 : r % 3 == 0 ? 1 : 0];
		uint64_t id = (r >> 4) % 400;
		uint16_t rank = (uint16_t)((r >> 12) % ns->tp_size);
		uint32_t len = (uint32_t)(1 + (r >> 14) % ns->block_bytes);
		int rc;
		if (r % 7 == 0 && nheld < 6) {
			/* Pin a random present block for a while. */
			struct kvt_key k = test_key(id);
			if (l1_load_begin(&f->l1, ns, &k, 0, &held[nheld]) == 0)
				nheld++;
		} else if (r % 5 == 0 && nheld > 0) {
			l1_load_end(&f->l1, &held[--nheld]);
		} else {
			/* Content is a function of (id, rank) and the length of the
			 * first store: a later duplicate store is a no-op. */
			struct kvt_key k = test_key(id);
			struct l1_ref ref;
			rc = l1_store_begin(&f->l1, ns, &k, rank, len, 0, &ref);
			if (rc == 0) {
				test_fill(ref.data, len, id * 64 + rank + ns->id * 4096);
				l1_store_commit(&f->l1, &ref);
			} else {
				assert_true(rc == -EEXIST || rc == -KVT_EALLPINNED);
			}
		}
		verify(f);
		/* Pinned blocks hold their bytes whatever happened around them. */
		for (unsigned i = 0; i < nheld; i++) {
			const struct l1_ref *h = &held[i];
			uint64_t hid = 0;
			for (; hid < 400; hid++) {
				struct kvt_key k = test_key(hid);
				if (memcmp(k.bytes, ((const struct index_entry *)h->item)->key.bytes, 16) == 0)
					break;
			}
			uint64_t nsid = ((const struct index_entry *)h->item)->ns_tag;
			assert_true(test_check(h->data, h->length, hid * 64 + h->rank + nsid * 4096));
		}
		if (step % 100 == 0) {
			/* Every present block returns its own bytes, for every rank. */
			for (int n = 0; n < 3; n++) {
				for (uint64_t id2 = 0; id2 < 400; id2++) {
					struct kvt_key k = test_key(id2);
					for (uint16_t rk = 0; rk < nss[n]->tp_size; rk++) {
						struct l1_ref ref;
						if (l1_load_begin(&f->l1, nss[n], &k, rk, &ref))
							continue;
						assert_true(test_check(ref.data, ref.length,
								       id2 * 64 + rk + nss[n]->id * 4096));
						l1_load_end(&f->l1, &ref);
						present_checked++;
					}
				}
			}
		}
	}
	while (nheld)
		l1_load_end(&f->l1, &held[--nheld]);
	struct l1_stats_snapshot s = stats(f);
	assert_true(s.evictions_capacity > 0);  /* it really went past capacity */
	assert_true(present_checked > 100);
	assert_true(s.used_bytes <= s.capacity_bytes);
	verify(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_store_errors),
		cmocka_unit_test(test_tensor_parallel_parts),
		cmocka_unit_test(test_prefix_lookup),
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_watermarks),
		cmocka_unit_test(test_admin_evict),
		cmocka_unit_test(test_namespace_quota),
		cmocka_unit_test(test_pins_block_eviction),
		cmocka_unit_test(test_leases),
		cmocka_unit_test(test_lease_release_cap_and_limit),
		cmocka_unit_test(test_lower_tier_hooks),
		cmocka_unit_test(test_watermark_waits_for_lower_tier),
		cmocka_unit_test(test_write_behind),
		cmocka_unit_test(test_promotion_is_clean),
		cmocka_unit_test(test_dirty_until_durable),
		cmocka_unit_test(test_write_from_slots),
		cmocka_unit_test(test_size_mix_changes),
		cmocka_unit_test(test_namespace_registry),
		cmocka_unit_test(test_random_fill_invariants),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
