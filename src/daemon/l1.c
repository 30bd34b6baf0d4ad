/* l1.c — see l1.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "l1.h"
#include "lru.h"
#include "owner_stats.h"

/* Buckets made at start, at most; the index doubles past it. */
#define L1_INDEX_MAX_PRESIZE (UINT64_C(1) << 22)
/*
 * The writer pins at most 1/L1_WRITER_SHARE of the arena with writes from
 * slots: enough to keep a disk busy (at 2 GB/s, 64 MiB is 32 ms of work)
 * while most of L1 stays evictable for stores.
 */
#define L1_WRITER_SHARE 4
/* And at most this many items: eviction steps over them at the LRU end. */
#define L1_WRITER_MAX_ITEMS 256

enum part_state { PART_EMPTY, PART_WRITING, PART_STORED };

struct l1_part {
	uint8_t *data;      /* the arena slot, NULL while empty */
	uint32_t length;
	uint8_t state;
};

/*
 * An unpinned item is in two eviction orders (evict_policy.h), every item's
 * and its namespace's, and on the dirty list while it is complete and dirty
 * (in the order it was last used). Handed down and not yet durable, it is
 * on the writing list. The two lists are L1's own.
 */
enum l1_order { ORDER_ALL, ORDER_NS, ORDERS };
enum l1_list { LIST_DIRTY, LIST_WRITING, LISTS };

/* Where a complete item stands with the lower tier. */
enum item_write {
	ITEM_DIRTY,     /* not handed down yet */
	ITEM_WRITING,   /* handed down, not yet durable there (still dirty: on LIST_WRITING) */
	ITEM_CLEAN,     /* durable in the lower tier (or promoted from it) */
	ITEM_REFUSED,   /* the lower tier would not take it: not retried */
};


struct l1_item {
	struct index_entry entry;   /* first: the index hands back this pointer */
	struct evict_node order[ORDERS];
	TAILQ_ENTRY(l1_item) link[LISTS];
	const struct kvt_ns *ns;
	uint32_t pins;
	uint16_t nparts;
	uint16_t nstored;
	uint8_t write;              /* enum item_write, once complete */
	bool on_dirty;              /* linked on LIST_DIRTY */
	bool write_pinned;          /* the lower tier writes from its slots: stays put, not evicted */
	struct l1_part parts[];
};

struct l1_lease {
	uint64_t id;                /* 0 while free */
	uint64_t expiry_ms;
	TAILQ_ENTRY(l1_lease) order;   /* in expiry order while held */
	SLIST_ENTRY(l1_lease) free_link;  /* or on the free list */
	uint32_t generation;
	uint32_t nitems;
	uint64_t bytes;             /* of its items, when taken */
	struct l1_item **items;
};

static const char *const evict_reason_names[L1_EVICT_NREASONS] = {
	[L1_EVICT_WATERMARK] = "watermark",
	[L1_EVICT_CAPACITY] = "capacity",
	[L1_EVICT_ADMIN] = "admin",
	[L1_EVICT_QUOTA] = "quota",
};

const char *l1_evict_reason_name(enum l1_evict_reason reason)
{
	return evict_reason_names[reason];
}


/* --- eviction orders (the policy's) and L1's own lists, of unpinned items --- */

/* List `which` of L1's own. */
static struct l1_items *list_of(struct l1 *l1, enum l1_list which)
{
	return which == LIST_DIRTY ? &l1->dirty : &l1->writing;
}

/* The order w of it: every item's, or its namespace's. */
static struct evict_order *order_of(struct l1 *l1, const struct l1_item *it, enum l1_order w)
{
	return w == ORDER_ALL ? &l1->order : &((struct kvt_ns *)it->ns)->l1_order;
}

/* The item of a node of order w. */
static struct l1_item *item_of(struct evict_node *n, enum l1_order w)
{
	return n ? (struct l1_item *)((char *)(n - w) - offsetof(struct l1_item, order)) : NULL;
}

static bool item_complete(const struct l1_item *it);

static void list_unlink(struct l1 *l1, struct l1_item *it, enum l1_list w)
{
	TAILQ_REMOVE(list_of(l1, w), it, link[w]);
}

static void list_push_head(struct l1 *l1, struct l1_item *it, enum l1_list w)
{
	TAILQ_INSERT_HEAD(list_of(l1, w), it, link[w]);
}

static void dirty_unlink(struct l1 *l1, struct l1_item *it)
{
	if (it->on_dirty)
		list_unlink(l1, it, LIST_DIRTY);
	it->on_dirty = false;
}

static void dirty_push_head(struct l1 *l1, struct l1_item *it)
{
	if (item_complete(it) && it->write == ITEM_DIRTY) {
		list_push_head(l1, it, LIST_DIRTY);
		it->on_dirty = true;
	}
}

/* It may not be evicted (pinned) or is gone. */
static void lru_unlink(struct l1 *l1, struct l1_item *it)
{
	for (enum l1_order w = 0; w < ORDERS; w++) {
		struct evict_order *o = order_of(l1, it, w);
		o->ops->remove(o, &it->order[w]);
	}
	dirty_unlink(l1, it);
}

