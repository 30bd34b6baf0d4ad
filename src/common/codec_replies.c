/* codec_replies.c — the replies of codec.h: encoders (kvtierd) and decoders (libkvtier). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "kvtier/protocol.h"
#include "codec.h"
#include "wire.h"

size_t reply_transfer_bytes(uint32_t n)
{
	return 8 + (size_t)n * KVT_BLOCK_STATUS_BYTES;
}

void reply_encode_transfer_head(uint8_t *p, uint32_t n)
{
	struct wire_wr w = {p, 8, false};
	wire_put_u32(&w, n);
	wire_put_u32(&w, 0);
}

void reply_encode_transfer_block(uint8_t *p, uint32_t i, int32_t status, uint32_t length)
{
	struct wire_wr w = {p + 8 + (size_t)i * KVT_BLOCK_STATUS_BYTES, KVT_BLOCK_STATUS_BYTES, false};
	wire_put_u32(&w, (uint32_t)status);
	wire_put_u32(&w, length);
}

int reply_decode_transfer(const uint8_t *p, size_t len, bool load, struct kvt_block *blocks,
			       uint32_t n)
{
	struct wire_rd r = {p, len, false};
	if (wire_u32(&r) != n || wire_u32(&r) != 0 || r.bad ||
	    r.left != (size_t)n * KVT_BLOCK_STATUS_BYTES)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) { /* all checked before any is written */
		int32_t status = (int32_t)wire_u32(&r);
		uint32_t length = wire_u32(&r);
		if (status > 0 || (load && status == 0 && length > blocks[i].length))
			return -EBADMSG;
	}
	r = (struct wire_rd){p + 8, len - 8, false};
	for (uint32_t i = 0; i < n; i++) {
		blocks[i].status = (int32_t)wire_u32(&r);
		uint32_t length = wire_u32(&r);
		if (load && blocks[i].status == 0)
			blocks[i].length = length;
	}
	return 0;
}

size_t reply_encode_lookup_head(uint8_t *p, uint32_t hits, uint32_t nkeys, uint64_t lease)
{
	struct wire_wr w = {p, REPLY_LOOKUP_HEAD_BYTES, false};
	wire_put_u32(&w, hits);
	wire_put_u32(&w, nkeys);
	wire_put_u64(&w, lease);
	return REPLY_LOOKUP_HEAD_BYTES;
}

int reply_decode_lookup(const uint8_t *p, size_t len, struct kvt_lookup *lk)
{
	struct wire_rd r = {p, len, false};
	uint32_t hits = wire_u32(&r), n = wire_u32(&r);
	uint64_t lease = wire_u64(&r);
	if (r.bad || n != lk->nkeys || hits > n || r.left != n)
		return -EBADMSG;
	const uint8_t *tiers = wire_take(&r, n);
	for (uint32_t i = 0; i < n; i++)
		if (tiers[i] > KVT_TIER_MAX)
			return -EBADMSG;
	memcpy(lk->tiers, tiers, n);
	lk->hits = hits;
	lk->lease_id = lease;
	return 0;
}

int reply_decode_fixed(const uint8_t *p, size_t len, uint8_t *out, size_t want)
{
	if (len != want)
		return -EBADMSG;
	memcpy(out, p, want);
	return 0;
}

size_t reply_encode_hello(uint8_t *p, const struct reply_hello *in)
{
	struct wire_wr w = {p, KVT_HELLO_REPLY_BYTES, false};
	wire_put_u64(&w, in->session);
	wire_put_u32(&w, in->ns_id);
	wire_put_u32(&w, in->max_blocks);
	wire_put_u32(&w, in->max_keys);
	wire_put_u32(&w, in->max_frame_bytes);
	return KVT_HELLO_REPLY_BYTES;
}

int reply_decode_hello(const uint8_t *p, size_t len, struct reply_hello *out)
{
	if (len != KVT_HELLO_REPLY_BYTES)
		return -EBADMSG;
	struct wire_rd r = {p, len, false};
	out->session = wire_u64(&r);
	out->ns_id = wire_u32(&r);
	out->max_blocks = wire_u32(&r);
	out->max_keys = wire_u32(&r);
	out->max_frame_bytes = wire_u32(&r);
	return 0;
}

size_t reply_encode_register(uint8_t *p, uint32_t index)
{
	return frame_encode_u32(p, index); /* the same shape as UNREGISTER's request */
}

int reply_decode_register(const uint8_t *p, size_t len, uint32_t *index)
{
	return frame_decode_u32(p, len, index);
}
