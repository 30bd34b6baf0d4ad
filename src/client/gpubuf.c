/*
 * gpubuf.c — GPU staging buffers on the client side: allocating them on a
 * device, exporting them to kvtierd and registering them (kvtier.h).
 *
 * cuda_vmm buffers are cuMemCreate allocations exported as a POSIX fd that
 * rides the data-plane socket (SCM_RIGHTS): nothing else need be shared
 * between the containers. cuda_ipc buffers are cudaMalloc memory named by a
 * cudaIpcMemHandle_t plus the offset into the allocation it maps; the
 * daemon must live in another PID (namespace) than the client.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "kvtier/kvtier.h"
#include "kvtier/protocol.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"
#include "wire.h"

static int runtime_errno(cudaError_t rc)
{
	cudaGetLastError();
	return rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver ? -KVT_ENOCUDA
									  : kvt_cuda_errno((int)rc);
}

static int device_uuid(int device, uint8_t uuid[KVT_UUID_BYTES])
{
	struct cudaDeviceProp prop;
	cudaError_t rc = cudaGetDeviceProperties(&prop, device);
	if (rc != cudaSuccess)
		return runtime_errno(rc);
	memcpy(uuid, prop.uuid.bytes, KVT_UUID_BYTES);
	return 0;
}

static int vmm_create(struct kvt_client *c, int device, uint64_t size, struct kvt_gpu_buffer *b)
{
	int err = 0;
	const struct kvt_cudrv *d = kvt_cudrv(&err);
	if (!d)
		return err;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
	};
	size_t gran = 0;
	if (d->mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) || !gran)
		return -EINVAL;
	size = (size + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h;
	CUresult rc = d->mem_create(&h, size, &prop, 0);
	if (rc != CUDA_SUCCESS)
		return kvt_cuda_errno(rc);
	CUdeviceptr ptr = 0;
	int fd = -1;
	struct frame_register reg = {.kind = KVT_BUFFER_CUDA_VMM, .size = size};
	if ((err = kvt_cudrv_map(d, h, size, device, &ptr)))
		goto release;
	if (d->mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) {
		err = -EINVAL;
		goto unmap;
	}
	err = device_uuid(device, reg.device_uuid);
	if (!err)
		err = kvt__buffer_register_frame(c, &reg, fd, &b->index);
	close(fd);
	if (err)
		goto unmap;
	*b = (struct kvt_gpu_buffer){.ptr = (void *)(uintptr_t)ptr, .size = size, .index = b->index,
				     .device = device, .kind = KVT_GPU_VMM, .alloc_handle = h};
	return 0;
unmap:
	kvt_cudrv_unmap(d, ptr, size);
release:
	d->mem_release(h);
	return err;
}

int kvt_buffer_register_cuda_ipc(struct kvt_client *c, void *ptr, uint64_t size, uint32_t *index)
{
	int err = 0;
	const struct kvt_cudrv *d = kvt_cudrv(&err);
	if (!d)
		return err;
	struct cudaPointerAttributes attr;
	cudaError_t rc = cudaPointerGetAttributes(&attr, ptr);
	if (rc != cudaSuccess)
		return runtime_errno(rc);
	if (attr.type != cudaMemoryTypeDevice)
		return -EINVAL;
	CUdeviceptr base;
	size_t alloc_size;
	if (d->mem_address_range(&base, &alloc_size, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
		return -EINVAL;
	cudaIpcMemHandle_t h;
	if ((rc = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base)) != cudaSuccess)
		return runtime_errno(rc);
	struct frame_register reg = {.kind = KVT_BUFFER_CUDA_IPC, .size = size,
				     .offset = (uint64_t)((uintptr_t)ptr - base)};
	if ((err = device_uuid(attr.device, reg.device_uuid)))
		return err;
	memcpy(reg.ipc_handle, h.reserved, KVT_IPC_HANDLE_BYTES);
	return kvt__buffer_register_frame(c, &reg, -1, index);
}

static int ipc_create(struct kvt_client *c, int device, uint64_t size, struct kvt_gpu_buffer *b)
{
	void *ptr;
	cudaError_t rc = cudaMalloc(&ptr, size);
	if (rc != cudaSuccess)
		return runtime_errno(rc);
	int err = kvt_buffer_register_cuda_ipc(c, ptr, size, &b->index);
	if (err) {
		cudaFree(ptr);
		return err;
	}
	*b = (struct kvt_gpu_buffer){.ptr = ptr, .size = size, .index = b->index, .device = device,
				     .kind = KVT_GPU_IPC};
	return 0;
}

int kvt_gpu_buffer_create(struct kvt_client *c, int device, uint64_t size, int kind,
			  struct kvt_gpu_buffer *out)
{
	if (size == 0 || (kind != KVT_GPU_VMM && kind != KVT_GPU_IPC))
		return -EINVAL;
	cudaError_t rc = cudaSetDevice(device);
	if (rc != cudaSuccess)
		return runtime_errno(rc);
	return kind == KVT_GPU_VMM ? vmm_create(c, device, size, out) : ipc_create(c, device, size, out);
}

int kvt_gpu_buffer_destroy(struct kvt_client *c, struct kvt_gpu_buffer *b)
{
	int err = c ? kvt_buffer_unregister(c, b->index) : 0;
	cudaSetDevice(b->device);
	if (b->kind == KVT_GPU_IPC) {
		cudaFree(b->ptr);
	} else {
		int derr;
		const struct kvt_cudrv *d = kvt_cudrv(&derr);
		kvt_cudrv_unmap(d, (CUdeviceptr)(uintptr_t)b->ptr, b->size);
		d->mem_release((CUmemGenericAllocationHandle)b->alloc_handle);
	}
	memset(b, 0, sizeof(*b));
	return err;
}

#else /* !HAVE_CUDA */

int kvt_buffer_register_cuda_ipc(struct kvt_client *c, void *ptr, uint64_t size, uint32_t *index)
{
	(void)c, (void)ptr, (void)size, (void)index;
	return -KVT_ENOCUDA;
}

int kvt_gpu_buffer_create(struct kvt_client *c, int device, uint64_t size, int kind,
			  struct kvt_gpu_buffer *out)
{
	(void)c, (void)device, (void)size, (void)kind, (void)out;
	return -KVT_ENOCUDA;
}

int kvt_gpu_buffer_destroy(struct kvt_client *c, struct kvt_gpu_buffer *b)
{
	(void)c, (void)b;
	return -KVT_ENOCUDA;
}
#endif
