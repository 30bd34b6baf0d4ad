/*
 * wire.h — bounds-checked little-endian reading and writing of protocol
 * payloads, shared by the daemon and libkvtier. A reader that runs past its
 * end sets `bad` and yields zeros, so a decoder checks once at the end.
 */
#ifndef KVT_WIRE_H
#define KVT_WIRE_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvtier/protocol.h"

struct wire_hdr {
	uint32_t magic;
	uint16_t op;
	uint16_t flags;
	uint32_t length;
	int32_t status;
	uint64_t id;
};

struct wire_rd {
	const uint8_t *p;
	size_t left;
	bool bad;
};

struct wire_wr {
	uint8_t *p;
	size_t left;
	bool bad;
};

static inline const uint8_t *wire_take(struct wire_rd *r, size_t n)
{
	if (r->bad || r->left < n) {
		r->bad = true;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

#define WIRE_GET(bits)                                                 \
	static inline uint##bits##_t wire_u##bits(struct wire_rd *r)   \
	{                                                              \
		uint##bits##_t v = 0;                                  \
		const uint8_t *p = wire_take(r, sizeof(v));            \
		if (p)                                                 \
			memcpy(&v, p, sizeof(v));                      \
		return le##bits##toh(v);                               \
	}
WIRE_GET(16)
WIRE_GET(32)
WIRE_GET(64)
#undef WIRE_GET

/* Copies n bytes out; zeros when the payload is short (r->bad is set). */
static inline void wire_bytes(struct wire_rd *r, void *dst, size_t n)
{
	const uint8_t *p = wire_take(r, n);
	if (p)
		memcpy(dst, p, n);
	else
		memset(dst, 0, n);
}

static inline uint8_t wire_u8(struct wire_rd *r)
{
	const uint8_t *p = wire_take(r, 1);
	return p ? *p : 0;
}

static inline uint8_t *wire_put(struct wire_wr *w, size_t n)
{
	if (w->bad || w->left < n) {
		w->bad = true;
		return NULL;
	}
	uint8_t *p = w->p;
	w->p += n;
	w->left -= n;
	return p;
}

#define WIRE_PUT(bits)                                                         \
	static inline void wire_put_u##bits(struct wire_wr *w, uint##bits##_t v) \
	{                                                                      \
		uint8_t *p = wire_put(w, sizeof(v));                           \
		v = htole##bits(v);                                            \
		if (p)                                                         \
			memcpy(p, &v, sizeof(v));                              \
	}
WIRE_PUT(16)
WIRE_PUT(32)
WIRE_PUT(64)
#undef WIRE_PUT

static inline void wire_put_u8(struct wire_wr *w, uint8_t v)
{
	uint8_t *p = wire_put(w, 1);
	if (p)
		*p = v;
}

static inline void wire_put_bytes(struct wire_wr *w, const void *src, size_t n)
{
	uint8_t *p = wire_put(w, n);
	if (p && n)
		memcpy(p, src, n);
}

static inline void wire_hdr_encode(uint8_t *out, const struct wire_hdr *h)
{
	struct wire_wr w = {out, KVT_HDR_BYTES, false};
	wire_put_u32(&w, h->magic);
	wire_put_u16(&w, h->op);
	wire_put_u16(&w, h->flags);
	wire_put_u32(&w, h->length);
	wire_put_u32(&w, (uint32_t)h->status);
	wire_put_u64(&w, h->id);
}

static inline void wire_hdr_decode(const uint8_t *in, struct wire_hdr *h)
{
	struct wire_rd r = {in, KVT_HDR_BYTES, false};
	h->magic = wire_u32(&r);
	h->op = wire_u16(&r);
	h->flags = wire_u16(&r);
	h->length = wire_u32(&r);
	h->status = (int32_t)wire_u32(&r);
	h->id = wire_u64(&r);
}

#endif