/* It may be evicted from now on. */
static void lru_push_head(struct l1 *l1, struct l1_item *it)
{
	for (enum l1_order w = 0; w < ORDERS; w++) {
		struct evict_order *o = order_of(l1, it, w);
		o->ops->track(o, &it->order[w]);
	}
	dirty_push_head(l1, it);
}

/* It was used (a lookup hit). */
static void lru_touch(struct l1 *l1, struct l1_item *it)
{
	if (it->pins)
		return;
	for (enum l1_order w = 0; w < ORDERS; w++) {
		struct evict_order *o = order_of(l1, it, w);
		o->ops->touch(o, &it->order[w]);
	}
	dirty_unlink(l1, it);
	dirty_push_head(l1, it);
}

/* --- items --- */

static bool item_complete(const struct l1_item *it)
{
	return it->nstored == it->nparts;
}

/* The data bytes of a complete item. */
static uint64_t item_bytes(const struct l1_item *it)
{
	uint64_t n = 0;
	for (uint16_t r = 0; r < it->nparts; r++)
		n += it->parts[r].length;
	return n;
}

/* Dirty: what a crash would lose (not handed down, or not yet durable there). */
static bool item_dirty(const struct l1_item *it)
{
	return item_complete(it) && (it->write == ITEM_DIRTY || it->write == ITEM_WRITING);
}

/* A dirty item leaves that state: clean or refused (it is unpinned or pinned). */
static void item_set_written(struct l1 *l1, struct l1_item *it, enum item_write w)
{
	if (!item_dirty(it))
		return;
	STAT_SUB(l1, dirty_items, 1);
	STAT_SUB(l1, dirty_bytes, item_bytes(it));
	dirty_unlink(l1, it);
	if (it->write == ITEM_WRITING)
		list_unlink(l1, it, LIST_WRITING);
	it->write = (uint8_t)w;
}

/* Handed down: dirty until durable, off the dirty list, on the writing list. */
static void item_set_writing(struct l1 *l1, struct l1_item *it)
{
	dirty_unlink(l1, it);
	it->write = ITEM_WRITING;
	list_push_head(l1, it, LIST_WRITING);
}

/* A handed-down item the lower tier no longer holds: dirty again, written again. */
static void item_set_dirty_again(struct l1 *l1, struct l1_item *it)
{
	list_unlink(l1, it, LIST_WRITING);
	it->write = ITEM_DIRTY;
	if (it->pins == 0) {
		list_push_head(l1, it, LIST_DIRTY);
		it->on_dirty = true;
	}
}

static void item_pin(struct l1 *l1, struct l1_item *it)
{
	if (it->pins++ == 0) {
		lru_unlink(l1, it);
		STAT_ADD(l1, pinned_items, 1);
	}
}

static void item_free_part(struct l1 *l1, struct l1_item *it, struct l1_part *part)
{
	struct kvt_ns *ns = (struct kvt_ns *)it->ns;
	if (part->state == PART_STORED)
		it->nstored--;
	arena_free(&l1->arena, part->data);
	ns->l1_bytes -= ns->l1_class->slot_size;
	part->data = NULL;
	part->length = 0;
	part->state = PART_EMPTY;
	STAT_SET(l1, used_bytes, l1->arena.used_bytes);
}

/* Removes an unpinned item from the index and LRU and frees it. */
static void item_destroy(struct l1 *l1, struct l1_item *it)
{
	item_set_written(l1, it, ITEM_CLEAN); /* the gauges forget it */
	if (item_complete(it))
		STAT_SUB(l1, complete_items, 1);
	for (uint16_t r = 0; r < it->nparts; r++)
		if (it->parts[r].data)
			item_free_part(l1, it, &it->parts[r]);
	lru_unlink(l1, it);
	index_remove(&l1->index, &it->entry);
	((struct kvt_ns *)it->ns)->l1_items--;
	STAT_SUB(l1, items, 1);
	free(it);
}

static bool item_has_parts(const struct l1_item *it)
{
	for (uint16_t r = 0; r < it->nparts; r++)
		if (it->parts[r].data)
			return true;
	return false;
}

/* Drops a pin; an item left with no parts at all is removed. */
static void item_unpin(struct l1 *l1, struct l1_item *it)
{
	if (--it->pins > 0)
		return;
	STAT_SUB(l1, pinned_items, 1);
	lru_push_head(l1, it);
	if (!item_has_parts(it))
		item_destroy(l1, it);
}

static struct l1_item *item_find(const struct l1 *l1, const struct kvt_ns *ns,
				 const struct kvt_key *key, uint64_t *hash)
{
	*hash = index_hash(&l1->index, ns->id, key);
	return (struct l1_item *)index_find(&l1->index, ns->id, key, *hash);
}

static struct l1_item *item_create(struct l1 *l1, const struct kvt_ns *ns,
				   const struct kvt_key *key, uint64_t hash)
{
	struct l1_item *it = calloc(1, sizeof(*it) + ns->tp_size * sizeof(it->parts[0]));
	if (!it)
		return NULL;
	it->entry.hash = hash;
	it->entry.ns_tag = ns->id;
	it->entry.key = *key;
	it->ns = ns;
	it->nparts = ns->tp_size;
	index_insert(&l1->index, &it->entry);
	lru_push_head(l1, it);
	((struct kvt_ns *)ns)->l1_items++;
	STAT_ADD(l1, items, 1);
	return it;
}

