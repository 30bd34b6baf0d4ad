/*
 * pipeline.c — the request-level load/store pipeline (kvtier/pipeline.h).
 *
 * One progress thread owns the dispatch: it takes requests from a FIFO,
 * fills free staging buffers with batches, sends them on each buffer's own
 * lane, and waits in poll() on the busy lanes plus an eventfd that submit
 * and close ring. Callers' threads only queue requests and collect results,
 * under one mutex. Staging has two backends behind three calls (alloc,
 * gather, restore): GPU memory with the KV kernels, or shared memory with
 * their host twin.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"
#include "kvtier/pipeline.h"
#include "kvtier/protocol.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct request {
	STAILQ_ENTRY(request) link;  /* in the dispatch queue, then a finished list, then returned */
	uint64_t id;
	bool load;
	uint32_t nblocks;
	uint32_t dispatched;         /* blocks handed to batches so far */
	uint32_t batches_out;        /* batches holding its blocks, not finished */
	uint32_t nfailed;
	int status;
	struct kvt_key *keys;
	int32_t *block_ids;
	uint32_t *failed;            /* indexes of failed blocks (nblocks capacity) */
};

struct segment {                     /* a request's blocks [first, first + n) in a batch */
	struct request *req;
	uint32_t first, n;
};

/* Lane 0 is the caller's (kvt_pipeline_client); buffer i has lane i + 1. */
#define POOL_LANE(i) ((unsigned)(i) + 1)

struct staging_buf {
	uint32_t index;              /* in the pool; its lane is POOL_LANE(index) */
	uint32_t reg_index;          /* the daemon's buffer index */
	uint8_t *ptr;                /* host or device address */
	uint64_t size;
	bool busy;
	bool load;
	uint64_t batch, req_id;      /* batch sequence; the daemon request's id */
	uint32_t nblocks, nseg;
	struct segment *seg;         /* buffer_blocks capacity */
	struct kvt_block *blocks;
	int32_t *ids;                /* cache block ids of the batch, -1 once failed */
	struct kvt_gpu_buffer gpu;
#ifdef HAVE_CUDA
	cudaStream_t stream;
	int32_t *ids_dev;
#endif
};

STAILQ_HEAD(requests, request);

struct result_list {
	struct requests finished;    /* not yet collected */
	struct requests returned;    /* collected by the last kvt_pipeline_finished call */
};

struct kvt_pipeline {
	struct kvt_pipeline_options o;
	struct kvt_client *c;
	uint64_t block_bytes;
	uint32_t ids_per_block;      /* cache blocks per kvtier block */
	void **bases_dev;            /* GPU mode: the layer bases copied to the device, when given
					in host memory (NULL when they were device memory already) */
	struct staging_buf *bufs;
	uint32_t *free_fifo;         /* free buffers, oldest first */
	uint32_t free_head, free_count;
	pthread_mutex_t lock;
	pthread_cond_t idle;         /* signalled when a request finishes */
	pthread_t thread;
	int wake_fd;
	bool stopping;
	struct requests queue;       /* not fully dispatched, FIFO */
	uint32_t active;             /* requests dispatched in part, not finished */
	uint32_t unfinished;         /* submitted, not finished */
	uint64_t next_batch;
	struct result_list done[2];  /* [0] stores, [1] loads */
	struct kvt_pipeline_stats stats;
};

/* --- staging backends --- */

static int staging_alloc(struct kvt_pipeline *p, struct staging_buf *b)
{
	uint64_t size = p->block_bytes * p->o.buffer_blocks;
	if (!p->o.gpu) {
		void *addr;
		int err = kvt_buffer_create(p->c, size, &addr, &b->reg_index);
		b->ptr = addr;
		b->size = size;
		return err;
	}
#ifdef HAVE_CUDA
	int err = kvt_gpu_buffer_create(p->c, p->o.device, size,
					p->o.gpu_kind ? p->o.gpu_kind : KVT_GPU_VMM, &b->gpu);
	if (err)
		return err;
	b->ptr = b->gpu.ptr;
	b->size = b->gpu.size;
	b->reg_index = b->gpu.index;
	if (cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaMalloc((void **)&b->ids_dev,
		       (size_t)p->o.buffer_blocks * p->ids_per_block * sizeof(int32_t)) != cudaSuccess) {
		cudaGetLastError();
		return -ENOMEM;
	}
	return 0;
#else
	return -KVT_ENOCUDA;
#endif
}

