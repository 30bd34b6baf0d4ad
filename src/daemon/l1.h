/*
 * l1.h — the L1 tier engine: items of (namespace, key) whose parts (one per
 * tensor-parallel rank) live in arena slots; the index; LRU order; eviction
 * between a high and a low watermark; pins and leases; prefix lookups; and
 * the counters of all of it.
 *
 * The order of eviction is a policy's (evict_policy.h; LRU, lru.h).
 *
 * A library with no sockets or threads of its own. Every call comes from one
 * owner thread; l1_stats_read() may be called from any thread at any time.
 * Time is passed in (now_ms, a monotonic clock), so leases are testable.
 *
 * A lower tier (L2) plugs in with struct l1_lower_tier: it receives complete
 * victims before their slots are freed. Lookups ask what is below L1
 * through struct l1_below (the tier stack, tiers.h).
 *
 * Write-behind: a complete item is dirty (not yet handed to the lower tier,
 * or handed and not yet durable there) or clean (durable there, or promoted
 * from it). l1_write_behind hands dirty items
 * down, LRU end first, without evicting them, so that the eviction end of
 * L1 is normally clean; evicting a clean item the lower tier still holds
 * costs no I/O, and a store that would evict a dirty one may be told to
 * wait (L1_STORE_WAIT_DIRTY) instead of losing it.
 */
#ifndef KVTD_L1_H
#define KVTD_L1_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "arena.h"
#include "index.h"
#include "kvtier/kvtier.h"
#include "ns.h"
#include "stat_table.h"

enum kvt_tier {
	KVT_TIER_NONE = 0,
	KVT_TIER_L1 = 1,
	KVT_TIER_L2 = 2,
	KVT_TIER_L3 = 3,
};

enum l1_evict_reason {
	L1_EVICT_WATERMARK,   /* usage passed the high watermark */
	L1_EVICT_CAPACITY,    /* no slot of the needed size was left */
	L1_EVICT_ADMIN,       /* an operator asked */
	L1_EVICT_QUOTA,       /* its namespace reached its L1 quota */
	L1_EVICT_NREASONS
};
const char *l1_evict_reason_name(enum l1_evict_reason reason);

