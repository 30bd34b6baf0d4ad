/* l3mac.c — see l3mac.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "l2fmt.h"
#include "l3mac.h"

int l3mac_load(const char *path, struct l3mac_key *key, char *why, size_t whylen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int err = -errno;
		snprintf(why, whylen, "l3-key-file %s: %s", path, strerror(-err));
		return err;
	}
	ssize_t n = read(fd, key->bytes, sizeof(key->bytes));
	char more;
	bool longer = n == (ssize_t)sizeof(key->bytes) && read(fd, &more, 1) == 1;
	close(fd);
	if (n < L3MAC_KEY_MIN || longer) {
		snprintf(why, whylen, "l3-key-file %s: the key must be %d to %d bytes (head -c 32 /dev/urandom)",
			 path, L3MAC_KEY_MIN, L3MAC_KEY_MAX);
		return -EINVAL;
	}
	key->len = (size_t)n;
	return 0;
}

/* The MAC of the header's signed fields and the data. */
static void mac_of(const struct l3mac_key *key, const uint8_t *hdr, const uint8_t *data,
		   size_t len, uint8_t mac[L2FMT_MAC_BYTES])
{
	struct hmac_sha256_ctx ctx;
	hmac_sha256_set_key(&ctx, key->len, key->bytes);
	hmac_sha256_update(&ctx, L2FMT_MAC_SIGNED, hdr);
	hmac_sha256_update(&ctx, len, data);
	hmac_sha256_digest(&ctx, L2FMT_MAC_BYTES, mac);
}

void l3mac_sign(const struct l3mac_key *key, uint8_t *hdr, const uint8_t *data, size_t len)
{
	mac_of(key, hdr, data, len, hdr + L2FMT_MAC_OFFSET);
}

bool l3mac_verify(const struct l3mac_key *key, const uint8_t *hdr, const uint8_t *data,
		  size_t len)
{
	uint8_t mac[L2FMT_MAC_BYTES];
	mac_of(key, hdr, data, len, mac);
	return memeql_sec(mac, hdr + L2FMT_MAC_OFFSET, sizeof(mac));
}
