/* codec_frames.c — the requests of codec.h: encoders (libkvtier) and decoders (kvtierd). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "codec.h"

int frame_check_header(const struct wire_hdr *h)
{
	if (h->magic != KVT_PROTO_MAGIC || (h->flags & KVT_FLAG_REPLY))
		return -EPROTO;
	if (h->length > KVT_MAX_FRAME_BYTES)
		return -EMSGSIZE;
	return 0;
}

/* A name of len bytes from r into out; no NUL bytes inside. */
/*
 * Whether p[0, len) is UTF-8 (RFC 3629: no overlong forms, no surrogates, at
 * most U+10FFFF). Written by hand: the codec is shared with libkvtier, which
 * links no library that exports a check.
 */
static bool utf8_valid(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len;) {
		uint8_t c = p[i];
		size_t n = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : (c & 0xf0) == 0xe0 ? 2
			 : c >= 0xf0 && c <= 0xf4 ? 3 : 9;
		if (n == 9 || i + n >= len + (n ? 0 : 1))
			return false;
		uint8_t lo = 0x80, hi = 0xbf; /* the second byte's range */
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
		else if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
		for (size_t k = 1; k <= n; k++)
			if (p[i + k] < (k == 1 ? lo : 0x80) || p[i + k] > (k == 1 ? hi : 0xbf))
				return false;
		i += n + 1;
	}
	return true;
}

/* A name: UTF-8 with no NUL, at most KVT_MAX_NAME bytes. */
static int take_name(struct wire_rd *r, uint16_t len, char *out)
{
	if (len > KVT_MAX_NAME)
		return -EINVAL;
	const uint8_t *p = wire_take(r, len);
	if (!p)
		return -EBADMSG;
	if (memchr(p, '\0', len) || !utf8_valid(p, len))
		return -EINVAL;
	memcpy(out, p, len);
	out[len] = '\0';
	return 0;
}

size_t frame_encode_hello(uint8_t *p, const struct frame_hello *in)
{
	size_t mlen = strlen(in->model), slen = strlen(in->salt);
	struct wire_wr w = {p, KVT_HELLO_BYTES + mlen + slen, false};
	wire_put_u16(&w, in->version);
	wire_put_u8(&w, in->role);
	wire_put_u8(&w, in->flags);
	wire_put_u16(&w, in->tp_size);
	wire_put_u16(&w, in->rank);
	wire_put_u64(&w, in->block_bytes);
	wire_put_u64(&w, in->session);
	wire_put_u16(&w, (uint16_t)mlen);
	wire_put_u16(&w, (uint16_t)slen);
	wire_put_u32(&w, 0);
	wire_put_bytes(&w, in->model, mlen);
	wire_put_bytes(&w, in->salt, slen);
	return KVT_HELLO_BYTES + mlen + slen;
}

int frame_decode_hello(const uint8_t *p, size_t n, struct frame_hello *out)
{
	struct wire_rd r = {p, n, false};
	out->version = wire_u16(&r);
	out->role = wire_u8(&r);
	out->flags = wire_u8(&r);
	out->tp_size = wire_u16(&r);
	out->rank = wire_u16(&r);
	out->block_bytes = wire_u64(&r);
	out->session = wire_u64(&r);
	uint16_t model_len = wire_u16(&r), salt_len = wire_u16(&r);
	(void)wire_u32(&r);
	if (r.bad)
		return -EBADMSG;
	int err = take_name(&r, model_len, out->model);
	if (!err)
		err = take_name(&r, salt_len, out->salt);
	if (err)
		return err;
	if (r.left)
		return -EBADMSG;
	if (out->role != KVT_ROLE_WORKER && out->role != KVT_ROLE_SCHEDULER)
		return -EINVAL;
	if (out->role == KVT_ROLE_WORKER && out->rank >= out->tp_size)
		return -EINVAL;
	return 0;
}

/* The bytes a REGISTER of kind takes. */
static size_t register_bytes(uint32_t kind)
{
	return kind == KVT_BUFFER_CUDA_IPC   ? KVT_REGISTER_IPC_BYTES
	       : kind == KVT_BUFFER_CUDA_VMM ? KVT_REGISTER_VMM_BYTES
					     : KVT_REGISTER_BYTES;
}

size_t frame_encode_register(uint8_t *p, const struct frame_register *in)
{
	size_t len = register_bytes(in->kind);
	struct wire_wr w = {p, len, false};
	wire_put_u64(&w, in->size);
	wire_put_u32(&w, in->kind);
	wire_put_u32(&w, 0);
	if (in->kind == KVT_BUFFER_CUDA_VMM || in->kind == KVT_BUFFER_CUDA_IPC)
		wire_put_bytes(&w, in->device_uuid, KVT_UUID_BYTES);
	if (in->kind == KVT_BUFFER_CUDA_IPC) {
		wire_put_bytes(&w, in->ipc_handle, KVT_IPC_HANDLE_BYTES);
		wire_put_u64(&w, in->offset);
	}
	return len;
}