/* --- eviction --- */

static bool lower_has_room(const struct l1 *l1)
{
	return !l1->lower.has_room || l1->lower.has_room(l1->lower.ctx);
}

static bool has_lower(const struct l1 *l1)
{
	return l1->lower.take_victim != NULL;
}

/*
 * Hands a complete item to the lower tier: as a victim (evicting) or written
 * behind. True when the lower tier keeps reading its slots after the call.
 */
static bool offer_to_lower(struct l1 *l1, struct l1_item *it, enum l1_evict_reason reason,
			   bool evicting)
{
	if (!has_lower(l1) || !item_complete(it))
		return false;
	const uint8_t *parts[KVT_TP_MAX];
	uint32_t lengths[KVT_TP_MAX];
	for (uint16_t r = 0; r < it->nparts; r++) {
		parts[r] = it->parts[r].data;
		lengths[r] = it->parts[r].length;
	}
	struct l1_victim v = {
		.ns = it->ns, .key = &it->entry.key, .nparts = it->nparts,
		.parts = parts, .lengths = lengths, .reason = reason, .evicting = evicting,
		.item = evicting ? NULL : it,
	};
	bool kept = l1->lower.take_victim(l1->lower.ctx, &v);
	if (evicting)
		STAT_ADD(l1, victims_to_lower, 1);
	return kept && !evicting;
}

static void count_eviction(struct l1 *l1, enum l1_evict_reason reason)
{
	switch (reason) {
	case L1_EVICT_WATERMARK: STAT_ADD(l1, evictions_watermark, 1); break;
	case L1_EVICT_CAPACITY: STAT_ADD(l1, evictions_capacity, 1); break;
	case L1_EVICT_ADMIN: STAT_ADD(l1, evictions_admin, 1); break;
	case L1_EVICT_QUOTA: STAT_ADD(l1, evictions_quota, 1); break;
	case L1_EVICT_NREASONS: break;
	}
}

/* Drops one unpinned item, counted as evicted for reason; returns the slot bytes it freed. */
static uint64_t item_drop(struct l1 *l1, struct l1_item *it, enum l1_evict_reason reason)
{
	uint64_t before = l1->arena.used_bytes;
	count_eviction(l1, reason);
	item_destroy(l1, it);
	uint64_t freed = before - l1->arena.used_bytes;
	STAT_ADD(l1, evicted_bytes, freed);
	return freed;
}

/*
 * Evicts one unpinned item: the lower tier is offered it first (it skips a
 * clean one it still holds: no I/O).
 */
static uint64_t item_evict(struct l1 *l1, struct l1_item *it, enum l1_evict_reason reason)
{
	if (has_lower(l1) && item_complete(it)) {
		if (it->write == ITEM_CLEAN)
			STAT_ADD(l1, evictions_clean, 1);
		else
			STAT_ADD(l1, evictions_dirty, 1);
	}
	offer_to_lower(l1, it, reason, true);
	return item_drop(l1, it, reason);
}

/* Whether making room by evicting it would lose the write-behind a wait would give. */
static bool evict_needs_wait(const struct l1 *l1, const struct l1_item *it)
{
	return has_lower(l1) && item_complete(it) && it->write == ITEM_DIRTY;
}

/*
 * The first candidate of order o (of kind w) that may be evicted now: one
 * the lower tier writes from is stepped over (*skipped).
 */
static struct l1_item *evictable(const struct evict_order *o, enum l1_order w, bool *skipped)
{
	*skipped = false;
	struct l1_item *it = item_of(o->ops->first(o), w);
	while (it && it->write_pinned) {
		*skipped = true;
		it = item_of(o->ops->next(o, &it->order[w]), w);
	}
	return it;
}

/* Whether reclaiming region r would evict a dirty item. */
static bool region_has_dirty(struct l1 *l1, uint32_t r)
{
	uint32_t nslots;
	for (uint32_t i = 0;; i++) {
		struct l1_item *owner = arena_region_owner(&l1->arena, r, i, &nslots);
		if (i >= nslots)
			return false;
		if (owner && owner->pins == 0 && (owner->write_pinned || evict_needs_wait(l1, owner)))
			return true;
	}
}

static bool lower_holds(const struct l1 *l1, const struct l1_item *it)
{
	return l1->lower.contains && l1->lower.contains(l1->lower.ctx, it->ns, &it->entry.key);
}

/* A handed-down item: clean once durable, dirty again if the lower tier lost it. */
static void confirm_write(struct l1 *l1, struct l1_item *it)
{
	if (!has_lower(l1) || !lower_holds(l1, it))
		item_set_dirty_again(l1, it);
	else if (!l1->lower.durable || l1->lower.durable(l1->lower.ctx, it->ns, &it->entry.key))
		item_set_written(l1, it, ITEM_CLEAN);
}

/* The items handed down earlier whose slots the lower tier does not read (it copied them). */
static void confirm_writes(struct l1 *l1)
{
	for (struct l1_item *it = TAILQ_LAST(&l1->writing, l1_items), *prev; it; it = prev) {
		prev = TAILQ_PREV(it, l1_items, link[LIST_WRITING]);
		if (!it->write_pinned)
			confirm_write(l1, it);
	}
}

