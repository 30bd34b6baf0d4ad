/*
 * kvtier.h — the public API of libkvtier.
 *
 * Owns what every kvtier client and the daemon agree on: version, error codes
 * and kvt_strerror(), size strings, the 16-byte block keys with their prefix
 * chain, and the data-plane client. Every function returning int returns 0
 * (or a count) on success and a negative error code on failure: -errno
 * values, or -KVT_E* below.
 */
#ifndef KVTIER_KVTIER_H
#define KVTIER_KVTIER_H

#include <stddef.h>
#include <stdint.h>

/*
 * Marks the public API: libkvtier is built with -fvisibility=hidden, so only
 * what carries this (and src/client/libkvtier.map lists) is exported.
 */
#if defined(__GNUC__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0

/* The library's version string, e.g. "0.1.0". */
KVT_API const char *kvt_version(void);

/*
 * Errors of kvtier's own, beyond errno. They start far above any errno so a
 * negative return is always one or the other.
 */
enum kvt_errcode {
	KVT_EBASE = 4096,
	KVT_ENSCONFLICT,  /* namespace exists with another block size or TP size */
	KVT_EALLPINNED,   /* no space: every evictable byte is pinned or leased */
	KVT_ENOCUDA,      /* CUDA unavailable: built without it, or no GPU or driver visible */
	KVT_EQUOTA,       /* the namespace is at its L1 quota and all of it is pinned or leased */
	KVT_ENSLIMIT,     /* this client, or its uid, created as many namespaces as it may */
	KVT_ELAST
};

/* A message for an error code; takes err or -err. Never NULL. */
KVT_API const char *kvt_strerror(int err);

/*
 * Where kvtierd listens when run by this user with no --socket or
 * --runtime-dir: /run/kvtier/kvtierd.sock as root, else
 * $XDG_RUNTIME_DIR/kvtier/kvtierd.sock, else /tmp/kvtier-UID/kvtierd.sock.
 * 0, or -ENAMETOOLONG when it does not fit in buf.
 */
KVT_API int kvt_default_socket(char *buf, size_t len);

/*
 * Parses a size: plain bytes ("4096") or a number with a unit, binary
 * ("KiB MiB GiB TiB") or decimal ("KB MB GB TB"), with or without a space
 * ("64MiB", "64 MiB"). Returns 0, -EINVAL for a malformed string or unknown
 * unit, -ERANGE when the value does not fit in 64 bits.
 */
KVT_API int kvt_parse_size(const char *text, uint64_t *bytes);

/*
 * Writes bytes as the largest binary unit that divides it exactly
 * ("1 GiB", "1536 KiB", "4097 B"). Returns the length snprintf would.
 */
KVT_API int kvt_format_size(uint64_t bytes, char *buf, size_t buflen);

/* A block key: an opaque 16-byte digest. */
#define KVT_KEY_BYTES 16
struct kvt_key {
	uint8_t bytes[KVT_KEY_BYTES];
};

/* The seed of the prefix chain hash; part of the on-wire contract. */
#define KVT_CHAIN_SEED UINT64_C(0x6b76746965720001)

/*
 * The prefix chain: key_i = XXH3-128(key_{i-1} || tokens of block i) with
 * KVT_CHAIN_SEED, where the first block has no parent bytes. Tokens are
 * hashed as little-endian int32; the key is XXH3's canonical (big-endian)
 * form of the 128-bit digest. parent may be NULL for the first block.
 */
KVT_API void kvt_key_chain_next(const struct kvt_key *parent, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out);

/*
 * out[i] = the key after parents[i] for the same tokens, for each i < n:
 * the children of many keys by one step in one call (the per-layer-group
 * keys of a prefix's blocks, say, which a binding's loop would make one
 * foreign call each). out may be parents.
 */
KVT_API void kvt_key_chain_each(const struct kvt_key *parents, size_t n, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out);

/*
 * Keys of every full block of block_tokens tokens in tokens[0..ntokens),
 * at most max_keys of them. Returns the number written, or -EINVAL when
 * block_tokens is 0. A trailing partial block gets no key.
 */
KVT_API int kvt_key_chain(const int32_t *tokens, size_t ntokens, size_t block_tokens,
		  struct kvt_key *keys, size_t max_keys);

/* ------------------------------------------------------------------------
 * The data-plane client. A client is one process's connection to kvtierd:
 * one or more lanes (connections) that share its registered buffers. Each
 * lane may be used by one thread at a time; different lanes by different
 * threads. Requests on a lane complete out of order.
 * ------------------------------------------------------------------------ */

