/* test_copy.c — the host copy engine: bytes exact, batches back once, a full job ring grows. */
#include "config.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "copy.h"
#include "test_util.h"

/* Waits for b to come back from reap, alone. */
static void wait_batch(struct copy_engine *e, struct copy_batch *b)
{
	struct copy_batch *done = NULL;
	while (!done) {
		struct pollfd p = {e->done.eventfd, POLLIN, 0};
		assert_int_equal(poll(&p, 1, 60000), 1);
		done = copy_engine_reap(e);
	}
	assert_ptr_equal(done, b);
	assert_null(done->next_done);
	assert_int_equal(atomic_load(&b->failed), 0);
}

static void test_copies_bytes_exact(void **state)
{
	(void)state;
	struct copy_engine e;
	assert_int_equal(copy_engine_host_init(&e, 2, 64 << 10), 0);
	size_t len = (1 << 20) + 123;
	uint8_t *src = malloc(len), *dst = calloc(1, len);
	test_fill(src, len, 7);
	struct copy_batch b;
	copy_batch_init(&b, -1, 0);
	copy_add(&e, &b, dst, src, len / 2);
	copy_add(&e, &b, dst + len / 2, src + len / 2, len - len / 2);
	copy_batch_seal(&e, &b);
	wait_batch(&e, &b);
	assert_true(test_check(dst, len, 7));
	free(src);
	free(dst);
	copy_engine_destroy(&e);
}

/*
 * copy_add never waits for the copy threads: with the one thread busy on a
 * large chunk, more chunks than the job ring holds are queued at once (the
 * ring grows) and every one is copied.
 */
static void test_full_ring_grows_instead_of_waiting(void **state)
{
	(void)state;
	struct copy_engine e;
	size_t big = 256u << 20;
	assert_int_equal(copy_engine_host_init(&e, 1, big), 0);
	uint32_t cap = e.ring_cap, small = cap + 1000;
	uint8_t *bsrc = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *bdst = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(bsrc != MAP_FAILED && bdst != MAP_FAILED);
	memset(bsrc, 0x5a, big);
	uint8_t *src = malloc(small), *dst = calloc(1, small);
	test_fill(src, small, 3);
	struct copy_batch b;
	copy_batch_init(&b, -1, 0);
	copy_add(&e, &b, bdst, bsrc, big);
	for (uint32_t i = 0; i < small; i++)
		copy_add(&e, &b, dst + i, src + i, 1);
	assert_true(e.ring_cap > cap);
	copy_batch_seal(&e, &b);
	wait_batch(&e, &b);
	assert_true(test_check(dst, small, 3));
	assert_true(bdst[0] == 0x5a && bdst[big - 1] == 0x5a);
	munmap(bsrc, big);
	munmap(bdst, big);
	free(src);
	free(dst);
	copy_engine_destroy(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copies_bytes_exact),
		cmocka_unit_test(test_full_ring_grows_instead_of_waiting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