/*
 * The lower tier writes from its slots until l1_write_released: the item
 * keeps its LRU place (loads go on) but is never evicted meanwhile.
 */
static void write_pin(struct l1 *l1, struct l1_item *it)
{
	it->write_pinned = true;
	l1->write_pinned_items++;
	l1->write_pinned_bytes += item_bytes(it);
}

void l1_write_released(struct l1 *l1, struct l1_item *it)
{
	it->write_pinned = false;
	l1->write_pinned_items--;
	l1->write_pinned_bytes -= item_bytes(it);
	if (it->write == ITEM_WRITING)
		confirm_write(l1, it);
}

unsigned l1_write_behind(struct l1 *l1, unsigned max)
{
	unsigned n = 0;
	if (!has_lower(l1))
		return 0;
	confirm_writes(l1);
	while (n < max && !TAILQ_EMPTY(&l1->dirty) && lower_has_room(l1) &&
	       l1->write_pinned_bytes < l1->arena.size / L1_WRITER_SHARE &&
	       l1->write_pinned_items < L1_WRITER_MAX_ITEMS) {
		struct l1_item *it = TAILQ_LAST(&l1->dirty, l1_items);
		bool kept = offer_to_lower(l1, it, L1_EVICT_WATERMARK, false);
		if (lower_holds(l1, it)) {
			STAT_ADD(l1, written_behind, 1);
			STAT_ADD(l1, written_behind_bytes, item_bytes(it));
			item_set_writing(l1, it);
			if (kept)
				write_pin(l1, it);
		} else {
			STAT_ADD(l1, unwritable_items, 1);
			item_set_written(l1, it, ITEM_REFUSED);
		}
		n++;
	}
	confirm_writes(l1); /* a lower tier that is durable at once */
	return n;
}


uint64_t l1_evict(struct l1 *l1, uint64_t bytes, enum l1_evict_reason reason)
{
	uint64_t freed = 0;
	bool skipped;
	struct l1_item *it;
	while (freed < bytes && (it = evictable(&l1->order, ORDER_ALL, &skipped)) &&
	       ((reason != L1_EVICT_WATERMARK && reason != L1_EVICT_ADMIN) || lower_has_room(l1)))
		freed += item_evict(l1, it, reason);
	return freed;
}

/*
 * Keeps ns within its quota with one more slot: its own least-recent items
 * go first. -KVT_EQUOTA when what it holds over the quota is all pinned.
 */
static int fit_quota(struct l1 *l1, struct kvt_ns *ns, uint64_t more)
{
	bool skipped;
	while (ns->l1_quota && ns->l1_bytes + more > ns->l1_quota) {
		struct l1_item *it = evictable(&ns->l1_order, ORDER_NS, &skipped);
		if (!it)
			return -KVT_EQUOTA;
		item_evict(l1, it, L1_EVICT_QUOTA);
		ns->l1_quota_evictions++;
	}
	return 0;
}

/* Evicts every unpinned item with a part in region r. */
static void reclaim_region(struct l1 *l1, uint32_t r)
{
	uint32_t nslots;
	for (uint32_t i = 0;; i++) {
		struct l1_item *owner = arena_region_owner(&l1->arena, r, i, &nslots);
		if (i >= nslots)
			break;
		if (owner && owner->pins == 0 && !owner->write_pinned)
			item_evict(l1, owner, L1_EVICT_CAPACITY);
	}
}

static const uint8_t *item_any_slot(const struct l1_item *it)
{
	for (uint16_t r = 0; r < it->nparts; r++)
		if (it->parts[r].data)
			return it->parts[r].data;
	return NULL;
}

/*
 * Makes a slot of class c available: first the watermarks (a high watermark
 * of 1 turns them off: eviction then frees only what each store needs), then, when c has
 * no free slot and no region is free, the LRU victim goes; if it is of
 * another class, so does every unpinned item sharing its region, which
 * frees the whole region for c. Every round removes at least the LRU tail,
 * so this ends. With L1_STORE_WAIT_DIRTY, -EAGAIN before a dirty item would go.
 */
static int make_room(struct l1 *l1, struct arena_class *c, unsigned flags)
{
	bool wait = flags & L1_STORE_WAIT_DIRTY;
	uint64_t used = l1->arena.used_bytes;
	if (l1->high_watermark < 1.0 && used + c->slot_size > l1->high_bytes)
		l1_evict(l1, used + c->slot_size - l1->low_bytes, L1_EVICT_WATERMARK);
	while (!arena_can_alloc(&l1->arena, c)) {
		bool skipped;
		struct l1_item *victim = evictable(&l1->order, ORDER_ALL, &skipped);
		if (wait && skipped) { /* evicting a newer item would break LRU order */
			STAT_ADD(l1, store_waits, 1);
			return -EAGAIN;
		}
		if (!victim)
			return -KVT_EALLPINNED;
		const uint8_t *slot = item_any_slot(victim);
		bool whole_region = victim->ns->l1_class != c && slot;
		uint32_t r = whole_region ? arena_region_index(&l1->arena, slot) : 0;
		if (wait && (whole_region ? region_has_dirty(l1, r) : evict_needs_wait(l1, victim))) {
			STAT_ADD(l1, store_waits, 1);
			return -EAGAIN;
		}
		if (whole_region)
			reclaim_region(l1, r);
		else
			item_evict(l1, victim, L1_EVICT_CAPACITY);
	}
	return 0;
}

