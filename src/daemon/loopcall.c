/* loopcall.c — see loopcall.h. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "loopcall.h"

struct loopcall_item {
	int (*fn)(void *arg);
	void *arg;
	int result;
	bool finished;
	struct loopcall_item *next;
};

static void on_calls(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct loopcall *lc = (struct loopcall *)src;
	uint64_t n;
	(void)!read(src->fd, &n, sizeof(n));
	pthread_mutex_lock(&lc->lock);
	while (lc->queue) {
		struct loopcall_item *it = lc->queue;
		lc->queue = it->next;
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
	pthread_cond_init(&lc->done, NULL);
	lc->queue = NULL;
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
	for (struct loopcall_item *it = lc->queue; it; it = it->next) {
		it->result = -ESHUTDOWN;
		it->finished = true;
	}
	lc->queue = NULL;
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
	/* Append, so calls run in the order they came. */
	struct loopcall_item **tail = &lc->queue;
	while (*tail)
		tail = &(*tail)->next;
	*tail = &it;
	uint64_t one = 1;
	(void)!write(lc->src.fd, &one, sizeof(one));
	while (!it.finished)
		pthread_cond_wait(&lc->done, &lc->lock);
	pthread_mutex_unlock(&lc->lock);
	return it.result;
}
