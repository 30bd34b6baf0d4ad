/* keychain.c — the prefix chain of block keys (XXH3-128 from libxxhash). */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <string.h>
/* The state on the stack (no allocation per key) needs the static-linking API. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "kvtier/kvtier.h"

void kvt_key_chain_next(const struct kvt_key *parent, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out)
{
	XXH3_state_t state;
	XXH3_128bits_reset_withSeed(&state, KVT_CHAIN_SEED);
	if (parent)
		XXH3_128bits_update(&state, parent->bytes, KVT_KEY_BYTES);
#if __BYTE_ORDER == __LITTLE_ENDIAN
	XXH3_128bits_update(&state, tokens, ntokens * sizeof(*tokens));
#else
	for (size_t i = 0; i < ntokens; i++) {
		uint32_t le = htole32((uint32_t)tokens[i]);
		XXH3_128bits_update(&state, &le, sizeof(le));
	}
#endif
	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&state));
	memcpy(out->bytes, canon.digest, KVT_KEY_BYTES);
}

void kvt_key_chain_each(const struct kvt_key *parents, size_t n, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out)
{
	for (size_t i = 0; i < n; i++)
		kvt_key_chain_next(&parents[i], tokens, ntokens, &out[i]); /* reads all, then writes */
}

int kvt_key_chain(const int32_t *tokens, size_t ntokens, size_t block_tokens,
		  struct kvt_key *keys, size_t max_keys)
{
	if (block_tokens == 0)
		return -EINVAL;
	size_t n = ntokens / block_tokens;
	if (n > max_keys)
		n = max_keys;
	for (size_t i = 0; i < n; i++)
		kvt_key_chain_next(i ? &keys[i - 1] : NULL, tokens + i * block_tokens,
				   block_tokens, &keys[i]);
	return (int)n;
}
