/*
 * l3mac.h — signing L3 parts with a cluster key: an HMAC-SHA256 (nettle's)
 * over a part's header fields and its data, kept in the header block. With
 * --l3-key-file, a node signs what it publishes and serves only parts whose
 * signature verifies: a writer of the shared directory without the key can
 * no longer get its bytes served (XXH3, which every part carries, catches
 * accidents only). Hand-written glue only: the MAC is nettle's.
 *
 * Owner: the key is read at start and never changes; sign and verify run on
 * L3's checksum thread (pure functions of their arguments).
 */
#ifndef KVTD_L3MAC_H
#define KVTD_L3MAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define L3MAC_KEY_MIN 32       /* bytes: a shorter key is refused */
#define L3MAC_KEY_MAX 4096

struct l3mac_key {
	uint8_t bytes[L3MAC_KEY_MAX];
	size_t len;
};

/*
 * Reads the whole file at path as the key (raw bytes: e.g. head -c 32
 * /dev/urandom). 0, or -errno with why: unreadable, shorter than
 * L3MAC_KEY_MIN or longer than L3MAC_KEY_MAX bytes.
 */
int l3mac_load(const char *path, struct l3mac_key *key, char *why, size_t whylen);

/*
 * Signs the record header in hdr (an L2 format header block, l2fmt.h, its
 * fields final) and data[0..len): the MAC goes into hdr's MAC field, and
 * the record's MAC flag must already be set (it is part of what is signed).
 */
void l3mac_sign(const struct l3mac_key *key, uint8_t *hdr, const uint8_t *data, size_t len);

/* Whether hdr's MAC field is the MAC of hdr and data[0..len) (constant time). */
bool l3mac_verify(const struct l3mac_key *key, const uint8_t *hdr, const uint8_t *data,
		  size_t len);

#endif