static void staging_free(struct kvt_pipeline *p, struct staging_buf *b)
{
	if (!b->ptr)
		return;
	if (!p->o.gpu) {
		kvt_buffer_unregister(p->c, b->reg_index);
		munmap(b->ptr, b->size);
		return;
	}
#ifdef HAVE_CUDA
	kvt_gpu_buffer_destroy(p->c, &b->gpu);
	if (b->stream)
		cudaStreamDestroy(b->stream);
	cudaFree(b->ids_dev);
#endif
}

/* Moves the batch's blocks between staging and the cache, and waits for it. */
static int staging_move(struct kvt_pipeline *p, struct staging_buf *b, int to_cache)
{
	uint32_t nids = b->nblocks * p->ids_per_block; /* a block's cache blocks lie side by side */
	if (!p->o.gpu) {
		kvt__kv_copy_host(&p->o.layout, b->ptr, b->ids, nids, to_cache);
		return 0;
	}
#ifdef HAVE_CUDA
	size_t ids_len = nids * sizeof(int32_t);
	int err = cudaMemcpyAsync(b->ids_dev, b->ids, ids_len, cudaMemcpyHostToDevice, b->stream)
			  ? -EIO
		  : to_cache ? kvt_kv_restore(&p->o.layout, b->ptr, b->ids_dev, nids, b->stream)
			     : kvt_kv_gather(&p->o.layout, b->ptr, b->ids_dev, nids, b->stream);
	if (!err && cudaStreamSynchronize(b->stream) != cudaSuccess)
		err = -EIO;
	if (err)
		cudaGetLastError();
	return err;
#else
	return -KVT_ENOCUDA;
#endif
}

/* --- requests and results (lock held) --- */

static void request_free(struct request *r)
{
	free(r->keys);
	free(r->block_ids);
	free(r->failed);
	free(r);
}