/* --- lifecycle --- */

static void set_watermark_bytes(struct l1 *l1, double high, double low)
{
	l1->high_watermark = high;
	l1->low_watermark = low;
	l1->high_bytes = (uint64_t)(high * (double)l1->arena.size);
	l1->low_bytes = (uint64_t)(low * (double)l1->arena.size);
}

static bool watermarks_valid(double high, double low)
{
	return low > 0.0 && low < high && high <= 1.0;
}

int l1_init(struct l1 *l1, const struct l1_config *cfg)
{
	memset(l1, 0, sizeof(*l1));
	TAILQ_INIT(&l1->lease_order);
	if (!watermarks_valid(cfg->high_watermark, cfg->low_watermark) ||
	    cfg->max_leases == 0)
		return -EINVAL;
	int err = arena_init(&l1->arena, cfg->size, cfg->region_size, cfg->hugepages);
	if (err)
		return err;
	/*
	 * Size the index for the most items the arena can hold (one per 4 KiB
	 * slot), up to 4 Mi buckets (32 MiB): below that it never rehashes,
	 * which would stall the event loop for tens of ms at a million items.
	 */
	uint64_t max_items = l1->arena.size / ARENA_SLOT_ALIGN;
	err = index_init(&l1->index, max_items < L1_INDEX_MAX_PRESIZE ? max_items
								  : L1_INDEX_MAX_PRESIZE);
	evict_order_init(&l1->order, &lru_policy);
	TAILQ_INIT(&l1->dirty);
	TAILQ_INIT(&l1->writing);
	if (err)
		goto fail;
	l1->leases = calloc(cfg->max_leases, sizeof(*l1->leases));
	if (!l1->leases) {
		err = -ENOMEM;
		goto fail;
	}
	l1->max_leases = cfg->max_leases;
	l1->max_lease_ms = cfg->max_lease_ms;
	for (uint32_t i = cfg->max_leases; i-- > 0;)
		SLIST_INSERT_HEAD(&l1->lease_free, &l1->leases[i], free_link);
	set_watermark_bytes(l1, cfg->high_watermark, cfg->low_watermark);
	STAT_SET(l1, capacity_bytes, l1->arena.size);
	return 0;
fail:
	l1_destroy(l1);
	return err;
}

static void lease_drop(struct l1 *l1, struct l1_lease *lease);

void l1_destroy(struct l1 *l1)
{
	while (!TAILQ_EMPTY(&l1->lease_order))
		lease_drop(l1, TAILQ_FIRST(&l1->lease_order));
	if (l1->index.buckets) {
		for (uint64_t b = 0; b <= l1->index.mask; b++) {
			struct index_entry *e = l1->index.buckets[b];
			while (e) {
				struct index_entry *next = e->next;
				free(e);
				e = next;
			}
		}
	}
	free(l1->leases);
	index_destroy(&l1->index);
	arena_destroy(&l1->arena);
	memset(l1, 0, sizeof(*l1));
}

int l1_ns_open(struct l1 *l1, struct kvt_ns *ns)
{
	int err = 0;
	struct arena_class *c = arena_class_get(&l1->arena, ns->block_bytes, &err);
	if (!c)
		return err;
	ns->l1_class = c;
	if (!ns->l1_order.ops) /* opened once; a namespace is opened again by each HELLO */
		evict_order_init(&ns->l1_order, l1->order.ops);
	return 0;
}

uint64_t l1_ns_drop(struct l1 *l1, const struct kvt_ns *ns, uint64_t *pinned)
{
	uint64_t freed = 0;
	bool skipped;
	struct l1_item *it;
	/* Every unpinned item of ns is on its list; none goes lower. */
	while ((it = evictable(&ns->l1_order, ORDER_NS, &skipped)))
		freed += item_drop(l1, it, L1_EVICT_ADMIN);
	*pinned = ns->l1_items;
	return freed;
}

int l1_ns_set_quota(struct l1 *l1, struct kvt_ns *ns, uint64_t bytes)
{
	if (bytes && ns->l1_class && bytes < ns->l1_class->slot_size)
		return -ERANGE;
	ns->l1_quota = bytes;
	(void)fit_quota(l1, ns, 0); /* pinned items over it stay; stores then evict them first */
	return 0;
}

void l1_set_lower_tier(struct l1 *l1, const struct l1_lower_tier *lower)
{
	if (lower)
		l1->lower = *lower;
	else
		memset(&l1->lower, 0, sizeof(l1->lower));
}

void l1_set_max_lease(struct l1 *l1, uint32_t max_lease_ms)
{
	l1->max_lease_ms = max_lease_ms;
}

int l1_set_watermarks(struct l1 *l1, double high, double low)
{
	if (!watermarks_valid(high, low))
		return -EINVAL;
	set_watermark_bytes(l1, high, low);
	if (high < 1.0 && l1->arena.used_bytes > l1->high_bytes)
		l1_evict(l1, l1->arena.used_bytes - l1->low_bytes, L1_EVICT_WATERMARK);
	return 0;
}

