/*
 * l2fmt.h — the L2 on-disk format (docs/l2-format.md): the header block at
 * the start of each region and the header block in front of each record.
 * Encoding, decoding and validation only; no I/O. Every integer is
 * little-endian; each header ends in an XXH3-64 of the bytes before it.
 */
#ifndef KVTD_L2FMT_H
#define KVTD_L2FMT_H

#include <stdint.h>

#include "kvtier/kvtier.h"

/* Headers take one block of this size; record data starts on the next block. */
#define L2FMT_BLOCK 4096u
#define L2FMT_VERSION 1u
#define L2FMT_REGION_MAGIC UINT64_C(0x4e4752324c54564b)  /* "KVTL2RGN" */
#define L2FMT_RECORD_MAGIC UINT64_C(0x434552324c54564b)  /* "KVTL2REC" */

struct l2fmt_region {
	uint64_t region_size;
	uint32_t region_index;
	uint64_t seq;            /* write order of regions, from 1; 0 is never used */
};

struct l2fmt_record {
	uint64_t region_seq;     /* the seq of the region it was written into */
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank;
	uint16_t tp_size;
	uint32_t length;         /* data bytes; padded on disk to L2FMT_BLOCK */
	uint32_t flags;          /* L2FMT_RECORD_* */
	uint64_t data_checksum;  /* XXH3-64 of the length data bytes */
};

/* The record was dropped (a namespace deleted): the scan steps over it. */
#define L2FMT_RECORD_DROPPED 1u
/* An L3 part signed with a cluster key (l3mac.h): its MAC is at L2FMT_MAC_OFFSET. */
#define L2FMT_RECORD_MAC 2u

/* The MAC of a signed part: over the header's first L2FMT_MAC_SIGNED bytes, then the data. */
#define L2FMT_MAC_OFFSET 128u
#define L2FMT_MAC_BYTES 32u
#define L2FMT_MAC_SIGNED 72u    /* the fields and their XXH3 (flags included) */

/* Rounds n up to whole blocks. */
static inline uint64_t l2fmt_align(uint64_t n)
{
	return (n + L2FMT_BLOCK - 1) & ~(uint64_t)(L2FMT_BLOCK - 1);
}

/* Bytes a record of length data bytes occupies: its header block and data. */
static inline uint64_t l2fmt_record_bytes(uint32_t length)
{
	return L2FMT_BLOCK + l2fmt_align(length);
}

/* Each writes a whole L2FMT_BLOCK at block (zero-filled past the header). */
void l2fmt_region_encode(uint8_t *block, const struct l2fmt_region *r);
void l2fmt_record_encode(uint8_t *block, const struct l2fmt_record *r);

/*
 * Each reads a header from a block of L2FMT_BLOCK bytes: 0, -EBADMSG when the
 * magic or the checksum is wrong (not a header, torn or corrupt), -EPROTO for
 * a format version this build does not read.
 */
int l2fmt_region_decode(const uint8_t *block, struct l2fmt_region *r);
int l2fmt_record_decode(const uint8_t *block, struct l2fmt_record *r);

#endif