static void fail_block(struct request *r, uint32_t i, int err)
{
	if (!r->status)
		r->status = err;
	r->failed[r->nfailed++] = i;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void request_finish(struct kvt_pipeline *p, struct request *r)
{
	/* Batches finish in any order: hand the failed blocks over in block order. */
	qsort(r->failed, r->nfailed, sizeof(*r->failed), cmp_u32);
	STAILQ_INSERT_TAIL(&p->done[r->load].finished, r, link);
	p->active--;
	p->unfinished--;
	p->stats.requests_finished++;
	if (r->nfailed) {
		p->stats.requests_failed++;
		p->stats.blocks_failed += r->nfailed;
	}
	pthread_cond_broadcast(&p->idle);
}

/* first_req: the batch's first request (it may be finished and handed out by now). */
static void trace(struct kvt_pipeline *p, enum kvt_pipeline_event_type type,
		  const struct staging_buf *b, uint64_t first_req)
{
	if (!p->o.trace)
		return;
	struct kvt_pipeline_event ev = {
		.type = type, .load = b->load, .buffer = b->index, .batch = b->batch,
		.nblocks = b->nblocks, .nrequests = b->nseg, .first_req = first_req,
		.active_requests = p->active, .busy_buffers = p->o.depth - p->free_count};
	p->o.trace(p->o.trace_ctx, &ev);
}

/* --- batches (progress thread, lock held) --- */

/* The batch on b is over: account its blocks, free the buffer, finish requests. */
static void batch_finish(struct kvt_pipeline *p, struct staging_buf *b, int status)
{
	uint32_t j = 0;
	for (uint32_t s = 0; s < b->nseg; s++) {
		struct segment *sg = &b->seg[s];
		for (uint32_t i = 0; i < sg->n; i++, j++) {
			int err = status ? status : b->blocks[j].status;
			if (err)
				fail_block(sg->req, sg->first + i, err);
			else if (b->load)
				p->stats.bytes_loaded += b->blocks[j].length;
			else
				p->stats.bytes_stored += b->blocks[j].length;
		}
	}
	b->busy = false;
	p->free_fifo[(p->free_head + p->free_count++) % p->o.depth] = b->index;
	uint64_t first_req = b->seg[0].req->id;
	for (uint32_t s = 0; s < b->nseg; s++) {
		struct request *r = b->seg[s].req;
		if (--r->batches_out == 0 && r->dispatched == r->nblocks)
			request_finish(p, r);
	}
	trace(p, KVT_PL_COMPLETE, b, first_req);
}

/* A LOAD answered: restore what arrived, skipping blocks that did not. */
static int restore_loaded(struct kvt_pipeline *p, struct staging_buf *b)
{
	for (uint32_t j = 0; j < b->nblocks; j++)
		if (b->blocks[j].status)
			b->ids[j] = -1;
	return staging_move(p, b, 1);
}

/* The head request may join a batch of op load now? */
static bool can_take(const struct kvt_pipeline *p, const struct request *r, bool load)
{
	if (!r || r->load != load)
		return false;
	return r->dispatched > 0 || !p->o.max_inflight || p->active < p->o.max_inflight;
}

/*
 * b's batch may take one more request after its first? Only when no other
 * buffer is free. A request sharing a batch with the next one finishes only
 * once the next one's blocks have moved too, so while a buffer is idle the
 * next request goes there and this one's tail travels alone; with the pool
 * busy, the next request would wait for a buffer anyway, and a full batch
 * moves small requests in fewer round trips.
 */
static bool can_group(const struct kvt_pipeline *p, const struct staging_buf *b)
{
	return b->nseg == 0 || p->free_count == 0;
}

/* Fills b from the queue's head: whole or split requests, all of one op. */
static void batch_fill(struct kvt_pipeline *p, struct staging_buf *b)
{
	b->load = STAILQ_FIRST(&p->queue)->load;
	b->nblocks = b->nseg = 0;
	while (b->nblocks < p->o.buffer_blocks && can_group(p, b) &&
	       can_take(p, STAILQ_FIRST(&p->queue), b->load)) {
		struct request *r = STAILQ_FIRST(&p->queue);
		uint32_t n = r->nblocks - r->dispatched;
		if (n > p->o.buffer_blocks - b->nblocks)
			n = p->o.buffer_blocks - b->nblocks;
		if (r->dispatched == 0)
			p->active++;
		b->seg[b->nseg++] = (struct segment){r, r->dispatched, n};
		for (uint32_t i = 0; i < n; i++, b->nblocks++) {
			b->blocks[b->nblocks] = (struct kvt_block){
				.key = r->keys[r->dispatched + i],
				.offset = (uint64_t)b->nblocks * p->block_bytes,
				.length = (uint32_t)p->block_bytes};
			memcpy(&b->ids[(size_t)b->nblocks * p->ids_per_block],
			       &r->block_ids[(size_t)(r->dispatched + i) * p->ids_per_block],
			       p->ids_per_block * sizeof(int32_t));
		}
		r->dispatched += n;
		r->batches_out++;
		if (r->dispatched == r->nblocks)
			STAILQ_REMOVE_HEAD(&p->queue, link);
	}
}

/* Sends the batch on b (a STORE gathers first); a failure finishes it at once. */
static void batch_send(struct kvt_pipeline *p, struct staging_buf *b)
{
	b->busy = true;
	b->batch = p->next_batch++;
	p->stats.batches++;
	uint32_t busy = p->o.depth - p->free_count;
	if (busy > p->stats.max_busy_buffers)
		p->stats.max_busy_buffers = busy;
	if (p->active > p->stats.max_active_requests)
		p->stats.max_active_requests = p->active;
	trace(p, KVT_PL_DISPATCH, b, b->seg[0].req->id);
	int err = b->load ? 0 : staging_move(p, b, 0);
	if (!err)
		err = b->load ? kvt_submit_load(p->c, POOL_LANE(b->index), b->reg_index, b->blocks,
						b->nblocks, &b->req_id)
			      : kvt_submit_store(p->c, POOL_LANE(b->index), b->reg_index, b->blocks,
						 b->nblocks, &b->req_id);
	if (err)
		batch_finish(p, b, err);
}

static void dispatch(struct kvt_pipeline *p)
{
	const struct request *head;
	while (p->free_count && (head = STAILQ_FIRST(&p->queue)) && can_take(p, head, head->load)) {
		struct staging_buf *b = &p->bufs[p->free_fifo[p->free_head]];
		p->free_head = (p->free_head + 1) % p->o.depth;
		p->free_count--;
		batch_fill(p, b);
		batch_send(p, b);
	}
}

/* Takes b's answer if it is there; the lane's failure answers it too. */
static void reap(struct kvt_pipeline *p, struct staging_buf *b)
{
	struct kvt_completion cmp;
	int n = kvt_poll(p->c, POOL_LANE(b->index), &cmp, 1, 0);
	if (n == 0)
		return;
	int status = n < 0 ? n : cmp.status;
	if (!status && b->load)
		status = restore_loaded(p, b);
	batch_finish(p, b, status);
}

static void *progress(void *arg)
{
	struct kvt_pipeline *p = arg;
	struct pollfd *pfd = calloc(p->o.depth + 1, sizeof(*pfd));
	uint32_t *who = calloc(p->o.depth, sizeof(*who));
	pthread_mutex_lock(&p->lock);
#ifdef HAVE_CUDA
	if (p->o.gpu)
		cudaSetDevice(p->o.device);
#endif
	while (pfd && who && !(p->stopping && p->unfinished == 0)) {
		dispatch(p);
		nfds_t n = 1;
		pfd[0] = (struct pollfd){.fd = p->wake_fd, .events = POLLIN};
		for (uint32_t i = 0; i < p->o.depth; i++)
			if (p->bufs[i].busy) {
				pfd[n] = (struct pollfd){.fd = kvt__lane_fd(p->c, POOL_LANE(i)),
							 .events = POLLIN};
				who[n++ - 1] = i;
			}
		pthread_mutex_unlock(&p->lock);
		(void)poll(pfd, n, -1);
		uint64_t v;
		if (pfd[0].revents)
			(void)!read(p->wake_fd, &v, sizeof(v));
		pthread_mutex_lock(&p->lock);
		for (nfds_t i = 1; i < n; i++)
			if (pfd[i].revents)
				reap(p, &p->bufs[who[i - 1]]);
	}
	pthread_mutex_unlock(&p->lock);
	free(pfd);
	free(who);
	return NULL;
}

static void wake(struct kvt_pipeline *p)
{
	uint64_t one = 1;
	(void)!write(p->wake_fd, &one, sizeof(one));
}

/* --- the API --- */

static int check_options(const struct kvt_pipeline_options *o)
{
	if (o->depth == 1 || o->depth > 64 || o->buffer_blocks == 0 ||
	    o->buffer_blocks > KVT_MAX_BLOCKS || !o->layout.layer_bases ||
	    !o->layout.num_layers || !o->layout.planes || !o->layout.chunk_bytes)
		return -EINVAL;
	uint32_t per = o->ids_per_block ? o->ids_per_block : 1;
	if (per > KVT_MAX_BLOCKS || kvt_kv_block_bytes(&o->layout) * per != o->client.block_bytes)
		return -EINVAL; /* per cache blocks of the layout are what the namespace stores */
	return 0;
}

static int pool_open(struct kvt_pipeline *p)
{
	uint32_t d = p->o.depth, nb = p->o.buffer_blocks;
	p->bufs = calloc(d, sizeof(*p->bufs));
	p->free_fifo = calloc(d, sizeof(*p->free_fifo));
	if (!p->bufs || !p->free_fifo)
		return -ENOMEM;
	for (uint32_t i = 0; i < d; i++) {
		struct staging_buf *b = &p->bufs[i];
		b->index = i;
		b->seg = calloc(nb, sizeof(*b->seg));
		b->blocks = calloc(nb, sizeof(*b->blocks));
		b->ids = calloc((size_t)nb * p->ids_per_block, sizeof(*b->ids));
		if (!b->seg || !b->blocks || !b->ids)
			return -ENOMEM;
		int err = staging_alloc(p, b);
		if (err)
			return err;
		p->free_fifo[p->free_count++] = i;
	}
	return 0;
}

static void pool_close(struct kvt_pipeline *p)
{
	for (uint32_t i = 0; p->bufs && i < p->o.depth; i++) {
		struct staging_buf *b = &p->bufs[i];
		staging_free(p, b);
		free(b->seg);
		free(b->blocks);
		free(b->ids);
	}
	free(p->bufs);
	free(p->free_fifo);
}

/* Frees every request of list, which is left empty. */
static void requests_free(struct requests *list)
{
	struct request *r;
	while ((r = STAILQ_FIRST(list))) {
		STAILQ_REMOVE_HEAD(list, link);
		request_free(r);
	}
}

#ifdef HAVE_CUDA
/*
 * The kernels read the layer bases on the device: a caller's host array
 * (a binding's, typically) is copied there once, for the pipeline's life.
 */
static int bases_on_device(struct kvt_pipeline *p)
{
	struct cudaPointerAttributes a;
	const void *bases = p->o.layout.layer_bases;
	if (cudaPointerGetAttributes(&a, bases) == cudaSuccess &&
	    (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged))
		return 0;
	cudaGetLastError();
	size_t len = p->o.layout.num_layers * sizeof(void *);
	if (cudaMalloc((void **)&p->bases_dev, len) != cudaSuccess ||
	    cudaMemcpy(p->bases_dev, bases, len, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaGetLastError();
		return -ENOMEM;
	}
	p->o.layout.layer_bases = (void *const *)p->bases_dev;
	return 0;
}
#endif

static void pipeline_free(struct kvt_pipeline *p)
{
	pool_close(p);
#ifdef HAVE_CUDA
	cudaFree(p->bases_dev);
#endif
	for (int d = 0; d < 2; d++) {
		requests_free(&p->done[d].returned);
		requests_free(&p->done[d].finished);
	}
	if (p->c)
		kvt_client_close(p->c);
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->idle);
	free(p);
}

int kvt_pipeline_open(const struct kvt_pipeline_options *o, struct kvt_pipeline **out)
{
	int err = check_options(o);
	if (err)
		return err;
	struct kvt_pipeline *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	STAILQ_INIT(&p->queue);
	for (int d = 0; d < 2; d++) {
		STAILQ_INIT(&p->done[d].finished);
		STAILQ_INIT(&p->done[d].returned);
	}
	p->o = *o;
	if (!p->o.depth)
		p->o.depth = 2;
	p->o.client.lanes = p->o.depth + 1;
	p->block_bytes = o->client.block_bytes;
	p->ids_per_block = o->ids_per_block ? o->ids_per_block : 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_t attr; /* timed waits count on the monotonic clock (deadline) */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->idle, &attr);
	pthread_condattr_destroy(&attr);
	p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->wake_fd < 0)
		err = -errno;
	if (!err)
		err = kvt_client_open(&p->o.client, &p->c);