struct kvt_client;

struct kvt_client_options {
	const char *socket_path;   /* the daemon's data-plane socket */
	const char *model;         /* namespace: model id (1..255 bytes) */
	const char *cache_salt;    /* namespace: optional salt, NULL for none */
	uint64_t block_bytes;      /* bytes of one rank's part of a block */
	uint16_t tp_size;          /* tensor-parallel size, 1 when none */
	uint16_t rank;             /* this worker's rank, < tp_size */
	int scheduler;             /* nonzero: a scheduler (lookups only) */
	unsigned lanes;            /* connections; 0 means 1 */
	unsigned max_inflight;     /* requests in flight per lane; 0 means 64 */
};

/*
 * Connects every lane and binds it to the namespace. -ECONNREFUSED or
 * -ENOENT when no daemon listens, -KVT_ENSCONFLICT when the namespace exists
 * with another block size or TP size, -EINVAL for bad options.
 */
KVT_API int kvt_client_open(const struct kvt_client_options *opts, struct kvt_client **out);
/* Closes every lane; the daemon releases the client's buffers and leases. */
KVT_API void kvt_client_close(struct kvt_client *c);
KVT_API unsigned kvt_client_lanes(const struct kvt_client *c);
/*
 * The client's session secret as 16 hex digits and a NUL (buf of at least
 * 17 bytes): what POST /v1/buffers names as "session" so a file registered
 * by path belongs to this client. It lets its holder act as this client:
 * hand it only to the daemon's admin. -ENOSPC when buflen < 17.
 */
KVT_API int kvt_client_session(const struct kvt_client *c, char *buf, size_t buflen);

/*
 * Registers a memfd of at least size bytes as a staging buffer; *index names
 * it in requests. The daemon seals it against shrinking. The fd stays the
 * caller's to close.
 */
KVT_API int kvt_buffer_register(struct kvt_client *c, int fd, uint64_t size, uint32_t *index);
/* Creates, maps and registers a size-byte buffer; munmap(*addr, size) frees it. */
KVT_API int kvt_buffer_create(struct kvt_client *c, uint64_t size, void **addr, uint32_t *index);
KVT_API int kvt_buffer_unregister(struct kvt_client *c, uint32_t index);

/* ------------------------------------------------------------------------
 * GPU staging buffers and the KV-cache kernels. They need a CUDA build and a
 * visible GPU; otherwise they return -KVT_ENOCUDA. The daemon copies over
 * PCIe into and out of these buffers and answers once its copy is complete,
 * so no CUDA event crosses processes: sync a gather before its STORE, start
 * a restore after its LOAD's answer.
 * ------------------------------------------------------------------------ */

enum kvt_gpu_kind {
	KVT_GPU_VMM = 2,  /* cuMemCreate, exported as a POSIX fd: needs only the socket */
	KVT_GPU_IPC = 3,  /* cudaMalloc + cudaIpcMemHandle_t: needs distinct PIDs */
};

struct kvt_gpu_buffer {
	void *ptr;                /* device address */
	uint64_t size;            /* bytes (VMM: rounded up to the allocation granularity) */
	uint32_t index;           /* names the buffer in STORE and LOAD */
	int device;               /* CUDA device ordinal in this process */
	int kind;                 /* enum kvt_gpu_kind */
	uint64_t alloc_handle;    /* VMM: the allocation (library-private) */
};

/*
 * Allocates size bytes on device, exports them to the daemon and registers
 * them. -KVT_ENOCUDA when this process or the daemon has no CUDA; -ENODEV
 * when the daemon does not see the device (match NVIDIA_VISIBLE_DEVICES).
 */
KVT_API int kvt_gpu_buffer_create(struct kvt_client *c, int device, uint64_t size, int kind,
			  struct kvt_gpu_buffer *out);
/* Unregisters (when c is not NULL) and frees b; the daemon closes its mapping. */
KVT_API int kvt_gpu_buffer_destroy(struct kvt_client *c, struct kvt_gpu_buffer *b);
/*
 * Registers size bytes at ptr inside memory the caller got from cudaMalloc
 * (legacy CUDA IPC: the daemon opens the allocation's handle once and
 * shares the mapping between registrations). Unregister with
 * kvt_buffer_unregister before freeing the memory.
 */
KVT_API int kvt_buffer_register_cuda_ipc(struct kvt_client *c, void *ptr, uint64_t size, uint32_t *index);

