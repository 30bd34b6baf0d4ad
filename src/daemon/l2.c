/* l2.c — see l2.h. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "l2.h"
#include "owner_stats.h"
#include "l2fmt.h"
#include "l2dev.h"
#include "log.h"
#include "prefault.h"

/* I/O errors in a row that mark L2 failed. */
#define L2_FAIL_AFTER 8
#define L2_MIN_REGION (UINT64_C(8) << 20)
#define L2_MAX_AUTO_REGION (UINT64_C(256) << 20)

enum region_state { REGION_FREE, REGION_OPEN, REGION_SEALED };

struct l2_part {
	struct l2_item *item;
	LIST_ENTRY(l2_part) link;     /* the parts of its region */
	uint64_t offset;              /* of its data, in the file */
	uint64_t checksum;
	uint32_t length;
	uint32_t region;
	uint8_t unwritten;            /* writes of its record not completed (0: on disk, or recovered) */
	bool direct;                  /* its data is written from the caller's memory, not a write buffer */
};

/* What L2 holds of one namespace, by digest: of this run's namespaces or not. */
struct l2_ns_usage {
	uint64_t digest;
	uint64_t items, bytes;        /* bytes: of its records, headers and padding included */
	TAILQ_HEAD(l2_items, l2_item) order;  /* its items in the order they came, oldest first */
	LIST_ENTRY(l2_ns_usage) chain;    /* its bucket's */
};

struct l2_item {
	struct index_entry entry;     /* first: the index hands back this pointer */
	struct l2_ns_usage *usage;
	TAILQ_ENTRY(l2_item) order;   /* in usage->order */
	uint16_t nparts;
	uint16_t nfound;              /* recovery only: parts seen */
	struct l2_part parts[];
};

struct l2_region {
	enum region_state state;
	uint32_t index;
	uint64_t seq;
	uint64_t used;                /* bytes from the region's start */
	uint32_t readers;             /* reads in flight */
	uint32_t writes;              /* writes in flight */
	LIST_HEAD(, l2_part) parts;
	struct l2_wbuf *wbuf;         /* its bytes in memory while it is filled and written */
	LIST_HEAD(, l2_tombstone) tombstones;  /* dropped records whose own write is in flight */
};

/*
 * A record header marked dropped, to be written once the record's own write
 * has completed: two writes to one range in flight at once land in either
 * order, and the record landing last would bring the dropped item back at
 * the next start.
 */
struct l2_tombstone {
	uint64_t at;                  /* the header's offset in its region */
	uint8_t *block;               /* the encoded header, a mapped block */
	LIST_ENTRY(l2_tombstone) link;
};

struct l2_wbuf {
	uint8_t *mem;
	struct l2_region *region;     /* NULL when free */
};

/*
 * A write of [start, end) of a region from buf: of its write buffer, of a
 * header block, or of a direct write's data.
 */
struct l2_write {
	struct l2_io io;
	struct l2_region *region;
	uint64_t start, end;          /* region-relative */
	bool owned_block;             /* buf is a header block mapped for this write */
	struct l2_direct *direct;     /* the direct write it is part of, or NULL */
};

/* A zeroed block, written over headers to invalidate them. */
static uint8_t zero_block[L2FMT_BLOCK] __attribute__((aligned(L2FMT_BLOCK)));

static uint64_t region_base(const struct l2 *l2, const struct l2_region *r)
{
	return (uint64_t)r->index * l2->region_size;
}

/* --- per-namespace usage --- */

static struct l2_usage_bucket *usage_bucket(const struct l2 *l2, uint64_t digest)
{
	return &l2->usage[digest & (L2_USAGE_BUCKETS - 1)];
}

static struct l2_ns_usage *usage_find(const struct l2 *l2, uint64_t digest)
{
	struct l2_ns_usage *u;
	LIST_FOREACH(u, usage_bucket(l2, digest), chain)
		if (u->digest == digest)
			return u;
	return NULL;
}

/* ns's oldest item in L2 (u holds one at least). */
static struct l2_item *usage_oldest(const struct l2_ns_usage *u)
{
	return TAILQ_FIRST(&u->order);
}

/* Links a new item as its namespace's newest; false without memory. */
static bool usage_add(struct l2 *l2, struct l2_item *it)
{
	uint64_t digest = it->entry.ns_tag;
	struct l2_ns_usage *u = usage_find(l2, digest);
	if (!u) {
		if (!(u = calloc(1, sizeof(*u))))
			return false;
		u->digest = digest;
		TAILQ_INIT(&u->order);
		LIST_INSERT_HEAD(usage_bucket(l2, digest), u, chain);
	}
	it->usage = u;
	TAILQ_INSERT_TAIL(&u->order, it, order);
	u->items++;
	return true;
}

static void usage_remove(struct l2_item *it)
{
	struct l2_ns_usage *u = it->usage;
	TAILQ_REMOVE(&u->order, it, order);
	if (--u->items)
		return;
	LIST_REMOVE(u, chain);
	free(u);
}

void l2_ns_usage(const struct l2 *l2, const struct kvt_ns *ns, uint64_t *items, uint64_t *bytes)
{
	const struct l2_ns_usage *u = usage_find(l2, ns->digest);
	*items = u ? u->items : 0;
	*bytes = u ? u->bytes : 0;
}

/* --- items --- */

static struct l2_item *item_find(const struct l2 *l2, uint64_t digest, const struct kvt_key *key)
{
	uint64_t hash = index_hash(&l2->index, digest, key);
	return (struct l2_item *)index_find(&l2->index, digest, key, hash);
}