#ifdef HAVE_CUDA
	if (!err && p->o.gpu && cudaSetDevice(p->o.device) != cudaSuccess) {
		cudaGetLastError();
		err = -KVT_ENOCUDA;
	}
	if (!err && p->o.gpu)
		err = bases_on_device(p);
#else
	if (!err && p->o.gpu)
		err = -KVT_ENOCUDA;
#endif
	if (!err)
		err = pool_open(p);
	if (!err)
		err = -pthread_create(&p->thread, NULL, progress, p);
	if (err) {
		pipeline_free(p);
		return err;
	}
	*out = p;
	return 0;
}

void kvt_pipeline_close(struct kvt_pipeline *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_mutex_unlock(&p->lock);
	wake(p);
	pthread_join(p->thread, NULL); /* it leaves once every request finished */
	pipeline_free(p);
}

struct kvt_client *kvt_pipeline_client(struct kvt_pipeline *p)
{
	return p->c;
}

static bool unfinished_id(const struct kvt_pipeline *p, uint64_t id, bool load)
{
	const struct request *r;
	STAILQ_FOREACH(r, &p->queue, link)
		if (r->id == id && r->load == load)
			return true;
	for (uint32_t i = 0; i < p->o.depth; i++) {
		const struct staging_buf *b = &p->bufs[i];
		for (uint32_t s = 0; b->busy && s < b->nseg; s++)
			if (b->seg[s].req->id == id && b->load == load)
				return true;
	}
	return false;
}

