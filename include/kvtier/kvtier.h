/*
 * kvtier.h — the public API of libkvtier.
 *
 * Owns what every kvtier client and the daemon agree on: version, error codes
 * and kvt_strerror(), size strings, and the 16-byte block keys with their
 * prefix chain. Every function returning int returns 0 (or a count) on success
 * and a negative error code on failure: -errno values, or -KVT_E* below.
 */
#ifndef KVTIER_KVTIER_H
#define KVTIER_KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0

/* The library's version string, e.g. "0.1.0". */
const char *kvt_version(void);

/*
 * Errors of kvtier's own, beyond errno. They start far above any errno so a
 * negative return is always one or the other.
 */
enum kvt_errcode {
	KVT_EBASE = 4096,
	KVT_ENSCONFLICT,  /* namespace exists with another block size or TP size */
	KVT_EALLPINNED,   /* no space: every evictable byte is pinned or leased */
	KVT_ELAST
};

/* A message for an error code; takes err or -err. Never NULL. */
const char *kvt_strerror(int err);

/*
 * Parses a size: plain bytes ("4096") or a number with a unit, binary
 * ("KiB MiB GiB TiB") or decimal ("KB MB GB TB"), with or without a space
 * ("64MiB", "64 MiB"). Returns 0, -EINVAL for a malformed string or unknown
 * unit, -ERANGE when the value does not fit in 64 bits.
 */
int kvt_parse_size(const char *text, uint64_t *bytes);

/*
 * Writes bytes as the largest binary unit that divides it exactly
 * ("1 GiB", "1536 KiB", "4097 B"). Returns the length snprintf would.
 */
int kvt_format_size(uint64_t bytes, char *buf, size_t buflen);

/* A block key: an opaque 16-byte digest. */
#define KVT_KEY_BYTES 16
struct kvt_key {
	uint8_t bytes[KVT_KEY_BYTES];
};

/* The seed of the prefix chain hash; part of the on-wire contract. */
#define KVT_CHAIN_SEED UINT64_C(0x6b76746965720001)

/*
 * The prefix chain: key_i = XXH3-128(key_{i-1} || tokens of block i) with
 * KVT_CHAIN_SEED, where the first block has no parent bytes. Tokens are
 * hashed as little-endian int32; the key is XXH3's canonical (big-endian)
 * form of the 128-bit digest. parent may be NULL for the first block.
 */
void kvt_key_chain_next(const struct kvt_key *parent, const int32_t *tokens,
			size_t ntokens, struct kvt_key *out);

/*
 * Keys of every full block of block_tokens tokens in tokens[0..ntokens),
 * at most max_keys of them. Returns the number written, or -EINVAL when
 * block_tokens is 0. A trailing partial block gets no key.
 */
int kvt_key_chain(const int32_t *tokens, size_t ntokens, size_t block_tokens,
		  struct kvt_key *keys, size_t max_keys);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_KVTIER_H */