static struct l2_item *item_new(struct l2 *l2, uint64_t digest, const struct kvt_key *key,
				uint16_t nparts)
{
	struct l2_item *it = calloc(1, sizeof(*it) + nparts * sizeof(it->parts[0]));
	if (!it)
		return NULL;
	it->nparts = nparts;
	it->entry.ns_tag = digest;
	it->entry.key = *key;
	it->entry.hash = index_hash(&l2->index, digest, key);
	if (!usage_add(l2, it)) {
		free(it);
		return NULL;
	}
	index_insert(&l2->index, &it->entry);
	return it;
}

static void part_link(struct l2 *l2, struct l2_item *it, struct l2_part *p, uint32_t region)
{
	struct l2_region *r = &l2->regions[region];
	p->item = it;
	p->region = region;
	it->usage->bytes += l2fmt_record_bytes(p->length);
	LIST_INSERT_HEAD(&r->parts, p, link);
}

static void part_unlink(struct l2_part *p)
{
	if (!p->item)
		return;
	LIST_REMOVE(p, link);
	p->item->usage->bytes -= l2fmt_record_bytes(p->length);
	p->item = NULL;
}

static void item_free(struct l2 *l2, struct l2_item *it)
{
	for (uint16_t i = 0; i < it->nparts; i++)
		part_unlink(&it->parts[i]);
	usage_remove(it);
	index_remove(&l2->index, &it->entry);
	free(it);
}

/* Drops a complete item (counted in the items gauge). */
static void item_drop(struct l2 *l2, struct l2_item *it)
{
	item_free(l2, it);
	STAT_SUB(l2, items, 1);
}

/* --- I/O errors, and the ring (l2ring.c) --- */

static void note_error(struct l2 *l2)
{
	STAT_ADD(l2, io_errors, 1);
	if (++l2->consecutive_errors == L2_FAIL_AFTER && !STAT_GET(l2, failed)) {
		STAT_SET(l2, failed, 1);
		log_error("l2: %u I/O errors in a row: L2 marked failed; writes stop, reads go on "
			  "(each checked), probes try writing again", L2_FAIL_AFTER);
	}
}

void l2_submit(struct l2 *l2)
{
	l2ring_submit(&l2->ring);
}

uint32_t l2_poll(struct l2 *l2)
{
	return l2ring_poll(&l2->ring);
}

void l2_process(struct l2 *l2)
{
	l2ring_process(&l2->ring);
}

int l2_event_fd(const struct l2 *l2)
{
	return l2ring_event_fd(&l2->ring);
}

/* --- regions and write buffers --- */

static void region_release_wbuf(struct l2_region *r)
{
	if (r->state == REGION_OPEN || r->writes || !r->wbuf)
		return;
	r->wbuf->region = NULL;
	r->wbuf = NULL;
}

/* Drops every item with a part in r and frees it for reuse (no I/O). */
static uint64_t region_empty(struct l2 *l2, struct l2_region *r)
{
	uint64_t items = 0;
	while (!LIST_EMPTY(&r->parts)) {
		item_drop(l2, LIST_FIRST(&r->parts)->item);
		items++;
	}
	STAT_SUB(l2, used_bytes, r->used);
	STAT_ADD(l2, free_regions, 1);
	r->used = 0;
	r->state = REGION_FREE;
	return items;
}

/* The oldest sealed region that no read or write is using, or NULL. */
static struct l2_region *region_oldest_idle(struct l2 *l2)
{
	struct l2_region *best = NULL;
	for (uint32_t i = 0; i < l2->nregions; i++) {
		struct l2_region *r = &l2->regions[i];
		if (r->state == REGION_SEALED && !r->readers && !r->writes && !r->wbuf &&
		    (!best || r->seq < best->seq))
			best = r;
	}
	return best;
}

/* A free region no write is using (not one whose header is being zeroed), or NULL. */
static struct l2_region *region_free_idle(struct l2 *l2)
{
	for (uint32_t i = 0; i < l2->nregions; i++)
		if (l2->regions[i].state == REGION_FREE && !l2->regions[i].writes)
			return &l2->regions[i];
	return NULL;
}

static struct l2_region *region_take(struct l2 *l2)
{
	struct l2_region *r = region_free_idle(l2);
	if (r)
		return r;
	r = region_oldest_idle(l2);
	if (!r)
		return NULL;
	STAT_ADD(l2, items_reclaimed, region_empty(l2, r));
	STAT_ADD(l2, regions_reclaimed, 1);
	return r;
}

static void write_block(struct l2 *l2, struct l2_region *r, uint64_t at, uint8_t *block);

/* The write of [start, end) of r is done: the tombstones of records in it go out now. */
static void release_tombstones(struct l2 *l2, struct l2_region *r, uint64_t start, uint64_t end)
{
	for (struct l2_tombstone *ts = LIST_FIRST(&r->tombstones), *next; ts; ts = next) {
		next = LIST_NEXT(ts, link);
		if (ts->at < start || ts->at >= end)
			continue;
		LIST_REMOVE(ts, link);
		write_block(l2, r, ts->at, ts->block);
		free(ts);
	}
}

/* Whether [start, end) of r covers part of p's record (header and padded data). */
static bool record_overlaps(const struct l2 *l2, const struct l2_region *r,
			    const struct l2_part *p, uint64_t start, uint64_t end)
{
	uint64_t data = p->offset - region_base(l2, r);
	return data - L2FMT_BLOCK < end && data + l2fmt_align(p->length) > start;
}

