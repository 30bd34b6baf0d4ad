/* replies.c — see replies.h. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "kvtier/protocol.h"
#include "replies.h"
#include "wire.h"

int kvt__decode_transfer_reply(const uint8_t *p, size_t len, bool load, struct kvt_block *blocks,
			       uint32_t n)
{
	struct wire_rd r = {p, len, false};
	if (wire_u32(&r) != n || wire_u32(&r) != 0 || r.bad ||
	    r.left != (size_t)n * KVT_BLOCK_STATUS_BYTES)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) { /* all checked before any is written */
		int32_t status = (int32_t)wire_u32(&r);
		uint32_t length = wire_u32(&r);
		if (status > 0 || (load && status == 0 && length > blocks[i].length))
			return -EBADMSG;
	}
	r = (struct wire_rd){p + 8, len - 8, false};
	for (uint32_t i = 0; i < n; i++) {
		blocks[i].status = (int32_t)wire_u32(&r);
		uint32_t length = wire_u32(&r);
		if (load && blocks[i].status == 0)
			blocks[i].length = length;
	}
	return 0;
}

int kvt__decode_lookup_reply(const uint8_t *p, size_t len, struct kvt_lookup *lk)
{
	struct wire_rd r = {p, len, false};
	uint32_t hits = wire_u32(&r), n = wire_u32(&r);
	uint64_t lease = wire_u64(&r);
	if (r.bad || n != lk->nkeys || hits > n || r.left != n)
		return -EBADMSG;
	const uint8_t *tiers = wire_take(&r, n);
	for (uint32_t i = 0; i < n; i++)
		if (tiers[i] > 2)
			return -EBADMSG;
	memcpy(lk->tiers, tiers, n);
	lk->hits = hits;
	lk->lease_id = lease;
	return 0;
}

int kvt__decode_fixed_reply(const uint8_t *p, size_t len, uint8_t *out, size_t want)
{
	if (len != want)
		return -EBADMSG;
	memcpy(out, p, want);
	return 0;
}
