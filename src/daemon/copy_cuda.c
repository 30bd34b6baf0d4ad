/*
 * copy_cuda.c — the CUDA copy engine (copy.h): cudaMemcpyAsync between
 * pinned L1 slots and GPU staging buffers on per-device non-blocking
 * streams. A batch keeps to one stream (chosen by its lane), so the copies
 * of different lanes overlap while a request's own copies run in order;
 * copies that are adjacent on both sides (L1 slots next to each other, and
 * blocks next to each other in staging) are coalesced into one call, which
 * saves the ~2.5 us of CPU each call costs. Sealing a batch enqueues a host
 * function behind its copies that hands it back through the shared done
 * list: the event loop never waits on the GPU.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "copy.h"
#include "kvtier/kvtier.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu.h"

struct cuda_engine {
	unsigned ndevices, nstreams;
	cudaStream_t *streams; /* ndevices x nstreams */
};

static cudaStream_t batch_stream(struct copy_engine *e, const struct copy_batch *b)
{
	struct cuda_engine *ce = e->priv;
	return ce->streams[(unsigned)b->device * ce->nstreams + b->lane % ce->nstreams];
}

static void flush_run(struct copy_engine *e, struct copy_batch *b)
{
	if (!b->run_len)
		return;
	gpu_use_device(b->device);
	cudaError_t rc = cudaMemcpyAsync(b->run_dst, b->run_src, b->run_len, cudaMemcpyDefault,
					 batch_stream(e, b));
	if (rc != cudaSuccess) {
		cudaGetLastError();
		atomic_store(&b->failed, -EIO);
	}
	b->run_len = 0;
}

static void cuda_copy(struct copy_engine *e, struct copy_batch *b, void *dst, const void *src,
		      size_t len)
{
	if (b->run_len && b->run_dst + b->run_len == dst && b->run_src + b->run_len == src) {
		b->run_len += len;
		return;
	}
	flush_run(e, b);
	b->run_dst = dst;
	b->run_src = src;
	b->run_len = len;
}

/* On a CUDA driver thread once the stream reached it: no CUDA calls allowed here. */
static void CUDART_CB batch_done(void *arg)
{
	struct copy_batch *b = arg;
	copy_batch_finish_one(b->engine, b);
}

static void cuda_seal(struct copy_engine *e, struct copy_batch *b)
{
	flush_run(e, b);
	b->engine = e;
	if (cudaLaunchHostFunc(batch_stream(e, b), batch_done, b) != cudaSuccess) {
		cudaGetLastError();
		atomic_store(&b->failed, -EIO);
		copy_batch_finish_one(e, b);
	}
}

static void cuda_destroy(struct copy_engine *e)
{
	struct cuda_engine *ce = e->priv;
	for (unsigned i = 0; i < ce->ndevices * ce->nstreams; i++) {
		if (!ce->streams[i])
			continue;
		gpu_use_device((int)(i / ce->nstreams));
		cudaStreamSynchronize(ce->streams[i]);
		cudaStreamDestroy(ce->streams[i]);
	}
	free(ce->streams);
	free(ce);
}

static const struct copy_engine_ops cuda_ops = {
	.name = "cudaMemcpyAsync",
	.copy = cuda_copy,
	.seal = cuda_seal,
	.destroy = cuda_destroy,
};

int copy_engine_cuda_init(struct copy_engine *e, unsigned ndevices, unsigned streams_per_device)
{
	if (ndevices == 0)
		return -KVT_ENOCUDA;
	struct cuda_engine *ce = calloc(1, sizeof(*ce));
	if (!ce)
		return -ENOMEM;
	ce->ndevices = ndevices;
	ce->nstreams = streams_per_device ? streams_per_device : 1;
	ce->streams = calloc((size_t)ndevices * ce->nstreams, sizeof(*ce->streams));
	int err = ce->streams ? copy_engine_base_init(e, &cuda_ops) : -ENOMEM;
	if (err) {
		free(ce->streams);
		free(ce);
		return err;
	}
	e->priv = ce;
	for (unsigned i = 0; i < ndevices * ce->nstreams; i++) {
		gpu_use_device((int)(i / ce->nstreams));
		if (cudaStreamCreateWithFlags(&ce->streams[i], cudaStreamNonBlocking) != cudaSuccess) {
			cudaGetLastError();
			copy_engine_destroy(e);
			return -ENODEV;
		}
	}
	return 0;
}

#else /* !HAVE_CUDA */

int copy_engine_cuda_init(struct copy_engine *e, unsigned ndevices, unsigned streams_per_device)
{
	(void)e, (void)ndevices, (void)streams_per_device;
	return -KVT_ENOCUDA;
}
#endif