/* One write of a direct write has finished: the last one tells its owner. */
static void direct_write_done(struct l2_direct *d, int res)
{
	if (res < 0 && !d->status)
		d->status = -EIO;
	if (--d->ios == 0)
		d->done(d, d->status);
}

static void write_complete(struct l2_io *io, int res)
{
	struct l2_write *w = (struct l2_write *)io;
	struct l2 *l2 = io->l2;
	struct l2_region *r = w->region;
	r->writes--;
	if (res < 0) {
		note_error(l2);
		/* Its items never reached the disk: forget them. */
		struct l2_part *p = LIST_FIRST(&r->parts);
		while (p) {
			struct l2_part *next = LIST_NEXT(p, link);
			if (record_overlaps(l2, r, p, w->start, w->end)) {
				item_drop(l2, p->item);
				next = LIST_FIRST(&r->parts); /* the list changed: start over */
			}
			p = next;
		}
	} else {
		l2->consecutive_errors = 0;
		STAT_ADD(l2, bytes_written, w->end - w->start);
		struct l2_part *p;
		LIST_FOREACH(p, &r->parts, link)
			if (p->unwritten && record_overlaps(l2, r, p, w->start, w->end))
				p->unwritten--;
	}
	release_tombstones(l2, r, w->start, w->end);
	region_release_wbuf(r);
	if (w->owned_block)
		munmap(io->buf, L2FMT_BLOCK);
	if (w->direct)
		direct_write_done(w->direct, res);
	free(w);
}

/*
 * Queues a write of [start, end) of r from buf (owned: a block to unmap
 * after; direct: the direct write it belongs to). -ENOMEM.
 */
static int write_queue_from(struct l2 *l2, struct l2_region *r, const uint8_t *buf,
			    uint64_t start, uint64_t end, bool owned, struct l2_direct *direct)
{
	struct l2_write *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	/* The ring only reads from buf for a write: the cast keeps one l2_io for both ways. */
	w->io = (struct l2_io){.l2 = l2, .complete = write_complete, .buf = (uint8_t *)buf,
			       .offset = region_base(l2, r) + start, .len = (uint32_t)(end - start),
			       .write = true};
	w->region = r;
	w->owned_block = owned;
	w->direct = direct;
	w->start = start;
	w->end = end;
	r->writes++;
	l2ring_queue(&l2->ring, &w->io);
	return 0;
}

static int write_queue(struct l2 *l2, struct l2_region *r, uint8_t *buf, uint64_t start,
		       uint64_t end, bool owned)
{
	return write_queue_from(l2, r, buf, start, end, owned, NULL);
}

static void region_seal(struct l2 *l2, struct l2_region *r)
{
	r->state = REGION_SEALED;
	if (l2->open == r)
		l2->open = NULL;
	region_release_wbuf(r);
}

/* Opens a region for writing with a free write buffer; NULL when none can be had. */
static struct l2_region *region_open(struct l2 *l2)
{
	struct l2_wbuf *wb = NULL;
	for (uint32_t i = 0; i < l2->nwbufs && !wb; i++)
		if (!l2->wbufs[i].region)
			wb = &l2->wbufs[i];
	if (!wb)
		return NULL;
	struct l2_region *r = region_take(l2);
	if (!r)
		return NULL;
	struct l2fmt_region hdr = {l2->region_size, r->index, l2->next_seq};
	l2fmt_region_encode(wb->mem, &hdr);
	if (write_queue(l2, r, wb->mem, 0, L2FMT_BLOCK, false))
		return NULL;
	r->seq = l2->next_seq++;
	r->state = REGION_OPEN;
	r->used = L2FMT_BLOCK;
	r->wbuf = wb;
	wb->region = r;
	STAT_SUB(l2, free_regions, 1);
	STAT_ADD(l2, used_bytes, L2FMT_BLOCK);
	return r;
}

/* The open region with room for bytes more, opening a new one when needed. */
static struct l2_region *region_with_room(struct l2 *l2, uint64_t bytes)
{
	if (l2->open && l2->open->used + bytes <= l2->region_size)
		return l2->open;
	if (l2->open)
		region_seal(l2, l2->open);
	return l2->open = region_open(l2);
}

/* --- victims from L1 --- */

bool l2_readable(const struct l2 *l2)
{
	return STAT_GET(l2, ready);
}

bool l2_writable(const struct l2 *l2)
{
	return STAT_GET(l2, ready) && !STAT_GET(l2, failed);
}

bool l2_contains(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key)
{
	if (!l2_readable(l2))
		return false;
	struct l2_item *it = item_find(l2, ns->digest, key);
	return it && it->nparts == ns->tp_size;
}

