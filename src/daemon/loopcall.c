/* loopcall.c — see loopcall.h. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "loopcall.h"

struct loopcall_item {
	int (*fn)(void *arg);
	void *arg;
	int result;
	bool started;
	bool finished;
	STAILQ_ENTRY(loopcall_item) link;
};

static void on_calls(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct loopcall *lc = (struct loopcall *)src;
	uint64_t n;
	(void)!read(src->fd, &n, sizeof(n));
	pthread_mutex_lock(&lc->lock);
	struct loopcall_item *it;
	while ((it = STAILQ_FIRST(&lc->queue))) {
		STAILQ_REMOVE_HEAD(&lc->queue, link);
		it->started = true;
		pthread_mutex_unlock(&lc->lock);
		int result = it->fn(it->arg);
		pthread_mutex_lock(&lc->lock);
		it->result = result;
		it->finished = true;
	}
	pthread_cond_broadcast(&lc->done);
	pthread_mutex_unlock(&lc->lock);
}

int loopcall_open(struct loopcall *lc, struct loop *loop)
{
	lc->src = (struct loop_source){eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), on_calls};
	if (lc->src.fd < 0)
		return -errno;
	pthread_mutex_init(&lc->lock, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&lc->done, &attr);
	pthread_condattr_destroy(&attr);
	STAILQ_INIT(&lc->queue);
	lc->closed = false;
	int err = loop_add(loop, &lc->src, EPOLLIN);
	if (err) {
		close(lc->src.fd);
		lc->src.fd = -1;
		pthread_cond_destroy(&lc->done);
		pthread_mutex_destroy(&lc->lock);
	}
	return err;
}

void loopcall_shutdown(struct loopcall *lc)
{
	pthread_mutex_lock(&lc->lock);
	lc->closed = true;
	struct loopcall_item *it;
	STAILQ_FOREACH(it, &lc->queue, link) {
		it->result = -ESHUTDOWN;
		it->finished = true;
	}
	STAILQ_INIT(&lc->queue);
	pthread_cond_broadcast(&lc->done);
	pthread_mutex_unlock(&lc->lock);
}

void loopcall_close(struct loopcall *lc)
{
	close(lc->src.fd);
	pthread_mutex_destroy(&lc->lock);
	pthread_cond_destroy(&lc->done);
}

int loopcall_run(struct loopcall *lc, int (*fn)(void *arg), void *arg)
{
	struct loopcall_item it = {.fn = fn, .arg = arg};
	pthread_mutex_lock(&lc->lock);
	if (lc->closed) {
		pthread_mutex_unlock(&lc->lock);
		return -ESHUTDOWN;
	}
	STAILQ_INSERT_TAIL(&lc->queue, &it, link); /* calls run in the order they came */
	uint64_t one = 1;
	(void)!write(lc->src.fd, &one, sizeof(one));
	struct timespec deadline;
	kvt_deadline_ms(&deadline, LOOPCALL_DEADLINE_MS);
	while (!it.finished) {
		if (it.started) { /* it runs: wait for its end, deadline or not */
			pthread_cond_wait(&lc->done, &lc->lock);
			continue;
		}
		if (pthread_cond_timedwait(&lc->done, &lc->lock, &deadline) == ETIMEDOUT &&
		    !it.started && !it.finished) {
			STAILQ_REMOVE(&lc->queue, &it, loopcall_item, link); /* never runs now */
			it.result = -ETIMEDOUT;
			if (lc->timeouts)
				atomic_fetch_add_explicit(lc->timeouts, 1, memory_order_relaxed);
			break;
		}
	}
	pthread_mutex_unlock(&lc->lock);
	return it.result;
}
