/*
 * codec.h — the data-plane protocol's payloads (include/kvtier/protocol.h,
 * docs/protocol.md), one encode/decode pair per op and direction: requests
 * (frame_*: the client encodes, the daemon decodes) in codec_frames.c,
 * replies (reply_*: the daemon encodes, the client decodes) in
 * codec_replies.c. Pure functions over bytes, any thread: no sockets, no
 * state, so the fuzz targets (fuzz_frame, fuzz_replies) drive the decoders
 * directly.
 *
 * Decoders trust nothing: every count and length is checked against the
 * payload and the protocol limits. A request that is malformed is -EBADMSG,
 * a count over a limit -E2BIG, a bad field -EINVAL. A reply is checked
 * against the request it answers before anything of it is believed, so a
 * broken or hostile daemon can make a request fail (-EBADMSG) but never
 * make the client write past what it asked for. Encoders write into room
 * the caller sized (the *_BYTES of protocol.h) and return the bytes written.
 */
#ifndef KVT_CODEC_H
#define KVT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvtier.h"
#include "kvtier/protocol.h"
#include "wire.h"

struct frame_hello {
	uint16_t version;
	uint8_t role;
	uint8_t flags;            /* KVT_HELLO_* */
	uint16_t tp_size;
	uint16_t rank;
	uint64_t block_bytes;
	uint64_t session;
	char model[KVT_MAX_NAME + 1];
	char salt[KVT_MAX_NAME + 1];
};

struct frame_register {
	uint64_t size;
	uint32_t kind;
	uint8_t device_uuid[KVT_UUID_BYTES];       /* GPU kinds */
	uint8_t ipc_handle[KVT_IPC_HANDLE_BYTES];  /* cuda_ipc */
	uint64_t offset;                           /* cuda_ipc: in the allocation */
};

struct frame_lookup {
	uint32_t nkeys;
	uint32_t lease_ms;
	const struct kvt_key *keys;   /* points into the payload */
};

struct frame_blocks {
	uint32_t buffer;
	uint32_t nblocks;
	const uint8_t *entries;       /* nblocks x KVT_BLOCK_ENTRY_BYTES */
};

struct frame_block {
	struct kvt_key key;
	uint64_t offset;
	uint32_t length;
};

/* Checks a header: -EPROTO for a wrong magic or a reply flag on a request,
 * -EMSGSIZE for a payload over KVT_MAX_FRAME_BYTES. The op is not checked. */
int frame_check_header(const struct wire_hdr *h);

/* --- requests --- */

/* HELLO: KVT_HELLO_BYTES plus the names' lengths. */
size_t frame_encode_hello(uint8_t *p, const struct frame_hello *in);
int frame_decode_hello(const uint8_t *p, size_t n, struct frame_hello *out);
/* REGISTER: KVT_REGISTER_BYTES, _VMM_BYTES or _IPC_BYTES by kind. */
size_t frame_encode_register(uint8_t *p, const struct frame_register *in);
int frame_decode_register(const uint8_t *p, size_t n, struct frame_register *out);
/* UNREGISTER's buffer index: 8 bytes. */
size_t frame_encode_u32(uint8_t *p, uint32_t v);
int frame_decode_u32(const uint8_t *p, size_t n, uint32_t *out);
/* RELEASE's lease id: 8 bytes. */
size_t frame_encode_u64(uint8_t *p, uint64_t v);
int frame_decode_u64(const uint8_t *p, size_t n, uint64_t *out);
/* LOOKUP: 8 + nkeys * KVT_KEY_BYTES. */
size_t frame_encode_lookup(uint8_t *p, const struct kvt_lookup *lk);
int frame_decode_lookup(const uint8_t *p, size_t n, struct frame_lookup *out);
/* STORE and LOAD: 8 + n * KVT_BLOCK_ENTRY_BYTES. */
size_t frame_encode_blocks(uint8_t *p, uint32_t buffer, const struct kvt_block *blocks,
			   uint32_t n);
int frame_decode_blocks(const uint8_t *p, size_t n, struct frame_blocks *out);
/* Entry i of a decoded STORE or LOAD (i < nblocks). */
void frame_block_at(const struct frame_blocks *b, uint32_t i, struct frame_block *out);

/* --- replies --- */

struct reply_hello {
	uint64_t session;
	uint32_t ns_id;
	uint32_t max_blocks;
	uint32_t max_keys;
	uint32_t max_frame_bytes;
};

/* HELLO's reply: KVT_HELLO_REPLY_BYTES. */
size_t reply_encode_hello(uint8_t *p, const struct reply_hello *in);
int reply_decode_hello(const uint8_t *p, size_t len, struct reply_hello *out);
/* REGISTER's reply, the buffer index: 8 bytes. */
size_t reply_encode_register(uint8_t *p, uint32_t index);
int reply_decode_register(const uint8_t *p, size_t len, uint32_t *index);

/*
 * LOOKUP's reply: 16 header bytes, then nkeys tier bytes, which the caller
 * writes at p + REPLY_LOOKUP_HEAD_BYTES (l1_lookup fills them in place).
 */
#define REPLY_LOOKUP_HEAD_BYTES 16
size_t reply_encode_lookup_head(uint8_t *p, uint32_t hits, uint32_t nkeys, uint64_t lease);
/*
 * Into lk (its nkeys and tiers as asked): hits, lease id and the tiers. 0,
 * or -EBADMSG (nothing written) unless it is exactly {u32 hits, u32 nkeys,
 * u64 lease, nkeys x u8 tier} for lk's nkeys with hits <= nkeys and every
 * tier 0, 1 or 2.
 */
int reply_decode_lookup(const uint8_t *p, size_t len, struct kvt_lookup *lk);

/* STORE's and LOAD's reply for n blocks: reply_transfer_bytes(n), head then each block. */
size_t reply_transfer_bytes(uint32_t n);
void reply_encode_transfer_head(uint8_t *p, uint32_t n);
void reply_encode_transfer_block(uint8_t *p, uint32_t i, int32_t status, uint32_t length);
/*
 * A STORE (load false) or LOAD reply for the n blocks asked: sets each
 * block's status, and a loaded block's length. 0, or -EBADMSG (nothing
 * written) unless the payload is exactly {u32 n, u32 0, n x {i32 status,
 * u32 length}} with every status 0 or negative and every loaded length
 * within the space the block asked with.
 */
int reply_decode_transfer(const uint8_t *p, size_t len, bool load, struct kvt_block *blocks,
			  uint32_t n);

/* A fixed-size reply into out: 0, or -EBADMSG unless exactly want bytes. */
int reply_decode_fixed(const uint8_t *p, size_t len, uint8_t *out, size_t want);

#endif