/* Appends the records of v at r->used: headers, data, checksums, the item. */
static struct l2_item *append_victim(struct l2 *l2, struct l2_region *r,
				     const struct l1_victim *v)
{
	struct l2_item *it = item_new(l2, v->ns->digest, v->key, v->nparts);
	if (!it)
		return NULL;
	for (uint16_t i = 0; i < v->nparts; i++) {
		uint8_t *at = r->wbuf->mem + r->used;
		struct l2fmt_record rec = {
			.region_seq = r->seq, .ns_digest = v->ns->digest, .key = *v->key,
			.rank = i, .tp_size = v->nparts, .length = v->lengths[i],
			.data_checksum = XXH3_64bits(v->parts[i], v->lengths[i]),
		};
		l2fmt_record_encode(at, &rec);
		memcpy(at + L2FMT_BLOCK, v->parts[i], v->lengths[i]);
		uint64_t padded = l2fmt_align(v->lengths[i]);
		memset(at + L2FMT_BLOCK + v->lengths[i], 0, padded - v->lengths[i]);
		struct l2_part *p = &it->parts[i];
		p->offset = region_base(l2, r) + r->used + L2FMT_BLOCK;
		p->length = v->lengths[i];
		p->checksum = rec.data_checksum;
		p->unwritten = 1; /* one write: records and data from the write buffer */
		part_link(l2, it, p, r->index);
		r->used += L2FMT_BLOCK + padded;
	}
	return it;
}

/*
 * Drops ns's oldest items until room more bytes fit within its L2 quota
 * (room <= quota); returns how many went.
 */
static uint64_t drop_to_quota(struct l2 *l2, const struct kvt_ns *ns, uint64_t room)
{
	uint64_t dropped = 0;
	struct l2_ns_usage *u;
	while (ns->l2_quota && (u = usage_find(l2, ns->digest)) &&
	       u->bytes + room > ns->l2_quota) {
		item_drop(l2, usage_oldest(u));
		dropped++;
	}
	STAT_ADD(l2, items_dropped_quota, dropped);
	return dropped;
}

/*
 * Makes room for bytes more of ns within its L2 quota: its oldest items go
 * first. False when one victim alone is larger than the quota.
 */
static bool fit_quota(struct l2 *l2, const struct kvt_ns *ns, uint64_t bytes)
{
	if (ns->l2_quota && bytes > ns->l2_quota)
		return false;
	drop_to_quota(l2, ns, bytes);
	return true;
}

/*
 * Whether v can be written now, counting why not: the open region with room
 * for its records (bytes), or -EIO (L2 off), -EEXIST (held already),
 * -E2BIG (larger than a region), -EDQUOT (larger than its quota), -ENOSPC
 * (no region or write buffer free: L2 behind).
 */
static int victim_admit(struct l2 *l2, const struct l1_victim *v, struct l2_region **region,
			uint64_t *bytes)
{
	if (!l2_writable(l2)) {
		STAT_ADD(l2, victims_dropped_off, 1);
		return -EIO;
	}
	if (item_find(l2, v->ns->digest, v->key)) {
		STAT_ADD(l2, victims_present, 1);
		return -EEXIST;
	}
	*bytes = 0;
	for (uint16_t i = 0; i < v->nparts; i++)
		*bytes += l2fmt_record_bytes(v->lengths[i]);
	if (*bytes > l2->region_size - L2FMT_BLOCK) {
		STAT_ADD(l2, victims_dropped_unfit, 1);
		return -E2BIG;
	}
	if (!fit_quota(l2, v->ns, *bytes)) {
		STAT_ADD(l2, victims_dropped_quota, 1);
		return -EDQUOT;
	}
	if (!(*region = region_with_room(l2, *bytes))) {
		STAT_ADD(l2, victims_dropped_behind, 1);
		return -ENOSPC;
	}
	return 0;
}

void l2_write_victim(struct l2 *l2, const struct l1_victim *v)
{
	struct l2_region *r;
	uint64_t bytes;
	if (victim_admit(l2, v, &r, &bytes))
		return;
	uint64_t start = r->used;
	if (!append_victim(l2, r, v) || write_queue(l2, r, r->wbuf->mem + start, start, r->used, false)) {
		struct l2_item *it = item_find(l2, v->ns->digest, v->key);
		if (it)
			item_free(l2, it);
		r->used = start;
		STAT_ADD(l2, victims_dropped_behind, 1);
		return;
	}
	STAT_ADD(l2, used_bytes, r->used - start);
	STAT_ADD(l2, items, 1);
	STAT_ADD(l2, victims_written, 1);
}

int l2_direct_reserve(struct l2 *l2, const struct l1_victim *v, struct l2_direct *d)
{
	struct l2_region *r;
	uint64_t bytes;
	int err = victim_admit(l2, v, &r, &bytes);
	if (err)
		return err;
	struct l2_item *it = item_new(l2, v->ns->digest, v->key, v->nparts);
	if (!it) {
		STAT_ADD(l2, victims_dropped_behind, 1);
		return -ENOMEM;
	}
	d->region = r;
	d->region_seq = r->seq;
	d->ns_digest = v->ns->digest;
	d->key = *v->key;
	d->nparts = v->nparts;
	d->ios = 0;
	d->status = 0;
	uint64_t start = r->used;
	for (uint16_t i = 0; i < v->nparts; i++) {
		d->parts[i] = (struct l2_direct_part){.data = v->parts[i], .length = v->lengths[i],
						      .at = r->used};
		struct l2_part *p = &it->parts[i];
		p->offset = region_base(l2, r) + r->used + L2FMT_BLOCK;
		p->length = v->lengths[i];
		p->unwritten = 2; /* its header block, then its data */
		p->direct = true;
		part_link(l2, it, p, r->index);
		r->used += l2fmt_record_bytes(v->lengths[i]);
	}
	r->writes++; /* held, with its write buffer, until l2_direct_write */
	STAT_ADD(l2, used_bytes, r->used - start);
	STAT_ADD(l2, items, 1);
	STAT_ADD(l2, victims_written, 1);
	STAT_ADD(l2, direct_writes, 1);
	return 0;
}

