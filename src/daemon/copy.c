/* copy.c — see copy.h: batch completion, and the host memcpy engine. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "copy.h"
#include "prefault.h"
#include "sigbus.h"

void copy_batch_finish_one(struct copy_engine *e, struct copy_batch *b)
{
	if (atomic_fetch_sub_explicit(&b->pending, 1, memory_order_acq_rel) == 1)
		handoff_post(&e->done, &b->done_link);
}

void copy_batch_seal(struct copy_engine *e, struct copy_batch *b)
{
	if (e->ops->seal)
		e->ops->seal(e, b);
	else
		copy_batch_finish_one(e, b);
}

int copy_engine_base_init(struct copy_engine *e, const struct copy_engine_ops *ops)
{
	memset(e, 0, sizeof(*e));
	e->ops = ops;
	return handoff_init(&e->done);
}

static struct copy_batch *batch_of(struct handoff_item *item)
{
	return (struct copy_batch *)((char *)item - offsetof(struct copy_batch, done_link));
}

struct copy_batch *copy_engine_reap(struct copy_engine *e)
{
	struct copy_batch *first = NULL, **link = &first;
	for (struct handoff_item *i = handoff_take(&e->done); i; i = i->next) {
		*link = batch_of(i);
		link = &(*link)->next_done;
	}
	*link = NULL;
	return first;
}

/*
 * Copy threads run below the event loop's priority: when both CPUs of a
 * small machine are busy copying, a woken loop (or client) thread must get a
 * CPU at once to queue the next copy, or the other copy thread runs dry.
 * On the 2-vCPU CI machine this is what stores had lost to loads at 2 MiB
 * blocks (docs/benchmarks.md). Best effort: an unprivileged daemon may lower
 * its own threads' priority.
 */
#define COPY_THREAD_NICE 5

static void *host_worker(void *arg)
{
	struct copy_engine *e = arg;
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), COPY_THREAD_NICE);
	for (;;) {
		pthread_mutex_lock(&e->lock);
		while (!e->count && !e->stopping)
			pthread_cond_wait(&e->not_empty, &e->lock);
		if (!e->count) {
			pthread_mutex_unlock(&e->lock);
			return NULL;
		}
		struct copy_chunk c = e->ring[e->head];
		e->head = (e->head + 1) % e->ring_cap;
		e->count--;
		pthread_mutex_unlock(&e->lock);
		if (sigbus_guarded_copy(c.dst, c.src, c.len))
			atomic_store(&c.batch->failed, -EFAULT);
		copy_batch_finish_one(e, c.batch);
	}
}

/* Doubles the job ring (lock held), its jobs kept in order; false without memory. */
static bool ring_grow(struct copy_engine *e)
{
	struct copy_chunk *ring = calloc(2 * (size_t)e->ring_cap, sizeof(*ring));
	if (!ring)
		return false;
	for (uint32_t i = 0; i < e->count; i++)
		ring[i] = e->ring[(e->head + i) % e->ring_cap];
	free(e->ring);
	e->ring = ring;
	e->ring_cap *= 2;
	e->head = 0;
	return true;
}

/*
 * Queues a chunk without waiting for the threads (the loop thread calls
 * this): a full ring grows. Without memory to grow it, the chunk is copied
 * here and now, which is slow but never blocks on another thread.
 */
static void host_push(struct copy_engine *e, const struct copy_chunk *c)
{
	pthread_mutex_lock(&e->lock);
	if (e->count == e->ring_cap && !ring_grow(e)) {
		pthread_mutex_unlock(&e->lock);
		if (sigbus_guarded_copy(c->dst, c->src, c->len))
			atomic_store(&c->batch->failed, -EFAULT);
		copy_batch_finish_one(e, c->batch);
		return;
	}
	e->ring[(e->head + e->count) % e->ring_cap] = *c;
	e->count++;
	pthread_cond_signal(&e->not_empty);
	pthread_mutex_unlock(&e->lock);
}

static void host_copy(struct copy_engine *e, struct copy_batch *b, void *dst,
		      const void *src, size_t len)
{
	while (len) {
		size_t n = len < e->chunk_bytes ? len : e->chunk_bytes;
		atomic_fetch_add_explicit(&b->pending, 1, memory_order_relaxed);
		host_push(e, &(struct copy_chunk){dst, src, n, b});
		dst = (uint8_t *)dst + n;
		src = (const uint8_t *)src + n;
		len -= n;
	}
}

static void host_destroy(struct copy_engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->stopping = 1;
	pthread_cond_broadcast(&e->not_empty);
	pthread_mutex_unlock(&e->lock);
	for (unsigned i = 0; i < e->nthreads; i++)
		pthread_join(e->threads[i], NULL);
	free(e->threads);
	free(e->ring);
}

static const struct copy_engine_ops host_ops = {
	.name = "memcpy",
	.copy = host_copy,
	.destroy = host_destroy,
};

int copy_engine_host_init(struct copy_engine *e, unsigned nthreads, size_t chunk_bytes)
{
	sigbus_guard_install();
	if (copy_engine_base_init(e, &host_ops))
		return -ENOMEM;
	e->chunk_bytes = chunk_bytes;
	e->ring_cap = 1u << 16;
	e->ring = calloc(e->ring_cap, sizeof(*e->ring));
	/* Faulted in now, not a page at a time as the ring's head first passes it. */
	if (e->ring)
		prefault_touch(e->ring, e->ring_cap * sizeof(*e->ring));
	e->threads = calloc(nthreads, sizeof(*e->threads));
	if (!e->ring || !e->threads)
		goto fail;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->not_empty, NULL);
	for (; e->nthreads < nthreads; e->nthreads++)
		if (pthread_create(&e->threads[e->nthreads], NULL, host_worker, e))
			break;
	if (e->nthreads == 0) {
		host_destroy(e);
		e->ring = NULL;
		e->threads = NULL;
		goto fail;
	}
	return 0;
fail:
	free(e->ring);
	free(e->threads);
	handoff_destroy(&e->done);
	return -ENOMEM;
}

void copy_engine_destroy(struct copy_engine *e)
{
	e->ops->destroy(e);
	handoff_destroy(&e->done);
}
