/* cudrv.c — see cudrv.h. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "cudrv.h"
#include "kvtier/kvtier.h"

/* The driver ABI these prototypes describe: every entry has been stable since 12.0. */
#define CUDRV_ABI 12000

static struct kvt_cudrv table;
static bool table_ok;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static bool fetch(const char *symbol, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t rc = cudaGetDriverEntryPointByVersion(symbol, fn, CUDRV_ABI, cudaEnableDefault, &q);
	return rc == cudaSuccess && q == cudaDriverEntryPointSuccess && *fn;
}

static void load_table(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return;
	bool ok = true;
#define FETCH(field, symbol) ok = fetch(symbol, (void **)&table.field) && ok
	FETCH(mem_create, "cuMemCreate");
	FETCH(mem_release, "cuMemRelease");
	FETCH(mem_export, "cuMemExportToShareableHandle");
	FETCH(mem_import, "cuMemImportFromShareableHandle");
	FETCH(mem_address_reserve, "cuMemAddressReserve");
	FETCH(mem_address_free, "cuMemAddressFree");
	FETCH(mem_map, "cuMemMap");
	FETCH(mem_unmap, "cuMemUnmap");
	FETCH(mem_set_access, "cuMemSetAccess");
	FETCH(mem_granularity, "cuMemGetAllocationGranularity");
	FETCH(mem_address_range, "cuMemGetAddressRange");
#undef FETCH
	table_ok = ok;
}

const struct kvt_cudrv *kvt_cudrv(int *err)
{
	pthread_once(&table_once, load_table);
	if (!table_ok) {
		*err = -KVT_ENOCUDA;
		return NULL;
	}
	return &table;
}

int kvt_cuda_errno(int rc)
{
	switch (rc) {
	case 0:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

int kvt_cudrv_map(const struct kvt_cudrv *d, CUmemGenericAllocationHandle handle, size_t size,
		  int device, CUdeviceptr *out)
{
	CUdeviceptr ptr = 0;
	CUresult rc = d->mem_address_reserve(&ptr, size, 0, 0, 0);
	if (rc != CUDA_SUCCESS)
		return kvt_cuda_errno(rc);
	rc = d->mem_map(ptr, size, 0, handle, 0);
	if (rc != CUDA_SUCCESS) {
		d->mem_address_free(ptr, size);
		return kvt_cuda_errno(rc);
	}
	CUmemAccessDesc access = {
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	rc = d->mem_set_access(ptr, size, &access, 1);
	if (rc != CUDA_SUCCESS) {
		kvt_cudrv_unmap(d, ptr, size);
		return kvt_cuda_errno(rc);
	}
	*out = ptr;
	return 0;
}

void kvt_cudrv_unmap(const struct kvt_cudrv *d, CUdeviceptr ptr, size_t size)
{
	d->mem_unmap(ptr, size);
	d->mem_address_free(ptr, size);
}
