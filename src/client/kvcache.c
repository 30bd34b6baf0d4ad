/*
 * kvcache.c — restore and gather between a staging buffer and a paged KV
 * cache on the GPU (kvtier.h: struct kvt_kv_layout). Launches the kernel of
 * kv_kernels.cu, loaded once from the embedded fatbin, on the caller's stream.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "client_internal.h"

#include "kvtier/kvtier.h"

uint64_t kvt_kv_block_bytes(const struct kvt_kv_layout *l)
{
	return (uint64_t)l->num_layers * l->planes * l->chunk_bytes;
}

/* The host twin of kv_kernels.cu, chunk for chunk. */
void kvt__kv_copy_host(const struct kvt_kv_layout *l, uint8_t *staging, const int32_t *ids,
		       uint32_t nblocks, int to_cache)
{
	uint8_t *const *layers = (uint8_t *const *)l->layer_bases;
	for (uint32_t j = 0; j < nblocks; j++) {
		if (ids[j] < 0)
			continue;
		for (uint32_t layer = 0; layer < l->num_layers; layer++)
			for (uint32_t plane = 0; plane < l->planes; plane++) {
				uint8_t *k = layers[layer] + plane * l->plane_stride +
					     (uint64_t)ids[j] * l->block_stride;
				uint8_t *s = staging + (((uint64_t)j * l->num_layers + layer) *
							l->planes + plane) * l->chunk_bytes;
				memcpy(to_cache ? k : s, to_cache ? s : k, l->chunk_bytes);
			}
	}
}

static int check_layout(const struct kvt_kv_layout *l, const void *staging,
			const int32_t *block_ids)
{
	if (!l || !staging || !block_ids || !l->layer_bases || l->num_layers == 0 ||
	    l->planes == 0 || l->chunk_bytes == 0)
		return -EINVAL;
	return 0;
}

#if defined(HAVE_CUDA) && defined(KVT_HAVE_KERNELS)
#include <cuda_runtime_api.h>

#include "kv_kernels_fatbin.h"

#define THREADS_PER_CHUNK 512

static cudaKernel_t kv_copy;
static int load_err;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_kernels(void)
{
	cudaLibrary_t lib;
	if (cudaLibraryLoadData(&lib, kvt_kv_fatbin, NULL, NULL, 0, NULL, NULL, 0) != cudaSuccess ||
	    cudaLibraryGetKernel(&kv_copy, lib, "kvt_kv_copy") != cudaSuccess) {
		cudaGetLastError();
		load_err = -KVT_ENOCUDA;
	}
}

static int kv_launch(const struct kvt_kv_layout *l, void *staging, const int32_t *block_ids,
		     uint32_t nblocks, void *stream, int to_cache)
{
	int err = check_layout(l, staging, block_ids);
	if (err || nblocks == 0)
		return err;
	pthread_once(&load_once, load_kernels);
	if (load_err)
		return load_err;
	unsigned nlayers = l->num_layers, planes = l->planes;
	unsigned long long chunk = l->chunk_bytes, plane_stride = l->plane_stride,
			   block_stride = l->block_stride;
	void *args[] = {&staging, (void *)&l->layer_bases, &block_ids, &nlayers, &planes,
			&chunk, &plane_stride, &block_stride, &to_cache};
	uint64_t chunks = (uint64_t)nblocks * nlayers * planes;
	if (chunks > 0x7fffffffu)
		return -E2BIG;
	cudaError_t rc = cudaLaunchKernel((const void *)kv_copy, (dim3){(unsigned)chunks, 1, 1},
					  (dim3){THREADS_PER_CHUNK, 1, 1}, args, 0, (cudaStream_t)stream);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		return -EIO;
	}
	return 0;
}

int kvt_kv_restore(const struct kvt_kv_layout *l, const void *staging, const int32_t *block_ids,
		   uint32_t nblocks, void *stream)
{
	return kv_launch(l, (void *)staging, block_ids, nblocks, stream, 1);
}

int kvt_kv_gather(const struct kvt_kv_layout *l, void *staging, const int32_t *block_ids,
		  uint32_t nblocks, void *stream)
{
	return kv_launch(l, staging, block_ids, nblocks, stream, 0);
}

#else /* no CUDA, or no nvcc to build the kernels */

int kvt_kv_restore(const struct kvt_kv_layout *l, const void *staging, const int32_t *block_ids,
		   uint32_t nblocks, void *stream)
{
	(void)nblocks, (void)stream;
	int err = check_layout(l, staging, block_ids);
	return err ? err : -KVT_ENOCUDA;
}

int kvt_kv_gather(const struct kvt_kv_layout *l, void *staging, const int32_t *block_ids,
		  uint32_t nblocks, void *stream)
{
	(void)nblocks, (void)stream;
	int err = check_layout(l, staging, block_ids);
	return err ? err : -KVT_ENOCUDA;
}
#endif