/* The checksums the caller computed, into the parts L2 still holds of d's item. */
static void direct_set_checksums(struct l2 *l2, const struct l2_direct *d)
{
	struct l2_item *it = item_find(l2, d->ns_digest, &d->key);
	if (!it || it->nparts != d->nparts)
		return;
	for (uint16_t i = 0; i < d->nparts; i++) {
		struct l2_part *p = &it->parts[i];
		if (p->region != d->region->index ||
		    p->offset != region_base(l2, d->region) + d->parts[i].at + L2FMT_BLOCK)
			return; /* another item of the same key, written after this one was dropped */
	}
	for (uint16_t i = 0; i < d->nparts; i++)
		it->parts[i].checksum = d->parts[i].checksum;
}

void l2_direct_write(struct l2 *l2, struct l2_direct *d)
{
	struct l2_region *r = d->region;
	direct_set_checksums(l2, d);
	d->ios = 1; /* until every write is queued */
	for (uint16_t i = 0; i < d->nparts; i++) {
		const struct l2_direct_part *dp = &d->parts[i];
		struct l2fmt_record rec = {
			.region_seq = d->region_seq, .ns_digest = d->ns_digest, .key = d->key,
			.rank = i, .tp_size = d->nparts, .length = dp->length,
			.data_checksum = dp->checksum,
		};
		l2fmt_record_encode(r->wbuf->mem + dp->at, &rec);
		uint64_t data = dp->at + L2FMT_BLOCK;
		d->ios += 2;
		if (write_queue_from(l2, r, r->wbuf->mem + dp->at, dp->at, data, false, d))
			direct_write_done(d, -ENOMEM);
		if (write_queue_from(l2, r, dp->data, data, data + l2fmt_align(dp->length), false, d))
			direct_write_done(d, -ENOMEM);
	}
	r->writes--; /* the reservation's hold: the writes hold it now */
	region_release_wbuf(r);
	direct_write_done(d, 0);
}

bool l2_durable(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key)
{
	if (!l2_readable(l2))
		return false;
	struct l2_item *it = item_find(l2, ns->digest, key);
	if (!it || it->nparts != ns->tp_size)
		return false;
	for (uint16_t i = 0; i < it->nparts; i++)
		if (it->parts[i].unwritten)
			return false;
	return true;
}

bool l2_has_room(const struct l2 *l2)
{
	for (uint32_t i = 0; i < l2->nwbufs; i++)
		if (!l2->wbufs[i].region)
			return true;
	return l2->open && l2->open->used <= l2->region_size / 2;
}

/* --- reads --- */

static void read_complete(struct l2_io *io, int res)
{
	struct l2_read *rd = (struct l2_read *)((char *)io - offsetof(struct l2_read, io));
	struct l2 *l2 = io->l2;
	rd->region->readers--;
	if (res < 0) {
		note_error(l2);
		rd->done(rd, -EIO);
		return;
	}
	l2->consecutive_errors = 0;
	if (XXH3_64bits(io->buf, rd->length) != rd->checksum) {
		STAT_ADD(l2, checksum_failures, 1);
		/* Drop the item the bytes belonged to, if it is still there. */
		struct l2_part *p;
		LIST_FOREACH(p, &rd->region->parts, link) {
			if (p->offset == io->offset) {
				item_drop(l2, p->item);
				break;
			}
		}
		rd->done(rd, -ENOENT);
		return;
	}
	STAT_ADD(l2, reads, 1);
	STAT_ADD(l2, reads_from_disk, 1);
	STAT_ADD(l2, bytes_read, rd->length);
	rd->done(rd, 0);
}

int64_t l2_part_length(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key,
		       uint16_t rank)
{
	struct l2_item *it = l2_readable(l2) ? item_find(l2, ns->digest, key) : NULL;
	if (!it || it->nparts != ns->tp_size || rank >= it->nparts) {
		STAT_ADD(l2, read_misses, 1);
		return -ENOENT;
	}
	return it->parts[rank].length;
}

int l2_read_begin(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, uint8_t *dst, uint64_t cap, struct l2_read *rd)
{
	if (!l2_readable(l2))
		return -EIO;
	struct l2_item *it = item_find(l2, ns->digest, key);
	if (!it || it->nparts != ns->tp_size || rank >= it->nparts) {
		STAT_ADD(l2, read_misses, 1);
		return -ENOENT;
	}
	const struct l2_part *p = &it->parts[rank];
	if (l2fmt_align(p->length) > cap)
		return -ERANGE;
	struct l2_region *r = &l2->regions[p->region];
	rd->length = p->length;
	if (p->direct && p->unwritten) {
		/* Not on disk yet, and its bytes are the writer's (in L1, which answers first). */
		STAT_ADD(l2, read_misses, 1);
		return -ENOENT;
	}
	if (r->wbuf && !p->direct) {
		memcpy(dst, r->wbuf->mem + (p->offset - region_base(l2, r)), p->length);
		STAT_ADD(l2, reads, 1);
		STAT_ADD(l2, reads_from_memory, 1);
		STAT_ADD(l2, bytes_read, p->length);
		return 1;
	}
	rd->region = r;
	rd->checksum = p->checksum;
	rd->io = (struct l2_io){.l2 = l2, .complete = read_complete, .buf = dst,
				.offset = p->offset, .len = (uint32_t)l2fmt_align(p->length)};
	r->readers++;
	l2ring_queue(&l2->ring, &rd->io);
	return 0;
}

