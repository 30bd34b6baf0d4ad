/*
 * kv_kernels.cu — libkvtier's device code: one kernel that moves KV blocks
 * between a staging buffer and a paged KV cache, both ways. Built into a
 * fatbin that kvcache.c embeds and loads at run time, so the library itself
 * stays C and links no CUDA code of its own.
 *
 * Staging holds blocks back to back; inside a block, chunks are ordered
 * [layer][plane], each chunk_bytes long. The cache holds, per layer, planes
 * plane_stride apart and blocks block_stride apart (vLLM's per-layer
 * [2][num_blocks][block_tokens][kv_heads][head_dim]). One thread block moves
 * one chunk: 16-byte words when everything is 16-byte aligned, bytes if not.
 * A negative block id skips its block.
 */
#include <stdint.h>

extern "C" __global__ void kvt_kv_copy(char *staging, char *const *layers, const int32_t *block_ids,
				       unsigned nlayers, unsigned planes, unsigned long long chunk,
				       unsigned long long plane_stride,
				       unsigned long long block_stride, int to_cache)
{
	unsigned long long c = blockIdx.x; /* = (j * nlayers + layer) * planes + plane */
	unsigned plane = (unsigned)(c % planes);
	unsigned layer = (unsigned)((c / planes) % nlayers);
	unsigned long long j = c / ((unsigned long long)planes * nlayers);
	if (block_ids[j] < 0)
		return; /* a block that did not arrive: its cache block stays as it was */
	char *s = staging + c * chunk;
	char *k = layers[layer] + plane * plane_stride + (unsigned long long)block_ids[j] * block_stride;
	char *dst = to_cache ? k : s;
	const char *src = to_cache ? s : k;
	if (((uintptr_t)dst | (uintptr_t)src | chunk) % 16 == 0) {
		uint4 *d = (uint4 *)dst;
		const uint4 *r = (const uint4 *)src;
		for (unsigned long long i = threadIdx.x; i < chunk / 16; i += blockDim.x)
			d[i] = r[i];
	} else {
		for (unsigned long long i = threadIdx.x; i < chunk; i += blockDim.x)
			dst[i] = src[i];
	}
}
