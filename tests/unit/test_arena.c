/* test_arena.c — the L1 arena: slots, classes, regions moving between sizes. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "arena.h"
#include "test_util.h"

#define REGION (UINT64_C(1) << 20)

static void test_init_rejects_bad_sizes(void **state)
{
	(void)state;
	struct arena a;
	assert_int_equal(arena_init(&a, REGION / 2, REGION, false), -EINVAL);
	assert_int_equal(arena_init(&a, REGION, 1000, false), -EINVAL);
	assert_int_equal(arena_init(&a, 4 * REGION + 5, REGION, false), 0);
	assert_int_equal(a.size, 4 * REGION); /* rounded down to whole regions */
	assert_int_equal(a.nregions, 4);
	assert_true(((uintptr_t)a.base & 4095) == 0);
	arena_destroy(&a);
}

static void test_classes(void **state)
{
	(void)state;
	struct arena a;
	int err = 0;
	assert_int_equal(arena_init(&a, 2 * REGION, REGION, false), 0);
	struct arena_class *c1 = arena_class_get(&a, 1, &err);
	assert_non_null(c1);
	assert_int_equal(c1->slot_size, 4096);
	assert_ptr_equal(arena_class_get(&a, 4096, &err), c1);
	struct arena_class *c2 = arena_class_get(&a, 4097, &err);
	assert_int_equal(c2->slot_size, 8192);
	assert_null(arena_class_get(&a, REGION + 1, &err));
	assert_int_equal(err, -E2BIG);
	for (unsigned i = a.nclasses; i < ARENA_MAX_CLASSES; i++)
		assert_non_null(arena_class_get(&a, (uint64_t)(i + 1) * 4096, &err));
	assert_null(arena_class_get(&a, (ARENA_MAX_CLASSES + 1) * 4096, &err));
	assert_int_equal(err, -ENOSPC);
	arena_destroy(&a);
}

static void test_alloc_fill_and_free(void **state)
{
	(void)state;
	struct arena a;
	int err = 0;
	assert_int_equal(arena_init(&a, 2 * REGION, REGION, false), 0);
	struct arena_class *c = arena_class_get(&a, 300 * 1024, &err); /* 3 per region */
	void *slots[6];
	for (int i = 0; i < 6; i++) {
		slots[i] = arena_alloc(&a, c, &slots[i]);
		assert_non_null(slots[i]);
		memset(slots[i], i, c->slot_size); /* the whole slot is usable */
	}
	assert_null(arena_alloc(&a, c, NULL));
	assert_false(arena_can_alloc(&a, c));
	assert_int_equal(a.used_bytes, 6 * c->slot_size);
	assert_int_equal(a.free_regions, 0);
	/* Slots never overlap: each still holds its own fill. */
	for (int i = 0; i < 6; i++)
		for (uint64_t b = 0; b < c->slot_size; b += 4096)
			assert_int_equal(((uint8_t *)slots[i])[b], i);
	/* Owners are recorded per slot. */
	uint32_t r = arena_region_index(&a, slots[4]), n;
	int found = 0;
	for (uint32_t i = 0; i < 3; i++)
		found += arena_region_owner(&a, r, i, &n) == &slots[4];
	assert_int_equal(found, 1);
	assert_int_equal(n, 3);

	arena_free(&a, slots[1]);
	assert_true(arena_can_alloc(&a, c));
	assert_ptr_equal(arena_alloc(&a, c, NULL), slots[1]); /* O(1) reuse */
	for (int i = 0; i < 6; i++)
		arena_free(&a, slots[i]);
	assert_int_equal(a.used_bytes, 0);
	assert_int_equal(a.free_regions, 2);
	assert_int_equal(c->regions, 0);
	arena_destroy(&a);
}

static void test_regions_move_between_sizes(void **state)
{
	(void)state;
	struct arena a;
	int err = 0;
	assert_int_equal(arena_init(&a, 4 * REGION, REGION, false), 0);
	struct arena_class *small = arena_class_get(&a, 4096, &err);
	struct arena_class *big = arena_class_get(&a, REGION, &err);
	/* Fill everything with small slots. */
	size_t n = 4 * (REGION / 4096);
	void **s = calloc(n, sizeof(*s));
	for (size_t i = 0; i < n; i++)
		assert_non_null(s[i] = arena_alloc(&a, small, NULL));
	assert_null(arena_alloc(&a, big, NULL));
	/* Emptying one region (not the others) lets the big class have it. */
	for (size_t i = 0; i < REGION / 4096; i++)
		arena_free(&a, s[i]);
	assert_int_equal(a.free_regions, 1);
	void *b = arena_alloc(&a, big, NULL);
	assert_non_null(b);
	assert_null(arena_alloc(&a, big, NULL));
	assert_int_equal(small->regions, 3);
	assert_int_equal(big->regions, 1);
	arena_free(&a, b);
	for (size_t i = REGION / 4096; i < n; i++)
		arena_free(&a, s[i]);
	assert_int_equal(a.free_regions, 4);
	assert_true(arena_region_is_free(&a, 0));
	free(s);
	arena_destroy(&a);
}

static void test_hugepages_fallback(void **state)
{
	(void)state;
	struct arena a;
	/* Whether or not hugetlb pages exist here, the arena maps and works. */
	assert_int_equal(arena_init(&a, 2 * REGION, REGION, true), 0);
	int err = 0;
	struct arena_class *c = arena_class_get(&a, 4096, &err);
	uint8_t *p = arena_alloc(&a, c, NULL);
	assert_non_null(p);
	p[0] = 1;
	arena_free(&a, p);
	arena_destroy(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rejects_bad_sizes),
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_alloc_fill_and_free),
		cmocka_unit_test(test_regions_move_between_sizes),
		cmocka_unit_test(test_hugepages_fallback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
