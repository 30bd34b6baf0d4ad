/* l2fmt.c — see l2fmt.h. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "l2fmt.h"
#include "ns.h"
#include "wire.h"

/* Bytes of each header before its checksum. */
#define REGION_BODY 40
#define RECORD_BODY 64

static void seal(uint8_t *block, size_t body)
{
	struct wire_wr w = {block + body, 8, false};
	wire_put_u64(&w, XXH3_64bits(block, body));
}

/* Checks magic, checksum and version; leaves r positioned after the version. */
static int open_header(const uint8_t *block, size_t body, uint64_t magic, struct wire_rd *r)
{
	struct wire_rd sum = {block + body, 8, false};
	*r = (struct wire_rd){block, body, false};
	if (wire_u64(r) != magic || wire_u64(&sum) != XXH3_64bits(block, body))
		return -EBADMSG;
	return wire_u32(r) == L2FMT_VERSION ? 0 : -EPROTO;
}

void l2fmt_region_encode(uint8_t *block, const struct l2fmt_region *r)
{
	memset(block, 0, L2FMT_BLOCK);
	struct wire_wr w = {block, REGION_BODY, false};
	wire_put_u64(&w, L2FMT_REGION_MAGIC);
	wire_put_u32(&w, L2FMT_VERSION);
	wire_put_u32(&w, L2FMT_BLOCK);
	wire_put_u64(&w, r->region_size);
	wire_put_u32(&w, r->region_index);
	wire_put_u32(&w, 0);
	wire_put_u64(&w, r->seq);
	seal(block, REGION_BODY);
}

int l2fmt_region_decode(const uint8_t *block, struct l2fmt_region *r)
{
	struct wire_rd rd;
	int err = open_header(block, REGION_BODY, L2FMT_REGION_MAGIC, &rd);
	if (err)
		return err;
	if (wire_u32(&rd) != L2FMT_BLOCK)
		return -EPROTO;
	r->region_size = wire_u64(&rd);
	r->region_index = wire_u32(&rd);
	uint32_t reserved = wire_u32(&rd);
	r->seq = wire_u64(&rd);
	return r->seq && !reserved ? 0 : -EBADMSG;
}

void l2fmt_record_encode(uint8_t *block, const struct l2fmt_record *r)
{
	memset(block, 0, L2FMT_BLOCK);
	struct wire_wr w = {block, RECORD_BODY, false};
	wire_put_u64(&w, L2FMT_RECORD_MAGIC);
	wire_put_u32(&w, L2FMT_VERSION);
	wire_put_u16(&w, r->rank);
	wire_put_u16(&w, r->tp_size);
	wire_put_u64(&w, r->region_seq);
	wire_put_u64(&w, r->ns_digest);
	wire_put_bytes(&w, r->key.bytes, KVT_KEY_BYTES);
	wire_put_u32(&w, r->length);
	wire_put_u32(&w, r->flags);
	wire_put_u64(&w, r->data_checksum);
	seal(block, RECORD_BODY);
}

int l2fmt_record_decode(const uint8_t *block, struct l2fmt_record *r)
{
	struct wire_rd rd;
	int err = open_header(block, RECORD_BODY, L2FMT_RECORD_MAGIC, &rd);
	if (err)
		return err;
	r->rank = wire_u16(&rd);
	r->tp_size = wire_u16(&rd);
	r->region_seq = wire_u64(&rd);
	r->ns_digest = wire_u64(&rd);
	memcpy(r->key.bytes, wire_take(&rd, KVT_KEY_BYTES), KVT_KEY_BYTES);
	r->length = wire_u32(&rd);
	r->flags = wire_u32(&rd);
	r->data_checksum = wire_u64(&rd);
	if (r->tp_size == 0 || r->tp_size > KVT_TP_MAX || r->rank >= r->tp_size || r->length == 0 ||
	    (r->flags & ~(L2FMT_RECORD_DROPPED | L2FMT_RECORD_MAC)))
		return -EBADMSG;
	return 0;
}
