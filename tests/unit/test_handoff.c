/*
 * test_handoff.c — handoff.h: items posted from other threads reach the
 * owner whole and in each poster's order; the eventfd is readable exactly
 * while items wait, and one take clears it; a take of nothing is NULL.
 */
#include "config.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "handoff.h"
#include "test_util.h"

#define PER_THREAD 5000

struct posted {
	struct handoff_item item;
	unsigned thread, seq;
};

struct poster {
	struct handoff *h;
	unsigned thread;
	struct posted *items;
};

static void *post_all(void *arg)
{
	struct poster *p = arg;
	for (unsigned i = 0; i < PER_THREAD; i++) {
		p->items[i] = (struct posted){.thread = p->thread, .seq = i};
		handoff_post(p->h, &p->items[i].item);
	}
	return NULL;
}

static bool readable(const struct handoff *h, int timeout_ms)
{
	struct pollfd p = {h->eventfd, POLLIN, 0};
	return poll(&p, 1, timeout_ms) == 1;
}

static void test_wakes_while_items_wait(void **state)
{
	(void)state;
	struct handoff h;
	assert_int_equal(handoff_init(&h), 0);
	assert_false(readable(&h, 0));
	assert_null(handoff_take(&h));
	struct posted a = {0}, b = {0};
	handoff_post(&h, &a.item);
	handoff_post(&h, &b.item);
	assert_true(readable(&h, 0));
	struct handoff_item *list = handoff_take(&h);
	assert_ptr_equal(list, &a.item);
	assert_ptr_equal(list->next, &b.item);
	assert_null(list->next->next);
	assert_false(readable(&h, 0)); /* one take clears the wake-up */
	handoff_destroy(&h);
	assert_int_equal(h.eventfd, -1);
	handoff_destroy(&h); /* a second destroy is a no-op */
}

static void test_two_posters_lose_nothing(void **state)
{
	(void)state;
	struct handoff h;
	assert_int_equal(handoff_init(&h), 0);
	struct poster p[2];
	pthread_t t[2];
	for (unsigned i = 0; i < 2; i++) {
		p[i] = (struct poster){&h, i, test_calloc(PER_THREAD, sizeof(struct posted))};
		assert_int_equal(pthread_create(&t[i], NULL, post_all, &p[i]), 0);
	}
	unsigned next_seq[2] = {0, 0}, got = 0;
	while (got < 2 * PER_THREAD) {
		assert_true(readable(&h, 10000)); /* a wake-up for every batch that waits */
		for (struct handoff_item *i = handoff_take(&h); i; i = i->next) {
			struct posted *x = (struct posted *)i;
			assert_int_equal(x->seq, next_seq[x->thread]++); /* each poster's order */
			got++;
		}
	}
	for (unsigned i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		test_free(p[i].items);
	}
	assert_int_equal(next_seq[0], PER_THREAD);
	assert_int_equal(next_seq[1], PER_THREAD);
	assert_null(handoff_take(&h));
	handoff_destroy(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wakes_while_items_wait),
		cmocka_unit_test(test_two_posters_lose_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
