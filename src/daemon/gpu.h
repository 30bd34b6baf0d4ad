/*
 * gpu.h — the daemon's use of CUDA: devices (named by UUID, since indices
 * differ between containers), pinning the L1 arena for DMA, and GPU staging
 * memory that clients export to it (cuda_vmm: a cuMemCreate allocation
 * passed as a POSIX fd; cuda_ipc: a cudaIpcMemHandle_t). IPC mappings are
 * cached by handle with a reference count, because a process may open a
 * handle only once and one close unmaps it for every user.
 *
 * Built against the CUDA runtime when configure found it; otherwise, or
 * with no device or driver, every GPU call returns -KVT_ENOCUDA and host
 * paths run unchanged. Mapping calls run on the event loop thread; the
 * counters are readable from any thread. Every call that reaches the driver
 * first makes the device's primary context current on its thread.
 */
#ifndef KVTD_GPU_H
#define KVTD_GPU_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_id.h"
#include "kvtier/protocol.h"
#include "stat_table.h"


/*
 * Finds the devices. Returns their number (>= 0), or -KVT_ENOCUDA with the
 * reason in why (not built in, no driver, no device). Call once at start.
 */
int gpu_init(char *why, size_t whylen);
/* The devices gpu_init found; 0 before it or when CUDA is unavailable. */
int gpu_device_count(void);
/* Whether this kvtierd was built with CUDA (a build fact; asks no driver). */
bool gpu_built_in(void);
/* The device with this UUID: its index, or -ENODEV (-KVT_ENOCUDA without CUDA). */
int gpu_device_by_uuid(const uint8_t uuid[KVT_UUID_BYTES]);
/* The UUID of device i, formatted as below. */
void gpu_device_uuid(int device, char out[41]);
/* Makes device's primary context current on the calling thread. */
int gpu_use_device(int device);

/*
 * Pins [base, base + size) for DMA (cudaHostRegister on device 0's
 * context; portable to every device). Returns 0, -KVT_ENOCUDA, or -ENOMEM
 * with the driver's words in why.
 */
int gpu_pin_host(void *base, size_t size, char *why, size_t whylen);
void gpu_unpin_host(void *base);

/* Imported GPU memory a staging buffer names. */
struct gpu_mem {
	uint8_t *ptr;          /* device address (unified addressing) */
	uint64_t size;
	int device;
	uint32_t kind;         /* KVT_BUFFER_CUDA_VMM or KVT_BUFFER_CUDA_IPC */
	void *priv;            /* the mapping's owner record */
};

/*
 * Imports fd (from cuMemExportToShareableHandle, POSIX fd type) of size
 * bytes on the device with uuid and maps it. Does not close fd. -EINVAL
 * when fd is not such a handle or size does not match it; -ENODEV.
 */
int gpu_import_vmm(int fd, const uint8_t uuid[KVT_UUID_BYTES], uint64_t size,
		   struct gpu_mem *out);

/*
 * Opens (or reuses) the IPC mapping of handle on the device with uuid; the
 * buffer is [offset, offset + size) of the allocation the handle maps.
 * -EINVAL for a handle that does not open or a range past the allocation.
 */
int gpu_open_ipc(const uint8_t uuid[KVT_UUID_BYTES], const uint8_t handle[KVT_IPC_HANDLE_BYTES],
		 uint64_t offset, uint64_t size, struct gpu_mem *out);

/* Drops m's mapping (unmapped once its last user closes). */
void gpu_close(struct gpu_mem *m);

/* The GPU side's counters and gauges (stat_table.h's shape), written by the loop thread. */
#define GPU_STATS(X) \
	X(mappings_opened, COUNTER, "kvtier_gpu_mappings_opened_total", "", \
	  "GPU staging mappings opened (imports and IPC opens).") \
	X(mappings_closed, COUNTER, "kvtier_gpu_mappings_closed_total", "", \
	  "GPU staging mappings closed.") \
	X(ipc_cache_hits, COUNTER, "kvtier_gpu_ipc_cache_hits_total", "", \
	  "cuda_ipc registrations that reused an open mapping.") \
	X(mappings_open, GAUGE, "kvtier_gpu_mappings_open", "", "GPU staging mappings open.") \
	X(l1_pinned_bytes, GAUGE, "kvtier_l1_pinned_bytes", "", "Bytes of L1 pinned for DMA.")
struct gpu_stats {
	GPU_STATS(STAT_LIVE_FIELD)
	_Atomic uint64_t l1_pin_us;     /* how long pinning took (/v1/stats: l1_pin_seconds) */
};
/* Calls fn with each stat of GPU_STATS and its value now (any thread). */
void gpu_stats_visit(stat_visit_fn fn, void *ctx);
extern struct gpu_stats gpu_stats;

#endif