/* --- store and load --- */

int l1_store_begin(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *key,
		   uint16_t rank, uint32_t length, unsigned flags, struct l1_ref *ref)
{
	if (rank >= ns->tp_size)
		return -EINVAL;
	if (length == 0 || length > ns->block_bytes)
		return -ERANGE;
	uint64_t hash;
	struct l1_item *it = item_find(l1, ns, key, &hash);
	if (it && it->parts[rank].state != PART_EMPTY) {
		STAT_ADD(l1, parts_duplicate, 1);
		return -EEXIST;
	}
	if (!it && !(it = item_create(l1, ns, key, hash))) {
		STAT_ADD(l1, store_failures, 1);
		return -ENOMEM;
	}
	item_pin(l1, it); /* keeps make_room from evicting the item we fill */
	int err = fit_quota(l1, (struct kvt_ns *)ns, ns->l1_class->slot_size);
	if (!err)
		err = make_room(l1, ns->l1_class, flags);
	void *slot = err ? NULL : arena_alloc(&l1->arena, ns->l1_class, it);
	if (!slot) {
		STAT_ADD(l1, store_failures, 1);
		item_unpin(l1, it);
		return err ? err : -KVT_EALLPINNED;
	}
	((struct kvt_ns *)ns)->l1_bytes += ns->l1_class->slot_size;
	STAT_SET(l1, used_bytes, l1->arena.used_bytes);
	struct l1_part *part = &it->parts[rank];
	part->data = slot;
	part->length = length;
	part->state = PART_WRITING;
	/* The lower tier writes whole 4 KiB blocks from the slot: no stale bytes in them. */
	memset((uint8_t *)slot + length, 0, arena_slot_size(length) - length);
	*ref = (struct l1_ref){.item = it, .rank = rank, .data = slot, .length = length};
	return 0;
}

bool l1_store_commit(struct l1 *l1, struct l1_ref *ref)
{
	struct l1_item *it = ref->item;
	it->parts[ref->rank].state = PART_STORED;
	bool completed = ++it->nstored == it->nparts;
	if (completed) {
		STAT_ADD(l1, complete_items, 1);
		it->write = ref->clean ? ITEM_CLEAN : ITEM_DIRTY;
		if (it->write == ITEM_DIRTY) {
			STAT_ADD(l1, dirty_items, 1);
			STAT_ADD(l1, dirty_bytes, item_bytes(it));
		}
	}
	STAT_ADD(l1, parts_stored, 1);
	STAT_ADD(l1, bytes_stored, ref->length);
	item_unpin(l1, it);
	ref->item = NULL;
	return completed;
}

void l1_store_abort(struct l1 *l1, struct l1_ref *ref)
{
	item_free_part(l1, ref->item, &ref->item->parts[ref->rank]);
	STAT_ADD(l1, store_failures, 1);
	item_unpin(l1, ref->item);
	ref->item = NULL;
}

int l1_load_begin(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, struct l1_ref *ref)
{
	if (rank >= ns->tp_size)
		return -EINVAL;
	uint64_t hash;
	struct l1_item *it = item_find(l1, ns, key, &hash);
	if (!it || !item_complete(it)) {
		STAT_ADD(l1, load_misses, 1);
		return -ENOENT;
	}
	item_pin(l1, it);
	const struct l1_part *part = &it->parts[rank];
	*ref = (struct l1_ref){.item = it, .rank = rank, .data = part->data,
			       .length = part->length};
	return 0;
}

void l1_load_end(struct l1 *l1, struct l1_ref *ref)
{
	STAT_ADD(l1, loads, 1);
	STAT_ADD(l1, bytes_loaded, ref->length);
	item_unpin(l1, ref->item);
	ref->item = NULL;
}

/* --- leases --- */

static void lease_list_insert(struct l1 *l1, struct l1_lease *lease)
{
	/* Leases mostly share one TTL, so the right place is near the tail. */
	struct l1_lease *after = TAILQ_LAST(&l1->lease_order, l1_leases);
	while (after && after->expiry_ms > lease->expiry_ms)
		after = TAILQ_PREV(after, l1_leases, order);
	if (after)
		TAILQ_INSERT_AFTER(&l1->lease_order, after, lease, order);
	else
		TAILQ_INSERT_HEAD(&l1->lease_order, lease, order);
}

static void lease_drop(struct l1 *l1, struct l1_lease *lease)
{
	TAILQ_REMOVE(&l1->lease_order, lease, order);
	for (uint32_t i = 0; i < lease->nitems; i++)
		item_unpin(l1, lease->items[i]);
	free(lease->items);
	lease->items = NULL;
	lease->nitems = 0;
	lease->id = 0;
	lease->generation++;
	SLIST_INSERT_HEAD(&l1->lease_free, lease, free_link);
	STAT_SUB(l1, leases_active, 1);
}

