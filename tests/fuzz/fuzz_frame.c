/*
 * fuzz_frame.c — libFuzzer target for the data-plane frame decoder: the
 * input is a header and payload as a client would send them. Every decoder
 * must reject what it cannot parse without reading past the payload, and a
 * decoded STORE/LOAD must yield entries that lie inside it.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < KVT_HDR_BYTES)
		return 0;
	struct wire_hdr h;
	wire_hdr_decode(data, &h);
	(void)frame_check_header(&h);
	/* Decode the bytes after the header whatever op it names, and as each op. */
	const uint8_t *p = data + KVT_HDR_BYTES;
	size_t n = size - KVT_HDR_BYTES;
	struct frame_hello hello;
	struct frame_register reg;
	struct frame_lookup lk;
	struct frame_blocks blocks;
	uint32_t u32;
	uint64_t u64;
	if (frame_decode_hello(p, n, &hello) == 0 && (strlen(hello.model) > KVT_MAX_NAME ||
						      strlen(hello.salt) > KVT_MAX_NAME))
		__builtin_trap();
	(void)frame_decode_register(p, n, &reg);
	(void)frame_decode_u32(p, n, &u32);
	(void)frame_decode_u64(p, n, &u64);
	if (frame_decode_lookup(p, n, &lk) == 0) {
		uint8_t sum = 0;
		for (uint32_t i = 0; i < lk.nkeys; i++)
			sum ^= lk.keys[i].bytes[15];
		(void)sum;
	}
	if (frame_decode_blocks(p, n, &blocks) == 0) {
		for (uint32_t i = 0; i < blocks.nblocks; i++) {
			struct frame_block b;
			frame_block_at(&blocks, i, &b);
		}
	}
	return 0;
}
