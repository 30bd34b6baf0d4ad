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

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0

/* The library's version string, e.g. "0.1.0". */
const char *kvt_version(void);

/*
 * Errors of kvtier's own, beyond errno. They start far above any errno so a
 * negative return is always one or the other.
 */
enum kvt_errcode {
	KVT_EBASE = 4096,
	KVT_ENSCONFLICT,  /* namespace exists with another block size or TP size */
	KVT_EALLPINNED,   /* no space: every evictable byte is pinned or leased */
	KVT_ELAST
};

/* A message for an error code; takes err or -err. Never NULL. */
const char *kvt_strerror(int err);

/*
 * Parses a size: plain bytes ("4096") or a number with a unit, binary
 * ("KiB MiB GiB TiB") or decimal ("KB MB GB TB"), with or without a space
 * ("64MiB", "64 MiB"). Returns 0, -EINVAL for a malformed string or unknown
 * unit, -ERANGE when the value does not fit in 64 bits.
 */
int kvt_parse_size(const char *text, uint64_t *bytes);

/*
 * Writes bytes as the largest binary unit that divides it exactly
 * ("1 GiB", "1536 KiB", "4097 B"). Returns the length snprintf would.
 */
int kvt_format_size(uint64_t bytes, char *buf, size_t buflen);

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
void kvt_key_chain_next(const struct kvt_key *parent, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out);

/*
 * Keys of every full block of block_tokens tokens in tokens[0..ntokens),
 * at most max_keys of them. Returns the number written, or -EINVAL when
 * block_tokens is 0. A trailing partial block gets no key.
 */
int kvt_key_chain(const int32_t *tokens, size_t ntokens, size_t block_tokens,
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
int kvt_client_open(const struct kvt_client_options *opts, struct kvt_client **out);
/* Closes every lane; the daemon releases the client's buffers and leases. */
void kvt_client_close(struct kvt_client *c);
unsigned kvt_client_lanes(const struct kvt_client *c);

/*
 * Registers a memfd of at least size bytes as a staging buffer; *index names
 * it in requests. The daemon seals it against shrinking. The fd stays the
 * caller's to close.
 */
int kvt_buffer_register(struct kvt_client *c, int fd, uint64_t size, uint32_t *index);
/* Creates, maps and registers a size-byte buffer; munmap(*addr, size) frees it. */
int kvt_buffer_create(struct kvt_client *c, uint64_t size, void **addr, uint32_t *index);
int kvt_buffer_unregister(struct kvt_client *c, uint32_t index);

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
	uint8_t *tiers;            /* nkeys entries: 0 none, 1 L1, 2 L2 */
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
int kvt_submit_store(struct kvt_client *c, unsigned lane, uint32_t buffer,
		     struct kvt_block *blocks, uint32_t nblocks, uint64_t *id);
int kvt_submit_load(struct kvt_client *c, unsigned lane, uint32_t buffer,
		    struct kvt_block *blocks, uint32_t nblocks, uint64_t *id);
int kvt_submit_lookup(struct kvt_client *c, unsigned lane, struct kvt_lookup *lookup,
		      uint64_t *id);

/*
 * Completions of a lane, at most max, waiting up to timeout_ms (-1: forever,
 * 0: not at all) for the first. Returns how many, or a negative error when
 * the connection failed (every outstanding request then completes with it).
 */
int kvt_poll(struct kvt_client *c, unsigned lane, struct kvt_completion *out, unsigned max,
	     int timeout_ms);
/* Waits for request id of a lane and returns its status; it is not polled again. */
int kvt_wait(struct kvt_client *c, unsigned lane, uint64_t id, int timeout_ms);

/* Blocking forms on lane 0. */
int kvt_store(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n);
int kvt_load(struct kvt_client *c, uint32_t buffer, struct kvt_block *blocks, uint32_t n);
int kvt_lookup(struct kvt_client *c, struct kvt_lookup *lookup);
int kvt_release(struct kvt_client *c, uint64_t lease_id);
int kvt_ping(struct kvt_client *c);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_KVTIER_H */