static int lease_take(struct l1 *l1, struct l1_item **items, uint32_t nitems,
		      uint64_t expiry_ms, uint64_t *lease_id)
{
	struct l1_lease *lease = SLIST_FIRST(&l1->lease_free);
	if (!lease)
		return -ENOSPC;
	lease->items = malloc(nitems * sizeof(*lease->items));
	if (!lease->items)
		return -ENOMEM;
	SLIST_REMOVE_HEAD(&l1->lease_free, free_link);
	memcpy(lease->items, items, nitems * sizeof(*items));
	lease->nitems = nitems;
	lease->bytes = 0;
	for (uint32_t i = 0; i < nitems; i++) {
		item_pin(l1, items[i]);
		lease->bytes += item_bytes(items[i]);
	}
	lease->expiry_ms = expiry_ms;
	lease->id = ((uint64_t)lease->generation << 32) | (uint64_t)(lease - l1->leases + 1);
	lease_list_insert(l1, lease);
	*lease_id = lease->id;
	STAT_ADD(l1, leases_taken, 1);
	STAT_ADD(l1, leases_active, 1);
	return 0;
}

static struct l1_lease *lease_find(const struct l1 *l1, uint64_t lease_id)
{
	uint64_t slot = lease_id & 0xffffffffu;
	if (slot == 0 || slot > l1->max_leases || l1->leases[slot - 1].id != lease_id)
		return NULL;
	return &l1->leases[slot - 1];
}

bool l1_lease_active(const struct l1 *l1, uint64_t lease_id)
{
	return lease_find(l1, lease_id) != NULL;
}

uint64_t l1_lease_bytes(const struct l1 *l1, uint64_t lease_id)
{
	const struct l1_lease *lease = lease_find(l1, lease_id);
	return lease ? lease->bytes : 0;
}

int l1_lease_release(struct l1 *l1, uint64_t lease_id)
{
	struct l1_lease *lease = lease_find(l1, lease_id);
	if (!lease)
		return -ENOENT;
	lease_drop(l1, lease);
	STAT_ADD(l1, leases_released, 1);
	return 0;
}

unsigned l1_lease_expire(struct l1 *l1, uint64_t now_ms)
{
	unsigned n = 0;
	struct l1_lease *first;
	while ((first = TAILQ_FIRST(&l1->lease_order)) && first->expiry_ms <= now_ms) {
		lease_drop(l1, first);
		STAT_ADD(l1, leases_expired, 1);
		n++;
	}
	return n;
}

uint64_t l1_lease_next_expiry(const struct l1 *l1)
{
	const struct l1_lease *first = TAILQ_FIRST(&l1->lease_order);
	return first ? first->expiry_ms : UINT64_MAX;
}

/* --- lookup --- */

int l1_lookup(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *keys,
	      uint32_t nkeys, uint8_t *tiers, uint32_t lease_ms, uint64_t now_ms,
	      const struct l1_below *below, uint32_t *hits, uint64_t *lease_id)
{
	struct l1_item *found[256];
	struct l1_item **leased = found;
	uint32_t nleased = 0, i;
	if (lease_ms && nkeys > sizeof(found) / sizeof(found[0]) &&
	    !(leased = malloc(nkeys * sizeof(*leased))))
		return -ENOMEM;

	STAT_ADD(l1, lookups, 1);
	for (i = 0; i < nkeys; i++) {
		uint64_t hash;
		struct l1_item *it = item_find(l1, ns, &keys[i], &hash);
		if (it && item_complete(it)) {
			tiers[i] = KVT_TIER_L1;
			lru_touch(l1, it);
			if (lease_ms)
				leased[nleased++] = it;
			STAT_ADD(l1, lookup_hits, 1);
		} else if (!below || (tiers[i] = below->held(below->ctx, ns, &keys[i])) ==
					     KVT_TIER_NONE) {
			break;
		}
	}
	*hits = i;
	if (i < nkeys)
		STAT_ADD(l1, lookup_misses, 1);
	for (; i < nkeys; i++)
		tiers[i] = KVT_TIER_NONE;

	int err = 0;
	*lease_id = 0;
	if (nleased) {
		uint32_t ttl = lease_ms < l1->max_lease_ms ? lease_ms : l1->max_lease_ms;
		err = lease_take(l1, leased, nleased, now_ms + ttl, lease_id);
	}
	if (leased != found)
		free(leased);
	return err;
}

/* --- stats and invariants --- */

void l1_stats_read(const struct l1 *l1, struct l1_stats_snapshot *out)
{
	_Static_assert(sizeof(*out) == sizeof(l1->stats), "the snapshot mirrors the stats");
	stats_copy(&l1->stats, out, sizeof(*out));
}

#define STAT_LIVE struct l1_stats
static const struct stat_def l1_stat_defs[] = {L1_STATS(STAT_DEF)};
#undef STAT_LIVE

void l1_stats_visit(const struct l1 *l1, stat_visit_fn fn, void *ctx)
{
	stats_visit(l1_stat_defs, sizeof(l1_stat_defs) / sizeof(l1_stat_defs[0]), &l1->stats, fn,
		    ctx);
}

#define VERIFY(cond, msg)          \
	do {                       \
		if (!(cond)) {     \
			*what = msg; \
			return -EFAULT; \
		}                  \
	} while (0)