/* The L1 engine's counters and gauges (stat_table.h's shape). */
#define L1_STATS(X) \
	X(lookups, COUNTER, "kvtier_lookups_total", "", "Prefix lookups.") \
	X(lookup_hits, COUNTER, "kvtier_lookup_blocks_total", "tier=\"l1\",result=\"hit\"", \
	  "Keys answered by lookups, by tier and result (a miss ends a chain).") \
	X(lookup_misses, COUNTER, "kvtier_lookup_blocks_total", "tier=\"none\",result=\"miss\"", \
	  "Lookups that stopped at an absent key.") \
	X(parts_stored, COUNTER, "", "", "Parts stored.") \
	X(parts_duplicate, COUNTER, "", "", "Part stores skipped: already stored.") \
	X(store_failures, COUNTER, "", "", "Part stores refused (no space or aborted).") \
	X(bytes_stored, COUNTER, "kvtier_stored_bytes_total", "tier=\"l1\"", \
	  "Bytes stored, by tier (L2: records written, headers and padding included).") \
	X(loads, COUNTER, "", "", "Part loads served.") \
	X(load_misses, COUNTER, "", "", "Part loads of absent blocks.") \
	X(bytes_loaded, COUNTER, "kvtier_loaded_bytes_total", "tier=\"l1\"", "Bytes loaded, by tier.") \
	X(evictions_watermark, COUNTER, "kvtier_evictions_total", \
	  "tier=\"l1\",reason=\"watermark\"", "Items evicted, by tier and reason.") \
	X(evictions_capacity, COUNTER, "kvtier_evictions_total", \
	  "tier=\"l1\",reason=\"capacity\"", "Items evicted for want of a slot.") \
	X(evictions_admin, COUNTER, "kvtier_evictions_total", "tier=\"l1\",reason=\"admin\"", \
	  "Items evicted by an operator.") \
	X(evictions_quota, COUNTER, "kvtier_evictions_total", "tier=\"l1\",reason=\"quota\"", \
	  "Items evicted to keep their namespace within its L1 quota.") \
	X(evicted_bytes, COUNTER, "", "", "Bytes of slots freed by eviction.") \
	X(victims_to_lower, COUNTER, "", "", "Evicted items handed to the lower tier.") \
	X(evictions_clean, COUNTER, "kvtier_l1_victims_total", "state=\"clean\"", \
	  "L1 victims with a lower tier, by their state: clean (the lower tier had them).") \
	X(evictions_dirty, COUNTER, "kvtier_l1_victims_total", "state=\"dirty\"", \
	  "L1 victims not yet written behind: written at eviction, or dropped by L2.") \
	X(written_behind, COUNTER, "kvtier_l1_written_behind_total", "", \
	  "Dirty items handed to the lower tier by the writer (they stay in L1, clean).") \
	X(written_behind_bytes, COUNTER, "kvtier_l1_written_behind_bytes_total", "", \
	  "Data bytes of the items the writer handed to the lower tier.") \
	X(unwritable_items, COUNTER, "", "", \
	  "Dirty items the lower tier refused (too large, quota, off): not retried.") \
	X(store_waits, COUNTER, "", "", \
	  "Stores told to wait: making room would have evicted a dirty item.") \
	X(leases_taken, COUNTER, "kvtier_leases_total", "event=\"taken\"", \
	  "Leases, by how they began or ended.") \
	X(leases_released, COUNTER, "kvtier_leases_total", "event=\"released\"", \
	  "Leases released by their holder.") \
	X(leases_expired, COUNTER, "kvtier_leases_total", "event=\"expired\"", \
	  "Leases that expired.") \
	X(capacity_bytes, GAUGE, "kvtier_tier_capacity_bytes", "tier=\"l1\"", \
	  "Bytes a tier can hold.") \
	X(used_bytes, GAUGE, "kvtier_tier_used_bytes", "tier=\"l1\"", "Bytes of a tier in use.") \
	X(items, GAUGE, "kvtier_tier_items", "tier=\"l1\"", \
	  "Items (blocks) held by a tier, complete or not.") \
	X(complete_items, GAUGE, "", "", "Items with every part stored.") \
	X(dirty_items, GAUGE, "kvtier_l1_dirty_items", "", \
	  "Complete items not yet written to the lower tier.") \
	X(dirty_bytes, GAUGE, "kvtier_l1_dirty_bytes", "", \
	  "Data bytes of the dirty items: what a crash would lose now.") \
	X(pinned_items, GAUGE, "kvtier_pins_active", "", "Items pinned by a copy or a lease.") \
	X(leases_active, GAUGE, "kvtier_leases_active", "", "Leases held.")

struct l1_stats {
	L1_STATS(STAT_LIVE_FIELD)
};

/* A plain copy of the stats, read field by field without stopping the engine. */
struct l1_stats_snapshot {
	L1_STATS(STAT_SNAP_FIELD)
};

struct l1_item;

/*
 * A victim handed to the lower tier; the bytes are valid during the call
 * only, unless take_victim keeps them (written behind only: then until
 * l1_write_released(item)).
 */
struct l1_victim {
	const struct kvt_ns *ns;
	const struct kvt_key *key;
	uint16_t nparts;
	const uint8_t *const *parts;
	const uint32_t *lengths;
	enum l1_evict_reason reason;
	bool evicting;             /* false: written behind, the item stays in L1 */
	struct l1_item *item;      /* written behind: what l1_write_released takes */
};

struct l1_lower_tier {
	void *ctx;
	/* Whether the lower tier holds (ns, key) complete. */
	bool (*contains)(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key);
	/*
	 * Takes a complete victim; must not call back into L1. Returns true when
	 * it goes on reading a written-behind item's slots after the call (never
	 * for an evicting one): the item is then never evicted, its slots
	 * unchanged, until the lower tier calls l1_write_released.
	 */
	bool (*take_victim)(void *ctx, const struct l1_victim *victim);
	/*
	 * Whether it would write a victim now (NULL: always). Watermark and admin
	 * eviction wait while it would not, so that a busy lower tier does not
	 * turn evictions L1 has time for into dropped victims; eviction for want
	 * of a slot (or of quota) does not wait.
	 */
	bool (*has_room)(void *ctx);
	/*
	 * Whether what it holds of (ns, key) is on disk (NULL: once held). An
	 * item written behind stays dirty until then: the dirty gauges are what
	 * a crash would lose.
	 */
	bool (*durable)(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key);
};

