/*
 * cudrv.h — the CUDA driver API entry points kvtier uses (virtual memory
 * management, address ranges), fetched through the runtime.
 *
 * Neither the daemon nor libkvtier links libcuda: a binary built with CUDA
 * must start on a machine with no driver and run its host paths there. The
 * runtime hands out driver entry points when a driver exists, so the table
 * is filled on first use and stays unset (-KVT_ENOCUDA) otherwise. Only
 * built with CUDA; callers include it under HAVE_CUDA.
 */
#ifndef KVT_CUDRV_H
#define KVT_CUDRV_H

#include <cuda.h>

struct kvt_cudrv {
	__typeof__(cuMemCreate) *mem_create;
	__typeof__(cuMemRelease) *mem_release;
	__typeof__(cuMemExportToShareableHandle) *mem_export;
	__typeof__(cuMemImportFromShareableHandle) *mem_import;
	__typeof__(cuMemAddressReserve) *mem_address_reserve;
	__typeof__(cuMemAddressFree) *mem_address_free;
	__typeof__(cuMemMap) *mem_map;
	__typeof__(cuMemUnmap) *mem_unmap;
	__typeof__(cuMemSetAccess) *mem_set_access;
	__typeof__(cuMemGetAllocationGranularity) *mem_granularity;
	__typeof__(cuMemGetAddressRange) *mem_address_range;
};

/* The table, or NULL when no driver answers (then *err is -KVT_ENOCUDA). */
const struct kvt_cudrv *kvt_cudrv(int *err);

/* Maps a CUDA runtime or driver result to a negative errno for callers. */
int kvt_cuda_errno(int rc);

/*
 * Maps [ptr, ptr + size) of handle on device for read and write, reserving
 * the address range; *out gets its start. Undone by kvt_cudrv_unmap.
 */
int kvt_cudrv_map(const struct kvt_cudrv *d, CUmemGenericAllocationHandle handle, size_t size,
		  int device, CUdeviceptr *out);
void kvt_cudrv_unmap(const struct kvt_cudrv *d, CUdeviceptr ptr, size_t size);

#endif