static int verify_item(const struct l1 *l1, const struct l1_item *it,
		       uint64_t *slot_bytes, const char **what)
{
	uint64_t hash = index_hash(&l1->index, it->entry.ns_tag, &it->entry.key);
	VERIFY(index_find(&l1->index, it->entry.ns_tag, &it->entry.key, hash) ==
		       &it->entry, "an item is not findable under its key");
	uint16_t stored = 0;
	for (uint16_t r = 0; r < it->nparts; r++) {
		const struct l1_part *p = &it->parts[r];
		VERIFY((p->data != NULL) == (p->state != PART_EMPTY),
		       "a part's slot disagrees with its state");
		VERIFY(p->length <= it->ns->block_bytes, "a part is longer than a block");
		if (p->data)
			*slot_bytes += it->ns->l1_class->slot_size;
		stored += p->state == PART_STORED;
	}
	VERIFY(stored == it->nstored, "an item's stored-part count is wrong");
	VERIFY(it->pins > 0 || item_has_parts(it), "an unpinned item holds no part");
	return 0;
}

int l1_verify(const struct l1 *l1, const char **what)
{
	uint64_t items = 0, complete = 0, pinned = 0, slot_bytes = 0, in_lru = 0;
	uint64_t dirty = 0, dirty_bytes = 0, dirty_unpinned = 0, writing = 0, writing_unpinned = 0;
	uint64_t write_pinned = 0, write_pinned_bytes = 0;
	for (uint64_t b = 0; b <= l1->index.mask; b++) {
		for (const struct index_entry *e = l1->index.buckets[b]; e; e = e->next) {
			const struct l1_item *it = (const struct l1_item *)e;
			int err = verify_item(l1, it, &slot_bytes, what);
			if (err)
				return err;
			items++;
			complete += item_complete(it);
			pinned += it->pins > 0;
			if (item_dirty(it)) {
				dirty++;
				dirty_bytes += item_bytes(it);
				dirty_unpinned += it->pins == 0;
			}
			if (item_complete(it) && it->write == ITEM_WRITING) {
				writing++;
				writing_unpinned += it->pins == 0;
			}
			VERIFY(it->on_dirty == (item_complete(it) && it->write == ITEM_DIRTY &&
						it->pins == 0),
			       "an item's place on the dirty list disagrees with its state");
			if (it->write_pinned) {
				VERIFY(item_complete(it) && it->write == ITEM_WRITING,
				       "an item written from its slots is not being written");
				write_pinned++;
				write_pinned_bytes += item_bytes(it);
			}
		}
	}
	VERIFY(write_pinned == l1->write_pinned_items && write_pinned_bytes == l1->write_pinned_bytes,
	       "the count of items written from their slots is wrong");
	const struct evict_order *o = &l1->order;
	for (struct evict_node *n = o->ops->first(o); n; n = o->ops->next(o, n)) {
		VERIFY(item_of(n, ORDER_ALL)->pins == 0, "a pinned item is in the eviction order");
		VERIFY(++in_lru <= items, "the eviction order has a loop");
	}
	VERIFY(in_lru == o->count, "the eviction order's count is wrong");
	const struct l1_item *prev = NULL;
	uint64_t on_dirty = 0;
	prev = NULL;
	for (struct l1_item *it = TAILQ_FIRST(&l1->dirty); it;
	     prev = it, it = TAILQ_NEXT(it, link[LIST_DIRTY])) {
		VERIFY(TAILQ_PREV(it, l1_items, link[LIST_DIRTY]) == prev, "the dirty list is broken");
		VERIFY(on_dirty <= items, "the dirty list has a loop");
		on_dirty++;
	}
	VERIFY(prev == TAILQ_LAST(&l1->dirty, l1_items), "the dirty list's tail is wrong");
	VERIFY(on_dirty == dirty_unpinned - writing_unpinned, "the dirty list misses dirty items");
	uint64_t on_writing = 0;
	prev = NULL;
	for (struct l1_item *it = TAILQ_FIRST(&l1->writing); it;
	     prev = it, it = TAILQ_NEXT(it, link[LIST_WRITING])) {
		VERIFY(it->write == ITEM_WRITING, "an item on the writing list is not being written");
		VERIFY(TAILQ_PREV(it, l1_items, link[LIST_WRITING]) == prev,
		       "the writing list is broken");
		VERIFY(on_writing <= items, "the writing list has a loop");
		on_writing++;
	}
	VERIFY(prev == TAILQ_LAST(&l1->writing, l1_items), "the writing list's tail is wrong");
	VERIFY(on_writing == writing, "the writing list misses items being written");
	VERIFY(in_lru + pinned == items, "the eviction order misses unpinned items");
	VERIFY(items == l1->index.count, "the index count is wrong");
	VERIFY(slot_bytes == l1->arena.used_bytes, "used bytes differ from the slots held");
	VERIFY(l1->arena.used_bytes <= l1->arena.size, "usage exceeds capacity");
	struct l1_stats_snapshot s;
	l1_stats_read(l1, &s);
	VERIFY(s.items == items && s.complete_items == complete &&
		       s.pinned_items == pinned && s.used_bytes == slot_bytes &&
		       s.dirty_items == dirty && s.dirty_bytes == dirty_bytes,
	       "a gauge disagrees with the items");
	return 0;
}
