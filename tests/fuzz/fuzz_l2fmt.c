/*
 * fuzz_l2fmt.c — libFuzzer target for the L2 header decoders: the input is a
 * 4 KiB block as the restart scan reads it from a file that may hold
 * anything. Decoding must never read past the block, and a header it accepts
 * must re-encode to the same bytes (nothing is accepted that the writer
 * would not have written).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "l2fmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t block[L2FMT_BLOCK], again[L2FMT_BLOCK];
	memset(block, 0, sizeof(block));
	memcpy(block, data, size < sizeof(block) ? size : sizeof(block));
	struct l2fmt_region region;
	if (l2fmt_region_decode(block, &region) == 0) {
		l2fmt_region_encode(again, &region);
		if (memcmp(block, again, 48) != 0)
			abort();
	}
	struct l2fmt_record rec;
	if (l2fmt_record_decode(block, &rec) == 0) {
		if (rec.rank >= rec.tp_size || rec.length == 0)
			abort();
		l2fmt_record_encode(again, &rec);
		if (memcmp(block, again, 72) != 0)
			abort();
	}
	return 0;
}
