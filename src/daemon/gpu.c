/* gpu.c — see gpu.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "gpu.h"
#include "owner_stats.h"
#include "kvtier/kvtier.h"
#include "log.h"
#include "kvtier/protocol.h"

struct gpu_stats gpu_stats;

#define STAT_INC(f) STATS_ADD(&gpu_stats, f, 1)
#define STAT_DEC(f) STATS_ADD(&gpu_stats, f, -(uint64_t)1)

#define STAT_LIVE struct gpu_stats
static const struct stat_def gpu_stat_defs[] = {GPU_STATS(STAT_DEF)};
#undef STAT_LIVE

void gpu_stats_visit(stat_visit_fn fn, void *ctx)
{
	stats_visit(gpu_stat_defs, sizeof(gpu_stat_defs) / sizeof(gpu_stat_defs[0]), &gpu_stats, fn,
		    ctx);
}

bool gpu_built_in(void)
{
#ifdef HAVE_CUDA
	return true;
#else
	return false;
#endif
}

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"

#define MAX_DEVICES 64

static int ndevices;
static uint8_t device_uuids[MAX_DEVICES][KVT_UUID_BYTES];
static const struct kvt_cudrv *drv;

int gpu_init(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess) {
		snprintf(why, whylen, "%s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
		return -KVT_ENOCUDA;
	}
	int err = 0;
	if (n > 0 && !(drv = kvt_cudrv(&err))) {
		snprintf(why, whylen, "the CUDA driver lacks the virtual memory API");
		return err;
	}
	for (int i = 0; i < n && i < MAX_DEVICES; i++) {
		struct cudaDeviceProp prop;
		if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
			memcpy(device_uuids[i], prop.uuid.bytes, KVT_UUID_BYTES);
	}
	ndevices = n < MAX_DEVICES ? n : MAX_DEVICES;
	if (n == 0)
		snprintf(why, whylen, "no CUDA device visible");
	return ndevices;
}

int gpu_device_count(void)
{
	return ndevices;
}

void gpu_device_uuid(int device, char out[41])
{
	gpu_uuid_format(device_uuids[device], out);
}

int gpu_device_by_uuid(const uint8_t uuid[KVT_UUID_BYTES])
{
	if (!ndevices)
		return -KVT_ENOCUDA;
	for (int i = 0; i < ndevices; i++)
		if (memcmp(device_uuids[i], uuid, KVT_UUID_BYTES) == 0)
			return i;
	return -ENODEV;
}

int gpu_use_device(int device)
{
	/* cudaSetDevice initialises the primary context and makes it current. */
	return cudaSetDevice(device) == cudaSuccess ? 0 : -ENODEV;
}