struct l1_config {
	uint64_t size;             /* arena bytes */
	uint64_t region_size;      /* bytes of one region */
	bool hugepages;
	double high_watermark;     /* fraction of capacity, 0 < low < high <= 1; 1: off */
	double low_watermark;
	uint32_t max_leases;
	uint32_t max_lease_ms;     /* longer leases are cut to this */
};

struct l1_lease;
TAILQ_HEAD(l1_items, l1_item);

struct l1 {
	struct arena arena;
	struct index index;
	struct evict_order order;  /* the unpinned items, in the policy's order (evict_policy.h) */
	struct l1_items dirty;     /* the dirty unpinned items, most recently used first */
	struct l1_items writing;   /* handed down, not yet durable: oldest at the tail */
	uint32_t write_pinned_items;   /* kept while the lower tier writes from their slots */
	uint64_t write_pinned_bytes;
	uint64_t high_bytes, low_bytes;
	double high_watermark, low_watermark;
	struct l1_lower_tier lower;
	/* Leases: a fixed table addressed by id; expiry order in a sorted list. */
	struct l1_lease *leases;
	SLIST_HEAD(, l1_lease) lease_free;
	TAILQ_HEAD(l1_leases, l1_lease) lease_order;  /* soonest to expire first */
	uint32_t max_leases;
	uint32_t max_lease_ms;
	struct l1_stats stats;
};

/* A pinned part, handed out by store_begin and load_begin. */
struct l1_ref {
	struct l1_item *item;
	uint16_t rank;
	uint8_t *data;
	uint32_t length;
	bool clean;                /* set before l1_store_commit: the lower tier's bytes (a promotion) */
};

/* l1_store_begin's flags. */
#define L1_STORE_WAIT_DIRTY 1u /* -EAGAIN rather than evict a dirty item */

int l1_init(struct l1 *l1, const struct l1_config *cfg);
/* Frees everything; pins and leases must be gone (their holders are gone). */
void l1_destroy(struct l1 *l1);

/* Binds a namespace to its slot class. -E2BIG when its block exceeds a region. */
int l1_ns_open(struct l1 *l1, struct kvt_ns *ns);

/*
 * Evicts every unpinned item of ns (counted as admin evictions; none is
 * offered to the lower tier: a dropped namespace is gone). Returns the
 * bytes freed, and *pinned the items of ns still pinned (left in place).
 */
uint64_t l1_ns_drop(struct l1 *l1, const struct kvt_ns *ns, uint64_t *pinned);

/*
 * Sets ns's L1 quota (bytes of slots; 0: none) and evicts its least-recent
 * unpinned items down to it at once; from then on a store that would pass
 * it evicts ns's own items first, and fails with -KVT_EQUOTA when they are
 * all pinned. -ERANGE for a quota smaller than one of its slots.
 */
int l1_ns_set_quota(struct l1 *l1, struct kvt_ns *ns, uint64_t bytes);

void l1_set_lower_tier(struct l1 *l1, const struct l1_lower_tier *lower);
/* -EINVAL unless 0 < low < high <= 1. Evicts at once if now above high. */
int l1_set_watermarks(struct l1 *l1, double high, double low);
/* The longest lease from now on (leases taken keep theirs). */
void l1_set_max_lease(struct l1 *l1, uint32_t max_lease_ms);

/*
 * Starts storing rank's part of (ns, key), length bytes: on 0, ref->data is
 * the slot to fill (zero from length to the next 4 KiB, the blocks a lower
 * tier writes from it) and the item is pinned until l1_store_commit or
 * l1_store_abort. -EEXIST when the part is stored or being stored (a no-op
 * for the caller), -EINVAL for a rank outside the TP size, -ERANGE when
 * length exceeds the block size or is 0, -KVT_EQUOTA when ns is at its
 * quota with all of it pinned, -KVT_EALLPINNED when no slot can be freed,
 * -ENOMEM when memory for the item cannot be had; with L1_STORE_WAIT_DIRTY,
 * -EAGAIN when a slot needs the eviction of a dirty item, or of an item
 * used after one the lower tier is writing from (nothing evicted: call
 * again once l1_write_behind has cleaned the LRU end, or the writes were
 * released).
 */