int frame_decode_register(const uint8_t *p, size_t n, struct frame_register *out)
{
	struct wire_rd r = {p, n, false};
	out->size = wire_u64(&r);
	out->kind = wire_u32(&r);
	(void)wire_u32(&r);
	if (out->kind == KVT_BUFFER_CUDA_VMM || out->kind == KVT_BUFFER_CUDA_IPC)
		wire_bytes(&r, out->device_uuid, KVT_UUID_BYTES);
	if (out->kind == KVT_BUFFER_CUDA_IPC) {
		wire_bytes(&r, out->ipc_handle, KVT_IPC_HANDLE_BYTES);
		out->offset = wire_u64(&r);
	}
	return r.bad || r.left ? -EBADMSG : 0;
}

size_t frame_encode_u32(uint8_t *p, uint32_t v)
{
	struct wire_wr w = {p, 8, false};
	wire_put_u32(&w, v);
	wire_put_u32(&w, 0);
	return 8;
}

int frame_decode_u32(const uint8_t *p, size_t n, uint32_t *out)
{
	struct wire_rd r = {p, n, false};
	*out = wire_u32(&r);
	(void)wire_u32(&r);
	return r.bad || r.left ? -EBADMSG : 0;
}

size_t frame_encode_u64(uint8_t *p, uint64_t v)
{
	struct wire_wr w = {p, 8, false};
	wire_put_u64(&w, v);
	return 8;
}

int frame_decode_u64(const uint8_t *p, size_t n, uint64_t *out)
{
	struct wire_rd r = {p, n, false};
	*out = wire_u64(&r);
	return r.bad || r.left ? -EBADMSG : 0;
}

size_t frame_encode_lookup(uint8_t *p, const struct kvt_lookup *lk)
{
	size_t len = 8 + (size_t)lk->nkeys * KVT_KEY_BYTES;
	struct wire_wr w = {p, len, false};
	wire_put_u32(&w, lk->nkeys);
	wire_put_u32(&w, lk->lease_ms);
	wire_put_bytes(&w, lk->keys, (size_t)lk->nkeys * KVT_KEY_BYTES);
	return len;
}

int frame_decode_lookup(const uint8_t *p, size_t n, struct frame_lookup *out)
{
	struct wire_rd r = {p, n, false};
	out->nkeys = wire_u32(&r);
	out->lease_ms = wire_u32(&r);
	if (r.bad)
		return -EBADMSG;
	if (out->nkeys > KVT_MAX_KEYS)
		return -E2BIG;
	/* struct kvt_key is 16 bytes with alignment 1: the payload is the array. */
	out->keys = (const struct kvt_key *)wire_take(&r, (size_t)out->nkeys * KVT_KEY_BYTES);
	return r.bad || r.left ? -EBADMSG : 0;
}

size_t frame_encode_blocks(uint8_t *p, uint32_t buffer, const struct kvt_block *blocks,
			   uint32_t n)
{
	size_t len = 8 + (size_t)n * KVT_BLOCK_ENTRY_BYTES;
	struct wire_wr w = {p, len, false};
	wire_put_u32(&w, buffer);
	wire_put_u32(&w, n);
	for (uint32_t i = 0; i < n; i++) {
		wire_put_bytes(&w, blocks[i].key.bytes, KVT_KEY_BYTES);
		wire_put_u64(&w, blocks[i].offset);
		wire_put_u32(&w, blocks[i].length);
		wire_put_u32(&w, 0);
	}
	return len;
}

int frame_decode_blocks(const uint8_t *p, size_t n, struct frame_blocks *out)
{
	struct wire_rd r = {p, n, false};
	out->buffer = wire_u32(&r);
	out->nblocks = wire_u32(&r);
	if (r.bad)
		return -EBADMSG;
	if (out->nblocks > KVT_MAX_BLOCKS)
		return -E2BIG;
	out->entries = wire_take(&r, (size_t)out->nblocks * KVT_BLOCK_ENTRY_BYTES);
	return r.bad || r.left ? -EBADMSG : 0;
}

void frame_block_at(const struct frame_blocks *b, uint32_t i, struct frame_block *out)
{
	struct wire_rd r = {b->entries + (size_t)i * KVT_BLOCK_ENTRY_BYTES,
			    KVT_BLOCK_ENTRY_BYTES, false};
	memcpy(out->key.bytes, wire_take(&r, KVT_KEY_BYTES), KVT_KEY_BYTES);
	out->offset = wire_u64(&r);
	out->length = wire_u32(&r);
}