/* --- probing a failed L2 --- */

/* A probe: one header block rewritten as it is, to see whether writes work again. */
struct l2_probe {
	struct l2_io io;
	struct l2_region *region;
	bool owned_block;
};

static void probe_complete(struct l2_io *io, int res)
{
	struct l2_probe *p = (struct l2_probe *)io;
	struct l2 *l2 = io->l2;
	p->region->writes--;
	if (p->owned_block)
		munmap(io->buf, L2FMT_BLOCK);
	free(p);
	l2->probing = false;
	if (res < 0) {
		STAT_ADD(l2, io_errors, 1);
		STAT_ADD(l2, probes_failed, 1);
		return;
	}
	l2->consecutive_errors = 0;
	STAT_SET(l2, failed, 0);
	STAT_ADD(l2, recoveries, 1);
	log_info("l2: a probe write succeeded: L2 takes writes again");
}

/*
 * The block a probe may rewrite without changing what is on disk: a free
 * region's header (zeros), else an idle sealed region's own header.
 */
static struct l2_region *probe_target(struct l2 *l2, uint8_t **block, bool *owned)
{
	struct l2_region *r = region_free_idle(l2);
	*owned = false;
	*block = zero_block;
	if (r)
		return r;
	if (!(r = region_oldest_idle(l2)))
		return NULL;
	*block = mmap(NULL, L2FMT_BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (*block == MAP_FAILED)
		return NULL;
	struct l2fmt_region hdr = {l2->region_size, r->index, r->seq};
	l2fmt_region_encode(*block, &hdr);
	*owned = true;
	return r;
}

int l2_probe(struct l2 *l2)
{
	if (!STAT_GET(l2, ready) || !STAT_GET(l2, failed))
		return -EINVAL;
	if (l2->probing)
		return -EALREADY;
	uint8_t *block;
	bool owned;
	struct l2_region *r = probe_target(l2, &block, &owned);
	struct l2_probe *p = r ? calloc(1, sizeof(*p)) : NULL;
	if (!p) {
		if (r && owned)
			munmap(block, L2FMT_BLOCK);
		return r ? -ENOMEM : -EAGAIN;
	}
	p->io = (struct l2_io){.l2 = l2, .complete = probe_complete, .buf = block,
			       .offset = region_base(l2, r), .len = L2FMT_BLOCK, .write = true};
	p->region = r;
	p->owned_block = owned;
	r->writes++;
	l2->probing = true;
	l2ring_queue(&l2->ring, &p->io);
	return 0;
}

/* --- operator actions --- */

/* Queues a write of one header block (owned: unmapped when written). */
static void write_block(struct l2 *l2, struct l2_region *r, uint64_t at, uint8_t *block)
{
	if (write_queue(l2, r, block, at, at + L2FMT_BLOCK, block != zero_block)) {
		log_warn("l2: no memory to invalidate a record; it may return after a restart");
		if (block != zero_block)
			munmap(block, L2FMT_BLOCK);
	}
}

/* Rewrites p's record header marked dropped, so a restart steps over it. */
static void invalidate_part(struct l2 *l2, const struct l2_part *p)
{
	const struct l2_item *it = p->item;
	struct l2_region *r = &l2->regions[p->region];
	uint8_t *block = mmap(NULL, L2FMT_BLOCK, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (block == MAP_FAILED) {
		log_warn("l2: no memory to invalidate a record; it may return after a restart");
		return;
	}
	struct l2fmt_record rec = {
		.region_seq = r->seq, .ns_digest = it->entry.ns_tag, .key = it->entry.key,
		.rank = (uint16_t)(p - it->parts), .tp_size = it->nparts, .length = p->length,
		.flags = L2FMT_RECORD_DROPPED, .data_checksum = p->checksum,
	};
	l2fmt_record_encode(block, &rec);
	uint64_t at = p->offset - L2FMT_BLOCK - region_base(l2, r);
	if (!p->unwritten) {
		write_block(l2, r, at, block);
		return;
	}
	struct l2_tombstone *ts = malloc(sizeof(*ts));
	if (!ts) {
		log_warn("l2: no memory to invalidate a record; it may return after a restart");
		munmap(block, L2FMT_BLOCK);
		return;
	}
	*ts = (struct l2_tombstone){.at = at, .block = block};
	LIST_INSERT_HEAD(&r->tombstones, ts, link); /* written after the record's own write (write_complete) */
}

uint64_t l2_ns_drop(struct l2 *l2, const struct kvt_ns *ns)
{
	uint64_t dropped = 0;
	struct l2_ns_usage *u;
	while ((u = usage_find(l2, ns->digest))) {
		struct l2_item *it = usage_oldest(u);
		for (uint16_t k = 0; k < it->nparts; k++)
			invalidate_part(l2, &it->parts[k]);
		item_drop(l2, it);
		dropped++;
	}
	STAT_ADD(l2, items_dropped_admin, dropped);
	return dropped;
}

uint64_t l2_ns_trim(struct l2 *l2, const struct kvt_ns *ns)
{
	return drop_to_quota(l2, ns, 0);
}

uint64_t l2_evict(struct l2 *l2, uint64_t bytes)
{
	uint64_t freed = 0;
	while (freed < bytes) {
		struct l2_region *r = region_oldest_idle(l2);
		if (!r)
			break;
		freed += r->used;
		write_block(l2, r, 0, zero_block); /* the region header: nothing returns after a restart */
		STAT_ADD(l2, items_dropped_admin, region_empty(l2, r));
	}
	return freed;
}

void l2_stats_read(const struct l2 *l2, struct l2_stats_snapshot *out)
{
	_Static_assert(sizeof(*out) == sizeof(l2->stats), "the snapshot mirrors the stats");
	stats_copy(&l2->stats, out, sizeof(*out));
}

#define STAT_LIVE struct l2_stats
static const struct stat_def l2_stat_defs[] = {L2_STATS(STAT_DEF)};
#undef STAT_LIVE

void l2_stats_visit(const struct l2 *l2, stat_visit_fn fn, void *ctx)
{
	stats_visit(l2_stat_defs, sizeof(l2_stat_defs) / sizeof(l2_stat_defs[0]), &l2->stats, fn,
		    ctx);
	l2ring_stats_visit(&l2->stats.ring, fn, ctx);
}

/* --- recovery --- */

/* Adds a part found on disk; replaces an older copy of the same part. */
static void recover_part(struct l2 *l2, struct l2_region *r, const struct l2fmt_record *rec,
			 uint64_t data_offset)
{
	struct l2_item *it = item_find(l2, rec->ns_digest, &rec->key);
	if (it && it->nparts != rec->tp_size) {
		STAT_ADD(l2, recovery_dropped, 1);
		return;
	}
	if (!it && !(it = item_new(l2, rec->ns_digest, &rec->key, rec->tp_size))) {
		STAT_ADD(l2, recovery_dropped, 1);
		return;
	}
	struct l2_part *p = &it->parts[rec->rank];
	if (p->item) {
		if (l2->regions[p->region].seq > r->seq)
			return; /* a newer copy is known */
		part_unlink(p);
	} else {
		it->nfound++;
	}
	p->offset = data_offset;
	p->length = rec->length;
	p->checksum = rec->data_checksum;
	p->unwritten = 0;
	part_link(l2, it, p, r->index);
}

/* Reads the record headers of a region with a valid header, up to the first bad one. */
static int recover_region(struct l2 *l2, struct l2_region *r, uint8_t *block)
{
	uint64_t base = region_base(l2, r);
	uint64_t at = L2FMT_BLOCK;
	while (at + L2FMT_BLOCK <= l2->region_size) {
		ssize_t n = pread(l2->fd, block, L2FMT_BLOCK, (off_t)(base + at));
		if (n < 0)
			return -errno;
		struct l2fmt_record rec;
		if (n != L2FMT_BLOCK || l2fmt_record_decode(block, &rec) || rec.region_seq != r->seq ||
		    at + l2fmt_record_bytes(rec.length) > l2->region_size)
			break; /* the end of what was written, or a torn tail */
		if (!(rec.flags & L2FMT_RECORD_DROPPED))
			recover_part(l2, r, &rec, base + at + L2FMT_BLOCK);
		at += l2fmt_record_bytes(rec.length);
	}
	r->used = at;
	return 0;
}

/* Drops items that lack a part (their other parts were torn or overwritten). */
static void recover_drop_incomplete(struct l2 *l2)
{
	for (uint32_t i = 0; i < l2->nregions; i++) {
		struct l2_part *p = LIST_FIRST(&l2->regions[i].parts);
		while (p) {
			struct l2_part *next = LIST_NEXT(p, link);
			if (p->item->nfound < p->item->nparts) {
				STAT_ADD(l2, recovery_dropped, p->item->nfound);
				item_free(l2, p->item);
				next = LIST_FIRST(&l2->regions[i].parts);
			}
			p = next;
		}
	}
}

int l2_recover(struct l2 *l2)
{
	/* Headers are read into a write buffer: aligned for O_DIRECT, unused until l2_start. */
	uint8_t *block = l2->wbufs[0].mem;
	int err = 0;
	uint64_t used = 0, free_regions = 0, max_seq = 0;
	for (uint32_t i = 0; i < l2->nregions && !err; i++) {
		struct l2_region *r = &l2->regions[i];
		struct l2fmt_region hdr;
		ssize_t n = pread(l2->fd, block, L2FMT_BLOCK, (off_t)region_base(l2, r));
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n != L2FMT_BLOCK || l2fmt_region_decode(block, &hdr) ||
		    hdr.region_size != l2->region_size || hdr.region_index != i) {
			free_regions++;
			continue;
		}
		r->state = REGION_SEALED; /* new records go to new regions */
		r->seq = hdr.seq;
		max_seq = hdr.seq > max_seq ? hdr.seq : max_seq;
		err = recover_region(l2, r, block);
		used += r->used;
	}
	if (err)
		return err;
	recover_drop_incomplete(l2);
	l2->next_seq = max_seq + 1;
	STAT_SET(l2, items, l2->index.count);
	STAT_SET(l2, recovered_items, l2->index.count);
	STAT_SET(l2, used_bytes, used);
	STAT_SET(l2, free_regions, free_regions);
	return 0;
}

void l2_start(struct l2 *l2)
{
	atomic_store_explicit(&l2->stats.ready, 1, memory_order_release);
}

/* --- open and close --- */

static uint64_t auto_region_size(uint64_t size)
{
	uint64_t r = l2fmt_align(size / 32) & ~(L2_MIN_REGION - 1);
	if (r < L2_MIN_REGION)
		r = L2_MIN_REGION;
	return r > L2_MAX_AUTO_REGION ? L2_MAX_AUTO_REGION : r;
}

/* Registers the write buffers and the arena (in 1 GiB pieces); without, I/O still works. */
static void register_buffers(struct l2 *l2)
{
	unsigned chunks = l2->arena ? (unsigned)((l2->arena_size + L2RING_MAX_BUFFER - 1) / L2RING_MAX_BUFFER) : 0;
	struct iovec *iov = calloc(l2->nwbufs + chunks, sizeof(*iov));
	if (!iov)
		return;
	for (uint32_t i = 0; i < l2->nwbufs; i++)
		iov[i] = (struct iovec){l2->wbufs[i].mem, l2->region_size};
	for (unsigned c = 0; c < chunks; c++) {
		uint64_t off = (uint64_t)c * L2RING_MAX_BUFFER;
		uint64_t len = l2->arena_size - off < L2RING_MAX_BUFFER ? l2->arena_size - off : L2RING_MAX_BUFFER;
		iov[l2->nwbufs + c] = (struct iovec){l2->arena + off, len};
	}
	int err = l2ring_register(&l2->ring, iov, l2->nwbufs + chunks);
	free(iov);
	if (err)
		log_warn("l2: cannot register buffers with io_uring (%s; memlock limit?); "
			 "using unregistered I/O", strerror(-err));
}

static int alloc_wbufs(struct l2 *l2)
{
	l2->wbufs = calloc(l2->nwbufs, sizeof(*l2->wbufs));
	if (!l2->wbufs)
		return -ENOMEM;
	for (uint32_t i = 0; i < l2->nwbufs; i++) {
		void *m = mmap(NULL, l2->region_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (m == MAP_FAILED)
			return -ENOMEM;
		prefault_touch(m, l2->region_size);
		l2->wbufs[i] = (struct l2_wbuf){m, NULL};
	}
	return 0;
}

/* Everything of l2_open after the file: regions, ring, buffers, index. */
static int l2_setup(struct l2 *l2, const struct l2_config *cfg, uint64_t size, char *why,
		    size_t whylen)
{
	l2->region_size = cfg->region_size ? cfg->region_size : auto_region_size(size);
	if (l2->region_size % L2FMT_BLOCK || l2->region_size > L2RING_MAX_BUFFER)
		return kvt_fail(why, whylen, -EINVAL,
			    "l2-region-size: must be a multiple of 4 KiB and at most 1 GiB");
	uint64_t nregions = size / l2->region_size;
	if (nregions < 2 || nregions > UINT32_MAX)
		return kvt_fail(why, whylen, -EINVAL,
			    "l2-size: %s must hold at least 2 regions of %" PRIu64 " bytes",
			    cfg->path, l2->region_size);
	l2->nregions = (uint32_t)nregions;
	int err = l2ring_open(&l2->ring, l2->fd, cfg->queue_depth, &l2->stats.ring, why, whylen);
	if (err)
		return err;
	if (!(l2->regions = calloc(l2->nregions, sizeof(*l2->regions))) || alloc_wbufs(l2) ||
	    !(l2->usage = calloc(L2_USAGE_BUCKETS, sizeof(*l2->usage))) ||
	    index_init(&l2->index, 1024))
		return kvt_fail(why, whylen, -ENOMEM, "no memory for the L2 index and write buffers");
	for (uint32_t i = 0; i < l2->nregions; i++)
		l2->regions[i].index = i;
	register_buffers(l2);
	STAT_SET(l2, capacity_bytes, l2->nregions * l2->region_size);
	STAT_SET(l2, regions, l2->nregions);
	STAT_SET(l2, free_regions, l2->nregions);
	return 0;
}

int l2_open(struct l2 *l2, const struct l2_config *cfg, char *why, size_t whylen)
{
	*l2 = (struct l2){.fd = -1, .ring = {.eventfd = -1},
			  .nwbufs = cfg->write_buffers ? cfg->write_buffers : 2,
			  .arena = cfg->arena, .arena_size = cfg->arena_size, .next_seq = 1};
	struct l2dev dev;
	int err = l2dev_open(cfg->path, cfg->size, &dev, why, whylen);
	if (err)
		return err;
	l2->fd = dev.fd;
	l2->in_memory = dev.in_memory;
	if ((err = l2_setup(l2, cfg, dev.size, why, whylen)))
		l2dev_undo(cfg->path, &dev); /* a failed start leaves the file as it found it */
	return err;
}

void l2_close(struct l2 *l2)
{
	if (l2->open)
		region_seal(l2, l2->open);
	l2ring_close(&l2->ring);
	if (l2->regions) {
		for (uint32_t i = 0; i < l2->nregions; i++) {
			while (!LIST_EMPTY(&l2->regions[i].parts))
				item_free(l2, LIST_FIRST(&l2->regions[i].parts)->item);
			for (struct l2_tombstone *t = LIST_FIRST(&l2->regions[i].tombstones), *n; t;
			     t = n) {
				n = LIST_NEXT(t, link); /* none: each went out with its record's write */
				munmap(t->block, L2FMT_BLOCK);
				free(t);
			}
		}
	}
	index_destroy(&l2->index);
	free(l2->usage); /* empty: every item is gone */
	if (l2->wbufs) {
		for (uint32_t i = 0; i < l2->nwbufs; i++)
			if (l2->wbufs[i].mem)
				munmap(l2->wbufs[i].mem, l2->region_size);
	}
	free(l2->wbufs);
	free(l2->regions);
	if (l2->fd >= 0)
		close(l2->fd);
}
