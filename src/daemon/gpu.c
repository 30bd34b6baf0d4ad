/* gpu.c — see gpu.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "gpu.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

int gpu_device_count(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess) {
		snprintf(why, whylen, "%s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
		return -ENODEV;
	}
	return n;
}
#else
int gpu_device_count(char *why, size_t whylen)
{
	snprintf(why, whylen, "kvtierd was built without CUDA");
	return -ENOTSUP;
}
#endif

bool gpu_built_in(void)
{
#ifdef HAVE_CUDA
	return true;
#else
	return false;
#endif
}