static struct request *request_new(const struct kvt_transfer *t, bool load, uint32_t per)
{
	struct request *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->id = t->req_id;
	r->load = load;
	r->nblocks = t->nblocks;
	r->keys = malloc(t->nblocks * sizeof(*r->keys));
	r->block_ids = malloc((size_t)t->nblocks * per * sizeof(*r->block_ids));
	r->failed = malloc(t->nblocks * sizeof(*r->failed));
	if (!r->keys || !r->block_ids || !r->failed) {
		request_free(r);
		return NULL;
	}
	memcpy(r->keys, t->keys, t->nblocks * sizeof(*r->keys));
	memcpy(r->block_ids, t->block_ids, (size_t)t->nblocks * per * sizeof(*r->block_ids));
	return r;
}

static int submit(struct kvt_pipeline *p, const struct kvt_transfer *t, bool load)
{
	if (!t->nblocks || t->nblocks > (1u << 24) || !t->keys || !t->block_ids)
		return -EINVAL;
	struct request *r = request_new(t, load, p->ids_per_block);
	if (!r)
		return -ENOMEM;
	pthread_mutex_lock(&p->lock);
	if (p->stopping || unfinished_id(p, t->req_id, load)) {
		bool stopping = p->stopping;
		pthread_mutex_unlock(&p->lock);
		request_free(r);
		return stopping ? -ESHUTDOWN : -EEXIST;
	}
	STAILQ_INSERT_TAIL(&p->queue, r, link);
	p->unfinished++;
	pthread_mutex_unlock(&p->lock);
	wake(p);
	return 0;
}

