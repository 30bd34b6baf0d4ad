/*
 * fuzz_replies.c — libFuzzer target for libkvtier's reply decoders
 * (replies.h), as a hostile daemon would feed them: the first byte picks
 * the reply, the next one how many blocks or keys were asked (each block's
 * space taken from the input), the rest is the payload. An accepted reply
 * must stay within what was asked; a refused one must leave it untouched.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXN 64

static void transfer(const uint8_t *p, size_t len, bool load, uint32_t n, const uint8_t *spaces)
{
	struct kvt_block b[MAXN], before[MAXN];
	for (uint32_t i = 0; i < n; i++)
		b[i] = (struct kvt_block){.length = (uint32_t)spaces[i] << 8, .status = 7};
	memcpy(before, b, sizeof(b[0]) * n);
	int rc = reply_decode_transfer(p, len, load, b, n);
	if (rc && (rc != -EBADMSG || memcmp(before, b, sizeof(b[0]) * n)))
		__builtin_trap();
	for (uint32_t i = 0; !rc && i < n; i++)
		if (b[i].status > 0 || b[i].length > before[i].length)
			__builtin_trap();
}

static void lookup(const uint8_t *p, size_t len, uint32_t n)
{
	struct kvt_key keys[MAXN] = {{{0}}};
	uint8_t tiers[MAXN + 1];
	memset(tiers, 0xee, sizeof(tiers));
	struct kvt_lookup lk = {.keys = keys, .nkeys = n, .tiers = tiers, .hits = 99, .lease_id = 5};
	int rc = reply_decode_lookup(p, len, &lk);
	if (tiers[n] != 0xee) /* never past the tiers asked for */
		__builtin_trap();
	if (rc && (rc != -EBADMSG || lk.hits != 99 || lk.lease_id != 5 || (n && tiers[0] != 0xee)))
		__builtin_trap();
	for (uint32_t i = 0; !rc && i < n; i++)
		if (tiers[i] > KVT_TIER_MAX || lk.hits > n)
			__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	unsigned which = data[0] % 4;
	uint32_t n = data[1] % (MAXN + 1);
	data += 2;
	size -= 2;
	if (which < 2) {
		if (size < n)
			return 0;
		transfer(data + n, size - n, which == 1, n, data);
	} else if (which == 2) {
		lookup(data, size, n);
	} else {
		uint8_t out[32]; /* ASan sees a write past want */
		int rc = reply_decode_fixed(data, size, out, n % 32);
		if (rc && rc != -EBADMSG)
			__builtin_trap();
	}
	return 0;
}
