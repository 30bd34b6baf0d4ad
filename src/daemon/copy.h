/*
 * copy.h — copy engines: move bytes between L1 slots and staging buffers off
 * the event loop, and hand finished batches back to it.
 *
 * A batch is the copies of one request. The loop adds copies to it, seals
 * it, and later gets it back from copy_engine_reap() (woken through the
 * engine's eventfd) once every copy has finished. The host engine splits
 * copies into chunks that a pool of threads runs with memcpy, so one large
 * block does not hold up other lanes. The CUDA engine (copy_cuda.c)
 * implements the same ops with cudaMemcpyAsync on per-device streams.
 *
 * Host copies run under a SIGBUS guard: a staging file truncated by its owner
 * under a copy fails that copy's batch with -EFAULT instead of killing the
 * daemon.
 */
#ifndef KVTD_COPY_H
#define KVTD_COPY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "handoff.h"

struct copy_batch {
	atomic_uint pending;          /* copies not finished, +1 until sealed */
	atomic_int failed;            /* set when a copy faulted (-EFAULT, -EIO) */
	struct handoff_item done_link; /* on the engine's handoff once finished */
	struct copy_batch *next_done;  /* the list copy_engine_reap returns */
	/* For the CUDA engine: where the batch runs, and the copy being coalesced. */
	int device;                   /* the GPU side's device */
	unsigned lane;                /* spreads batches over a device's streams */
	uint8_t *run_dst;
	const uint8_t *run_src;
	size_t run_len;
	struct copy_engine *engine;   /* set when sealed, for completion callbacks */
};

struct copy_engine;

struct copy_engine_ops {
	const char *name;
	void (*copy)(struct copy_engine *e, struct copy_batch *b, void *dst, const void *src,
		     size_t len);
	void (*seal)(struct copy_engine *e, struct copy_batch *b); /* NULL: nothing to flush */
	void (*destroy)(struct copy_engine *e);
};

struct copy_chunk {
	void *dst;
	const void *src;
	size_t len;
	struct copy_batch *batch;
};

struct copy_engine {
	const struct copy_engine_ops *ops;
	struct handoff done;           /* finished batches; its eventfd is the loop's source */
	/* The host engine's job ring and threads. */
	pthread_mutex_t lock;
	pthread_cond_t not_empty;
	struct copy_chunk *ring;       /* grows when full: the loop never waits on it */
	uint32_t ring_cap, head, count;
	pthread_t *threads;
	unsigned nthreads;
	size_t chunk_bytes;
	int stopping;
	void *priv;                    /* the CUDA engine's streams */
};

/* A host (memcpy) engine with nthreads threads and chunk_bytes chunks. */
int copy_engine_host_init(struct copy_engine *e, unsigned nthreads, size_t chunk_bytes);
/*
 * A CUDA engine over ndevices devices, streams_per_device non-blocking
 * streams each: copies between pinned host memory and device memory.
 * -KVT_ENOCUDA without CUDA.
 */
int copy_engine_cuda_init(struct copy_engine *e, unsigned ndevices, unsigned streams_per_device);
void copy_engine_destroy(struct copy_engine *e);

/* device and lane matter to the CUDA engine only. */
static inline void copy_batch_init(struct copy_batch *b, int device, unsigned lane)
{
	atomic_init(&b->pending, 1);
	atomic_init(&b->failed, 0);
	b->next_done = NULL;
	b->device = device;
	b->lane = lane;
	b->run_dst = NULL;
	b->run_src = NULL;
	b->run_len = 0;
}

/* Queues a copy into b (may wait while the engine's queue is full). */
static inline void copy_add(struct copy_engine *e, struct copy_batch *b, void *dst,
			    const void *src, size_t len)
{
	e->ops->copy(e, b, dst, src, len);
}

/* No more copies will be added; b comes back from reap when all are done. */
void copy_batch_seal(struct copy_engine *e, struct copy_batch *b);

/* Sets up the completion side shared by every engine: the eventfd and done list. */
int copy_engine_base_init(struct copy_engine *e, const struct copy_engine_ops *ops);

/* Finished batches, oldest first, linked by next_done; clears the eventfd. */
struct copy_batch *copy_engine_reap(struct copy_engine *e);

/* Called by an engine when one copy of b has finished. */
void copy_batch_finish_one(struct copy_engine *e, struct copy_batch *b);

#endif