int kvt_pipeline_submit_load(struct kvt_pipeline *p, const struct kvt_transfer *t)
{
	return submit(p, t, true);
}

int kvt_pipeline_submit_store(struct kvt_pipeline *p, const struct kvt_transfer *t)
{
	return submit(p, t, false);
}

int kvt_pipeline_finished(struct kvt_pipeline *p, int load, struct kvt_pipeline_result *out,
			  unsigned max)
{
	struct result_list *l = &p->done[load ? 1 : 0];
	pthread_mutex_lock(&p->lock);
	requests_free(&l->returned);
	unsigned n = 0;
	struct request *r;
	while (n < max && (r = STAILQ_FIRST(&l->finished))) {
		STAILQ_REMOVE_HEAD(&l->finished, link);
		STAILQ_INSERT_TAIL(&l->returned, r, link);
		out[n++] = (struct kvt_pipeline_result){r->id, r->status, r->nfailed, r->failed};
	}
	pthread_mutex_unlock(&p->lock);
	return (int)n;
}

/* Waits on the idle condition until done(p, arg) or the timeout. Lock held. */
static int wait_until(struct kvt_pipeline *p, bool (*done)(const struct kvt_pipeline *, int),
		      int arg, int timeout_ms)
{
	struct timespec until;
	if (timeout_ms >= 0)
		kvt_deadline_ms(&until, (uint64_t)timeout_ms);
	int err = 0;
	while (!done(p, arg) && !err)
		err = timeout_ms < 0 ? pthread_cond_wait(&p->idle, &p->lock)
				     : pthread_cond_timedwait(&p->idle, &p->lock, &until);
	return done(p, arg) ? 0 : -ETIMEDOUT;
}

static bool all_finished(const struct kvt_pipeline *p, int unused)
{
	(void)unused;
	return p->unfinished == 0;
}

static bool has_finished(const struct kvt_pipeline *p, int load)
{
	return !STAILQ_EMPTY(&p->done[load ? 1 : 0].finished);
}

int kvt_pipeline_wait_finished(struct kvt_pipeline *p, int load, int timeout_ms)
{
	pthread_mutex_lock(&p->lock);
	int err = wait_until(p, has_finished, load, timeout_ms);
	pthread_mutex_unlock(&p->lock);
	return err;
}

int kvt_pipeline_drain(struct kvt_pipeline *p, int timeout_ms)
{
	pthread_mutex_lock(&p->lock);
	int err = wait_until(p, all_finished, 0, timeout_ms);
	pthread_mutex_unlock(&p->lock);
	return err;
}

void kvt_pipeline_stats(struct kvt_pipeline *p, struct kvt_pipeline_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->stats;
	pthread_mutex_unlock(&p->lock);
}
