/*
 * pipeline.h — libkvtier's request-level load/store pipeline: what a
 * connector (vLLM's KV connector, say) drives from its scheduler step.
 *
 * A pipeline owns a fixed staging pool, allocated once: `depth` buffers of
 * `buffer_blocks` blocks each, GPU memory (GPU mode) or shared memory (host
 * mode), each with its own connection (lane) to kvtierd so batches never
 * queue behind each other. Requests name blocks by key and by block id in
 * the KV cache the layout describes. A progress thread cuts requests into
 * batches at block boundaries (several small requests may share a batch),
 * dispatches them FIFO as soon as a staging buffer is free, bounded by the
 * pool depth and max_inflight requests, and finishes each batch when
 * kvtierd answers: a LOAD's blocks are restored into the cache from staging
 * (while other buffers' LOADs are in flight), a STORE's were gathered into
 * staging before it was sent. A request is finished when every batch
 * holding any of its blocks is; a block that failed (missing, I/O error,
 * the daemon gone) fails only its own request, which still finishes.
 * Nothing on this path allocates.
 */
#ifndef KVTIER_PIPELINE_H
#define KVTIER_PIPELINE_H

#include <stdint.h>

#include "kvtier/kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_pipeline;

struct kvt_pipeline_event;
typedef void (*kvt_pipeline_trace_fn)(void *ctx, const struct kvt_pipeline_event *ev);

struct kvt_pipeline_options {
	struct kvt_client_options client;  /* lanes is set to depth + 1 */
	int gpu;                    /* 1: GPU staging and kernels; 0: shared memory and memcpy */
	int device;                 /* GPU mode: the CUDA device */
	int gpu_kind;               /* GPU mode: KVT_GPU_VMM (0 means it) or KVT_GPU_IPC */
	uint32_t depth;             /* staging buffers, >= 2; 0 means 2 */
	uint32_t buffer_blocks;     /* blocks per staging buffer, 1..KVT_MAX_BLOCKS */
	uint32_t max_inflight;      /* requests with blocks in flight; 0 means no limit but depth */
	struct kvt_kv_layout layout; /* the KV cache; host pointers in host mode; in GPU mode
					the layer_bases array may be host or device memory
					(a host array is copied to the device at open) */
	kvt_pipeline_trace_fn trace; /* optional: called on the progress thread */
	void *trace_ctx;
	/*
	 * Cache blocks per kvtier block (0 means 1): each key names that many
	 * blocks of the layout, side by side in staging, so client.block_bytes
	 * is kvt_kv_block_bytes(layout) times this (a connector's chunk).
	 */
	uint32_t ids_per_block;
};

/* A request: keys and the KV cache block ids their blocks go to or come from. */
struct kvt_transfer {
	uint64_t req_id;            /* the caller's; unique among unfinished requests */
	const struct kvt_key *keys;
	const int32_t *block_ids;   /* host memory: nblocks x ids_per_block, a key's together */
	uint32_t nblocks;
};

/* A finished request. */
struct kvt_pipeline_result {
	uint64_t req_id;
	int status;                 /* 0, or the first error of a failed block */
	uint32_t nfailed;           /* blocks not transferred */
	const uint32_t *failed;     /* their indexes in the request, ascending; valid until the next
				       kvt_pipeline_finished call of the same direction */
};

/* What the trace hook sees (tests and debugging). */
enum kvt_pipeline_event_type { KVT_PL_DISPATCH = 1, KVT_PL_COMPLETE = 2 };
struct kvt_pipeline_event {
	enum kvt_pipeline_event_type type;
	int load;
	uint32_t buffer;            /* staging buffer index (its lane is buffer + 1) */
	uint64_t batch;             /* batch sequence number, from 0 in dispatch order */
	uint32_t nblocks;
	uint32_t nrequests;         /* requests with blocks in the batch */
	uint64_t first_req;         /* the first of them */
	uint32_t active_requests;   /* requests in flight after this event */
	uint32_t busy_buffers;
};

struct kvt_pipeline_stats {
	uint64_t batches, requests_finished, requests_failed, blocks_failed;
	uint64_t bytes_loaded, bytes_stored;
	uint32_t max_active_requests, max_busy_buffers; /* high-water marks */
};

/*
 * Connects (depth lanes), allocates and registers the staging pool and
 * starts the progress thread. -EINVAL for bad options, -KVT_ENOCUDA for GPU
 * mode without CUDA, or what kvt_client_open returns.
 */
KVT_API int kvt_pipeline_open(const struct kvt_pipeline_options *o, struct kvt_pipeline **out);
/* Drains (waits for every request), stops and frees everything. */
KVT_API void kvt_pipeline_close(struct kvt_pipeline *p);
/*
 * The pipeline's client, for lookups and leases on lane 0, which is the
 * caller's alone (the pool's buffers have lanes 1..depth); one thread at a
 * time, as for any lane.
 */
KVT_API struct kvt_client *kvt_pipeline_client(struct kvt_pipeline *p);

/*
 * Queues a request; keys and block ids are copied. -EINVAL for an empty or
 * oversized request, -EEXIST when req_id is already unfinished in that
 * direction, -ENOMEM.
 */
KVT_API int kvt_pipeline_submit_load(struct kvt_pipeline *p, const struct kvt_transfer *t);
KVT_API int kvt_pipeline_submit_store(struct kvt_pipeline *p, const struct kvt_transfer *t);

/* Finished loads (load 1) or stores (load 0), at most max, oldest first. */
KVT_API int kvt_pipeline_finished(struct kvt_pipeline *p, int load, struct kvt_pipeline_result *out,
			  unsigned max);
/*
 * Waits until a finished load (load 1) or store (0) waits to be collected,
 * up to timeout_ms (-1: forever). 0, or -ETIMEDOUT.
 */
KVT_API int kvt_pipeline_wait_finished(struct kvt_pipeline *p, int load, int timeout_ms);
/*
 * Waits until every submitted request has finished, up to timeout_ms (-1:
 * forever). 0, or -ETIMEDOUT.
 */
KVT_API int kvt_pipeline_drain(struct kvt_pipeline *p, int timeout_ms);
KVT_API void kvt_pipeline_stats(struct kvt_pipeline *p, struct kvt_pipeline_stats *out);

#ifdef __cplusplus
}
#endif
#endif
