/*
 * protocol.h — the kvtier data-plane wire format (docs/protocol.md).
 *
 * A stream of frames over a Unix socket. Every frame is a 24-byte header and
 * `length` bytes of payload; every integer is little-endian. A request and
 * its reply carry the same id; replies may come in any order. A reply's
 * status is 0 or a negative error code (kvt_strerror).
 */
#ifndef KVTIER_PROTOCOL_H
#define KVTIER_PROTOCOL_H

/* The highest tier a LOOKUP reply names. */
#define KVT_TIER_MAX 3

#include <stdint.h>

#define KVT_PROTO_MAGIC 0x3154564bu /* "KVT1" as little-endian bytes */
#define KVT_PROTO_VERSION 1

#define KVT_HDR_BYTES 24
/* Header: u32 magic, u16 op, u16 flags, u32 length, i32 status, u64 id. */

#define KVT_FLAG_REPLY 0x0001

enum kvt_op {
	KVT_OP_HELLO = 1,      /* bind the connection to a namespace and a client */
	KVT_OP_PING = 2,       /* empty both ways */
	KVT_OP_REGISTER = 3,   /* a staging buffer; its fd rides with SCM_RIGHTS */
	KVT_OP_UNREGISTER = 4,
	KVT_OP_LOOKUP = 5,     /* a prefix chain of keys */
	KVT_OP_RELEASE = 6,    /* a lease taken by LOOKUP */
	KVT_OP_STORE = 7,      /* staging buffer -> L1 */
	KVT_OP_LOAD = 8,       /* L1 -> staging buffer */
	KVT_OP_MAX = 8
};

enum kvt_role {
	KVT_ROLE_WORKER = 0,     /* stores and loads its own rank's parts */
	KVT_ROLE_SCHEDULER = 1,  /* lookups only */
};

enum kvt_buffer_kind {
	KVT_BUFFER_SHM = 1,      /* a memfd or /dev/shm file, mapped shared */
	KVT_BUFFER_CUDA_VMM = 2, /* cuMemCreate memory exported as a POSIX fd (SCM_RIGHTS) */
	KVT_BUFFER_CUDA_IPC = 3, /* a cudaIpcMemHandle_t of the caller's cudaMalloc memory */
};

/* LOOKUP's lease_ms asking for the daemon's default lease (policy lease_default_ms). */
#define KVT_LEASE_DEFAULT 0xffffffffu

/* Limits every daemon enforces; HELLO's reply repeats them. */
#define KVT_MAX_FRAME_BYTES (1u << 20)
#define KVT_MAX_KEYS 4096      /* keys in one LOOKUP */
#define KVT_MAX_BLOCKS 4096    /* blocks in one STORE or LOAD */
#define KVT_MAX_NAME 255       /* model id and cache salt bytes */
#define KVT_MAX_BUFFERS 256    /* staging buffers per client */

/*
 * Payloads (offsets in bytes):
 *
 * HELLO     req: u16 version, u8 role, u8 flags (KVT_HELLO_*), u16 tp_size, u16 rank,
 *                u64 block_bytes, u64 session (0: new client; else join it
 *                as another lane), u16 model_len, u16 salt_len, u32 0,
 *                model bytes, salt bytes                       (32 + names)
 *           rep: u64 session, u32 namespace id, u32 max_blocks, u32 max_keys,
 *                u32 max_frame_bytes                            (24)
 * PING      req: empty                      rep: empty
 * REGISTER  req: u64 size, u32 kind, u32 0, then by kind:
 *                shm:      nothing; one fd (SCM_RIGHTS)              (16)
 *                cuda_vmm: 16-byte device UUID; one fd (SCM_RIGHTS)  (32)
 *                cuda_ipc: 16-byte device UUID, 64-byte IPC handle,
 *                          u64 offset of the buffer in the allocation (104)
 *           rep: u32 buffer index, u32 0                           (8)
 * UNREGISTER req: u32 buffer index, u32 0   rep: empty
 * LOOKUP    req: u32 nkeys, u32 lease_ms, nkeys x 16-byte key
 *           rep: u32 hits, u32 nkeys, u64 lease id (0: none), nkeys x u8 tier
 *                (0 none, 1 L1, 2 L2, 3 L3: at most KVT_TIER_MAX)
 * RELEASE   req: u64 lease id               rep: empty
 * STORE, LOAD req: u32 buffer index, u32 nblocks, nblocks x
 *                { 16-byte key, u64 offset, u32 length, u32 0 }     (8 + 32 n)
 *           rep: u32 nblocks, u32 0, nblocks x { i32 status, u32 length }
 */
#define KVT_HELLO_BYTES 32
/*
 * HELLO flags. KVT_HELLO_TIER3: the client reads tier 3 in LOOKUP replies;
 * a connection without it (a libkvtier older than L3, which rejects a tier
 * above 2) is told 2 for a block in L3, which it loads the same way. Bits it
 * does not know the daemon ignores.
 */
#define KVT_HELLO_TIER3 0x01
#define KVT_HELLO_REPLY_BYTES 24
#define KVT_UUID_BYTES 16        /* a CUDA device UUID */
#define KVT_IPC_HANDLE_BYTES 64  /* a cudaIpcMemHandle_t */
#define KVT_REGISTER_BYTES 16
#define KVT_REGISTER_VMM_BYTES 32
#define KVT_REGISTER_IPC_BYTES 104
#define KVT_BLOCK_ENTRY_BYTES 32
#define KVT_BLOCK_STATUS_BYTES 8

#endif