int gpu_pin_host(void *base, size_t size, char *why, size_t whylen)
{
	if (!ndevices)
		return -KVT_ENOCUDA;
	gpu_use_device(0);
	cudaError_t rc = cudaHostRegister(base, size, cudaHostRegisterPortable);
	if (rc != cudaSuccess) {
		snprintf(why, whylen, "%s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
		cudaGetLastError(); /* not sticky: clear it for later calls */
		return -ENOMEM;
	}
	return 0;
}

void gpu_unpin_host(void *base)
{
	gpu_use_device(0);
	cudaHostUnregister(base);
}

/* One mapping, shared by every buffer that names it (IPC) or owned by one (VMM). */
struct mapping {
	LIST_ENTRY(mapping) link;  /* ipc_mappings (IPC mappings only) */
	uint32_t kind;
	int device;
	unsigned users;
	uint8_t *base;           /* the whole mapping */
	uint64_t size;
	CUmemGenericAllocationHandle handle;            /* VMM */
	uint8_t ipc_handle[KVT_IPC_HANDLE_BYTES];       /* IPC: the cache key */
};

/* Open IPC mappings (loop thread). */
static LIST_HEAD(, mapping) ipc_mappings = LIST_HEAD_INITIALIZER(ipc_mappings);

static void mapping_opened(struct gpu_mem *out, struct mapping *m, uint64_t offset,
			   uint64_t size)
{
	m->users++;
	*out = (struct gpu_mem){.ptr = m->base + offset, .size = size, .device = m->device,
				.kind = m->kind, .priv = m};
	STAT_INC(mappings_opened);
	STAT_INC(mappings_open);
}

static int device_for(const uint8_t uuid[KVT_UUID_BYTES])
{
	int dev = gpu_device_by_uuid(uuid);
	return dev < 0 ? dev : gpu_use_device(dev) ? -ENODEV : dev;
}

int gpu_import_vmm(int fd, const uint8_t uuid[KVT_UUID_BYTES], uint64_t size,
		   struct gpu_mem *out)
{
	int dev = device_for(uuid);
	if (dev < 0)
		return dev;
	struct mapping *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	CUresult rc = drv->mem_import(&m->handle, (void *)(intptr_t)fd,
				      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (rc != CUDA_SUCCESS) {
		free(m);
		return -EINVAL;
	}
	CUdeviceptr ptr;
	int err = kvt_cudrv_map(drv, m->handle, size, dev, &ptr);
	if (err) { /* most often: size is not the allocation's */
		drv->mem_release(m->handle);
		free(m);
		return err == -ENOMEM ? err : -EINVAL;
	}
	m->kind = KVT_BUFFER_CUDA_VMM;
	m->device = dev;
	m->base = (uint8_t *)(uintptr_t)ptr;
	m->size = size;
	mapping_opened(out, m, 0, size);
	return 0;
}

static struct mapping *ipc_find(const uint8_t handle[KVT_IPC_HANDLE_BYTES], int dev)
{
	struct mapping *m;
	LIST_FOREACH(m, &ipc_mappings, link)
		if (m->device == dev && memcmp(m->ipc_handle, handle, KVT_IPC_HANDLE_BYTES) == 0)
			return m;
	return NULL;
}

static int ipc_open(const uint8_t handle[KVT_IPC_HANDLE_BYTES], int dev, struct mapping **out)
{
	struct mapping *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	cudaIpcMemHandle_t h;
	memcpy(h.reserved, handle, sizeof(h.reserved));
	void *base;
	cudaError_t rc = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		free(m);
		log_warn("cuda_ipc: cannot open a handle: %s; its allocation must be alive, and the "
			 "worker and kvtierd must have distinct PIDs (in a pod: shareProcessNamespace: "
			 "true), or use cuda_vmm buffers", cudaGetErrorString(rc));
		return -EINVAL;
	}
	CUdeviceptr range_base;
	size_t range_size;
	if (drv->mem_address_range(&range_base, &range_size, (CUdeviceptr)(uintptr_t)base)) {
		cudaIpcCloseMemHandle(base);
		free(m);
		return -EINVAL;
	}
	m->kind = KVT_BUFFER_CUDA_IPC;
	m->device = dev;
	m->base = base;
	m->size = range_size - ((uintptr_t)base - range_base);
	memcpy(m->ipc_handle, handle, KVT_IPC_HANDLE_BYTES);
	LIST_INSERT_HEAD(&ipc_mappings, m, link);
	*out = m;
	return 0;
}


int gpu_open_ipc(const uint8_t uuid[KVT_UUID_BYTES], const uint8_t handle[KVT_IPC_HANDLE_BYTES],
		 uint64_t offset, uint64_t size, struct gpu_mem *out)
{
	int dev = device_for(uuid);
	if (dev < 0)
		return dev;
	struct mapping *m = ipc_find(handle, dev);
	if (m) {
		STAT_INC(ipc_cache_hits);
	} else {
		int err = ipc_open(handle, dev, &m);
		if (err)
			return err;
	}
	if (size == 0 || offset > m->size || size > m->size - offset) {
		if (!m->users) {
			LIST_REMOVE(m, link);
			cudaIpcCloseMemHandle(m->base);
			free(m);
		}
		return -EINVAL;
	}
	mapping_opened(out, m, offset, size);
	return 0;
}

void gpu_close(struct gpu_mem *g)
{
	struct mapping *m = g->priv;
	STAT_INC(mappings_closed);
	STAT_DEC(mappings_open);
	if (--m->users)
		return;
	gpu_use_device(m->device);
	if (m->kind == KVT_BUFFER_CUDA_IPC) {
		LIST_REMOVE(m, link);
		cudaIpcCloseMemHandle(m->base);
	} else {
		kvt_cudrv_unmap(drv, (CUdeviceptr)(uintptr_t)m->base, m->size);
		drv->mem_release(m->handle);
	}
	free(m);
}

#else /* !HAVE_CUDA */

int gpu_init(char *why, size_t whylen)
{
	snprintf(why, whylen, "kvtierd was built without CUDA");
	return -KVT_ENOCUDA;
}

int gpu_device_count(void)
{
	return 0;
}

void gpu_device_uuid(int device, char out[41])
{
	(void)device;
	out[0] = '\0';
}

int gpu_device_by_uuid(const uint8_t uuid[KVT_UUID_BYTES])
{
	(void)uuid;
	return -KVT_ENOCUDA;
}

int gpu_use_device(int device)
{
	(void)device;
	return -KVT_ENOCUDA;
}

int gpu_pin_host(void *base, size_t size, char *why, size_t whylen)
{
	(void)base;
	(void)size;
	snprintf(why, whylen, "kvtierd was built without CUDA");
	return -KVT_ENOCUDA;
}

void gpu_unpin_host(void *base)
{
	(void)base;
}

int gpu_import_vmm(int fd, const uint8_t uuid[KVT_UUID_BYTES], uint64_t size,
		   struct gpu_mem *out)
{
	(void)fd, (void)uuid, (void)size, (void)out;
	return -KVT_ENOCUDA;
}

int gpu_open_ipc(const uint8_t uuid[KVT_UUID_BYTES], const uint8_t handle[KVT_IPC_HANDLE_BYTES],
		 uint64_t offset, uint64_t size, struct gpu_mem *out)
{
	(void)uuid, (void)handle, (void)offset, (void)size, (void)out;
	return -KVT_ENOCUDA;
}

void gpu_close(struct gpu_mem *m)
{
	(void)m;
}
#endif