/*
 * Where KV blocks live in a paged cache, per layer. A block in staging is
 * num_layers x planes chunks of chunk_bytes, ordered [layer][plane]; in the
 * cache, chunk (layer, plane) of block id b is at
 *   layer_bases[layer] + plane * plane_stride + b * block_stride.
 * vLLM's per-layer [2][num_blocks][block_tokens][kv_heads][head_dim]:
 * planes 2, chunk_bytes = block_tokens * kv_heads * head_dim * dtype bytes,
 * block_stride = chunk_bytes, plane_stride = num_blocks * chunk_bytes.
 * MLA's latent cache: planes 1. Any dtype: the kernels move bytes.
 */
struct kvt_kv_layout {
	uint32_t num_layers;
	uint32_t planes;
	uint64_t chunk_bytes;
	uint64_t plane_stride;
	uint64_t block_stride;
	void *const *layer_bases; /* device memory: num_layers pointers */
};

/* Bytes of one block in staging: num_layers * planes * chunk_bytes. */
KVT_API uint64_t kvt_kv_block_bytes(const struct kvt_kv_layout *layout);
/*
 * Scatter nblocks blocks from staging (back to back, kvt_kv_block_bytes
 * each) into the cache at block_ids (device memory, nblocks int32), or
 * gather them from the cache into staging; queued on stream (a
 * cudaStream_t, NULL for the default stream). A negative block id skips
 * its block (restore: a block that did not arrive). -EINVAL for a bad
 * layout.
 */
KVT_API int kvt_kv_restore(const struct kvt_kv_layout *layout, const void *staging,
		   const int32_t *block_ids, uint32_t nblocks, void *stream);
KVT_API int kvt_kv_gather(const struct kvt_kv_layout *layout, void *staging, const int32_t *block_ids,
		  uint32_t nblocks, void *stream);

/* One block of a STORE or LOAD. */
struct kvt_block {
	struct kvt_key key;
	uint64_t offset;           /* where the bytes are in the staging buffer */
	uint32_t length;           /* STORE: bytes to store; LOAD: space, then bytes loaded */
	int32_t status;            /* on completion: 0, -ENOENT (missing), ... */
};

/* A prefix lookup: keys in, hits and tiers out. */
struct kvt_lookup {
	const struct kvt_key *keys;
	uint32_t nkeys;
	uint32_t lease_ms;         /* > 0: lease the hits this long; KVT_LEASE_DEFAULT: the daemon's default */
	uint8_t *tiers;            /* nkeys entries: 0 none, 1 L1, 2 L2, 3 L3 */
	uint32_t hits;             /* leading keys present */
	uint64_t lease_id;         /* 0 when nothing was leased */
};

struct kvt_completion {
	uint64_t id;
	int status;
};

/*
 * Asynchronous requests on a lane: 0 and *id, or -EBUSY when the lane has
 * max_inflight requests outstanding (poll first), -E2BIG past the protocol's
 * counts. blocks, lookups and their arrays must stay valid until completion.
 */
KVT_API int kvt_submit_store(struct kvt_client *c, unsigned lane, uint32_t buffer,
		     struct kvt_block *blocks, uint32_t nblocks, uint64_t *id);
KVT_API int kvt_submit_load(struct kvt_client *c, unsigned lane, uint32_t buffer,
		    struct kvt_block *blocks, uint32_t nblocks, uint64_t *id);
KVT_API int kvt_submit_lookup(struct kvt_client *c, unsigned lane, struct kvt_lookup *lookup,
		      uint64_t *id);

/*
 * Completions of a lane, at most max, waiting up to timeout_ms (-1: forever,
 * 0: not at all) for the first. Returns how many, or a negative error when
 * the connection failed (every outstanding request then completes with it).
 */
KVT_API int kvt_poll(struct kvt_client *c, unsigned lane, struct kvt_completion *out, unsigned max,
	     int timeout_ms);
/* Waits for request id of a lane and returns its status; it is not polled again. */
KVT_API int kvt_wait(struct kvt_client *c, unsigned lane, uint64_t id, int timeout_ms);

/* Blocking forms on lane 0. */
KVT_API int kvt_store(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n);
KVT_API int kvt_load(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n);
KVT_API int kvt_lookup(struct kvt_client *c, struct kvt_lookup *lookup);
KVT_API int kvt_release(struct kvt_client *c, uint64_t lease_id);
KVT_API int kvt_ping(struct kvt_client *c);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_KVTIER_H */
