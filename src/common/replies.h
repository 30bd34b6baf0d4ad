/*
 * replies.h — decoding the payloads of the daemon's replies, libkvtier's
 * side of the data-plane codec (docs/protocol.md): each reply checked
 * against the request it answers before anything of it is believed, so a
 * broken or hostile daemon can make a request fail (-EBADMSG) but never
 * make the client write past what it asked for. Pure functions, any thread;
 * fuzzed by tests/fuzz/fuzz_replies.c.
 */
#ifndef KVT_REPLIES_H
#define KVT_REPLIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvtier.h"

/*
 * A STORE (load false) or LOAD reply for the n blocks asked: sets each
 * block's status, and a loaded block's length. 0, or -EBADMSG (nothing
 * written) unless the payload is exactly {u32 n, u32 0, n × {i32 status,
 * u32 length}} with every status 0 or negative and every loaded length
 * within the space the block asked with.
 */
int kvt__decode_transfer_reply(const uint8_t *p, size_t len, bool load, struct kvt_block *blocks,
			       uint32_t n);

/*
 * A LOOKUP reply into lk (its nkeys and tiers as asked): hits, lease id and
 * the tiers. 0, or -EBADMSG (nothing written) unless it is exactly
 * {u32 hits, u32 nkeys, u64 lease, nkeys × u8 tier} for lk's nkeys with
 * hits <= nkeys and every tier 0, 1 or 2.
 */
int kvt__decode_lookup_reply(const uint8_t *p, size_t len, struct kvt_lookup *lk);

/* A fixed-size reply (HELLO, REGISTER) into out: 0, or -EBADMSG unless exactly want bytes. */
int kvt__decode_fixed_reply(const uint8_t *p, size_t len, uint8_t *out, size_t want);

#endif
