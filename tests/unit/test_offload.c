/*
 * test_offload.c — the offload thread: jobs run off the calling thread, in
 * order; done runs on the caller's thread in submission order, once each;
 * close runs what is still queued and hands every job back.
 */
#include "config.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>

#include "offload.h"
#include "test_util.h"

#define NJOBS 64

struct counted_job {
	struct offload_job job;
	unsigned index;
	pthread_t ran_on;
	unsigned ran_order;
	unsigned dones;
};

static unsigned ran_next, done_next;
static unsigned done_order[NJOBS];
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;  /* held: the worker waits */

static void job_run(struct offload_job *job)
{
	struct counted_job *j = (struct counted_job *)job;
	pthread_mutex_lock(&gate);
	j->ran_on = pthread_self();
	j->ran_order = ran_next++; /* only the worker writes it */
	pthread_mutex_unlock(&gate);
}

static void job_done(struct offload_job *job)
{
	struct counted_job *j = (struct counted_job *)job;
	j->dones++;
	done_order[done_next++] = j->index;
}

static void reset(struct counted_job *jobs)
{
	ran_next = done_next = 0;
	for (unsigned i = 0; i < NJOBS; i++)
		jobs[i] = (struct counted_job){.job = {.run = job_run, .done = job_done}, .index = i};
}

static void test_jobs_run_off_thread_in_order(void **state)
{
	(void)state;
	struct offload o;
	struct counted_job *jobs = calloc(NJOBS, sizeof(*jobs));
	reset(jobs);
	assert_int_equal(offload_open(&o), 0);
	for (unsigned i = 0; i < NJOBS; i++)
		offload_submit(&o, &jobs[i].job);
	assert_int_equal(o.pending, NJOBS);
	while (done_next < NJOBS) {
		struct pollfd p = {o.done.eventfd, POLLIN, 0};
		assert_int_equal(poll(&p, 1, 60000), 1);
		offload_reap(&o);
	}
	assert_int_equal(o.pending, 0);
	for (unsigned i = 0; i < NJOBS; i++) {
		assert_int_equal(jobs[i].dones, 1);
		assert_int_equal(jobs[i].ran_order, i);
		assert_int_equal(done_order[i], i);
		assert_false(pthread_equal(jobs[i].ran_on, pthread_self()));
	}
	offload_close(&o);
	free(jobs);
}

/* With the worker held at the gate, close still runs every queued job, then hands all back. */
static void test_close_runs_what_is_queued(void **state)
{
	(void)state;
	struct offload o;
	struct counted_job *jobs = calloc(NJOBS, sizeof(*jobs));
	reset(jobs);
	assert_int_equal(offload_open(&o), 0);
	pthread_mutex_lock(&gate);
	for (unsigned i = 0; i < NJOBS; i++)
		offload_submit(&o, &jobs[i].job);
	pthread_mutex_unlock(&gate);
	offload_close(&o);
	assert_int_equal(ran_next, NJOBS);
	assert_int_equal(done_next, NJOBS);
	assert_int_equal(o.pending, 0);
	for (unsigned i = 0; i < NJOBS; i++)
		assert_int_equal(jobs[i].dones, 1);
	free(jobs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jobs_run_off_thread_in_order),
		cmocka_unit_test(test_close_runs_what_is_queued),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
