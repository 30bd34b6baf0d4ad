/*
 * cuda_ceiling.h — the GPU benchmarks' ceiling: block-sized cudaMemcpyAsync
 * copies on one stream, timed from an idle stream to the last copy's end.
 * Include after cuda_runtime_api.h and bench_clock.h.
 */
#ifndef KVT_CUDA_CEILING_H
#define KVT_CUDA_CEILING_H

#include <stdint.h>

/*
 * Seconds that repeats rounds of n copies of block bytes (block i of src to
 * block i of dst) take on s, or -1 when a CUDA call fails.
 */
static inline double time_block_copies(void *dst, const void *src, uint64_t block, uint32_t n,
				       enum cudaMemcpyKind kind, cudaStream_t s, unsigned repeats)
{
	if (cudaStreamSynchronize(s) != cudaSuccess)
		return -1;
	double t0 = now_s();
	for (unsigned r = 0; r < repeats; r++)
		for (uint32_t i = 0; i < n; i++)
			if (cudaMemcpyAsync((char *)dst + i * block, (const char *)src + i * block,
					    block, kind, s) != cudaSuccess)
				return -1;
	if (cudaStreamSynchronize(s) != cudaSuccess)
		return -1;
	return now_s() - t0;
}

#endif
