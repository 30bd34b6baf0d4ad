/*
 * frame.h — decoding and validation of data-plane request payloads
 * (include/kvtier/protocol.h). Pure functions over bytes: no sockets, no
 * state, so the fuzz target drives them directly. Every count and length is
 * checked against the payload and the protocol limits; a malformed payload
 * is -EBADMSG, a count over a limit -E2BIG, a bad field -EINVAL.
 */
#ifndef KVTD_FRAME_H
#define KVTD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvtier.h"
#include "kvtier/protocol.h"
#include "wire.h"

struct frame_hello {
	uint16_t version;
	uint8_t role;
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

int frame_decode_hello(const uint8_t *p, size_t n, struct frame_hello *out);
int frame_decode_register(const uint8_t *p, size_t n, struct frame_register *out);
int frame_decode_u32(const uint8_t *p, size_t n, uint32_t *out);  /* UNREGISTER */
int frame_decode_u64(const uint8_t *p, size_t n, uint64_t *out);  /* RELEASE */
int frame_decode_lookup(const uint8_t *p, size_t n, struct frame_lookup *out);
int frame_decode_blocks(const uint8_t *p, size_t n, struct frame_blocks *out);
/* Entry i of a decoded STORE or LOAD (i < nblocks). */
void frame_block_at(const struct frame_blocks *b, uint32_t i, struct frame_block *out);

#endif