int l1_store_begin(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *key,
		   uint16_t rank, uint32_t length, unsigned flags, struct l1_ref *ref);
/* Unpins the stored part; true when it completed its item (every part stored). */
bool l1_store_commit(struct l1 *l1, struct l1_ref *ref);
void l1_store_abort(struct l1 *l1, struct l1_ref *ref);

/*
 * Pins rank's part of a complete item of (ns, key) for reading: ref->data and
 * ref->length. -ENOENT when absent or incomplete, -EINVAL for a bad rank.
 * l1_load_end unpins and marks the item recently used.
 */
int l1_load_begin(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, struct l1_ref *ref);
void l1_load_end(struct l1 *l1, struct l1_ref *ref);

/* A lookup's way below L1: the tier number of the first tier holding a key, or KVT_TIER_NONE. */
struct l1_below {
	uint8_t (*held)(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key);
	void *ctx;
};

/*
 * The prefix lookup: the count of leading keys present (complete) in L1 or
 * below it (below->held, for each key L1 misses); tiers[i] gets the tier of
 * each (KVT_TIER_NONE from the first miss on). With lease_ms > 0, the L1 hits are leased: pinned until
 * l1_lease_release(*lease_id) or until now_ms + lease_ms (capped at
 * max_lease_ms); *lease_id is 0 when nothing was leased. -ENOSPC when the
 * lease table is full (nothing is leased then; the count is still valid in
 * *hits).
 */
int l1_lookup(struct l1 *l1, const struct kvt_ns *ns, const struct kvt_key *keys,
	      uint32_t nkeys, uint8_t *tiers, uint32_t lease_ms, uint64_t now_ms,
	      const struct l1_below *below, uint32_t *hits, uint64_t *lease_id);

/* Whether lease_id names a lease still held. */
bool l1_lease_active(const struct l1 *l1, uint64_t lease_id);
/* The bytes of the items lease_id pins (when taken); 0 when it is not held. */
uint64_t l1_lease_bytes(const struct l1 *l1, uint64_t lease_id);
/* -ENOENT when the lease is unknown or already gone. */
int l1_lease_release(struct l1 *l1, uint64_t lease_id);
/* Releases every lease expired at now_ms; returns how many. */
unsigned l1_lease_expire(struct l1 *l1, uint64_t now_ms);
/* When the next lease expires (UINT64_MAX when none). */
uint64_t l1_lease_next_expiry(const struct l1 *l1);

/*
 * The writer: first, items handed down earlier become clean once durable
 * there (or dirty again, to be handed again, if the lower tier lost them);
 * then it hands dirty unpinned items to the lower tier, LRU end first,
 * while it has room (has_room), at most max of them, and while the items
 * pinned for writes from their slots hold less than a quarter of the
 * arena; one the lower tier does not then hold is not retried
 * (unwritable_items). Returns how many were handed down.
 */
unsigned l1_write_behind(struct l1 *l1, unsigned max);

/*
 * The lower tier no longer reads its slots (take_victim kept them): the
 * item is clean if durable there, dirty again if lost, and may be evicted
 * again (it kept its LRU place meanwhile).
 */
void l1_write_released(struct l1 *l1, struct l1_item *item);

/*
 * Evicts unpinned items, LRU first, until bytes are freed (all: UINT64_MAX).
 * Watermark and admin evictions stop early while the lower tier has no room
 * (has_room), so that they move blocks to it instead of dropping them.
 */
uint64_t l1_evict(struct l1 *l1, uint64_t bytes, enum l1_evict_reason reason);

void l1_stats_read(const struct l1 *l1, struct l1_stats_snapshot *out);
/* Calls fn with each stat of L1_STATS and its value now (any thread). */
void l1_stats_visit(const struct l1 *l1, stat_visit_fn fn, void *ctx);

/*
 * Checks every invariant (usage within capacity and equal to the sum of the
 * slots held, LRU holding exactly the unpinned items, each item findable,
 * gauges true). 0, or -EFAULT with the broken one in *what.
 */
int l1_verify(const struct l1 *l1, const char **what);

#endif
