/*
 * tiers.h — the tier stack: L1 and the lower tiers (tier.h) below it, in
 * the order they registered (settings order: L2, then L3). The only place
 * that knows the order: a LOOKUP's chain goes L1, then each lower tier; a
 * LOAD that L1 misses reads through the first tier that holds the part; a
 * completed STORE is offered to every write-through tier; L1's victims and
 * write-behind go to the victim tier while the mode is evict. After each
 * round of the loop it reaps every tier, runs L1's write-behind and the
 * hook handed to it (the waiting STOREs, tiering.h), then submits what the
 * round queued.
 *
 * The control plane reads the tiers by walking s->lower (each tier's
 * summary, usage and stats) and changes them through the ops, on the loop.
 *
 * Owner: the event loop thread; s->lower[] and the tiers' summary and
 * stats_visit may be read from any thread once every tier has registered
 * (main.c registers them before the control plane starts).
 */
#ifndef KVTD_TIERS_H
#define KVTD_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "l1.h"
#include "loop.h"
#include "ns.h"
#include "stat_table.h"
#include "tier.h"

#define TIERS_MAX_LOWER 4

struct tiers {
	struct l1 *l1;
	struct loop *loop;
	struct tier *lower[TIERS_MAX_LOWER];  /* top down */
	unsigned nlower;
	bool evict;                /* the mode: evict, or l1-only (the victim tier is left alone) */
	struct loop_hook hook;
	/* Run between the reaping and the submitting; ms to look again within, or -1. */
	int (*between)(void *ctx, uint64_t now_ms);
	void *between_ctx;
};

void tiers_init(struct tiers *s, struct l1 *l1, struct loop *loop);
/* Adds t below the tiers there are. 0; -ENOSPC past TIERS_MAX_LOWER; -EEXIST for a second victim tier. */
int tiers_add(struct tiers *s, struct tier *t);
/* Flushes (within flush_ms each) and closes every tier, top down; removes the hook. */
void tiers_close(struct tiers *s, uint32_t flush_ms);

struct tier *tiers_find(const struct tiers *s, const char *name);
/* The victim tier (tier.h), or NULL. */
struct tier *tiers_victim_tier(const struct tiers *s);

/* Whether a victim tier serves (the mode can change). */
bool tiers_victim_serves(const struct tiers *s);
/*
 * Sets the mode: evict hands L1's victims to the victim tier and reads
 * LOADs through it; l1-only leaves it alone. -EAGAIN while no victim tier
 * serves (none, or not readable yet): the mode stays.
 */
int tiers_set_evict(struct tiers *s, bool evict);

/*
 * LOOKUP's chain: L1's hits (leased as l1_lookup does), then, key by key
 * from L1's first miss, whichever tier holds the key (wire numbers in
 * tiers[]). Counts each tier's hits. Returns as l1_lookup.
 */
int tiers_lookup(struct tiers *s, const struct kvt_ns *ns, const struct kvt_key *keys,
		 uint32_t nkeys, uint8_t *tiers, uint32_t lease_ms, uint64_t now_ms,
		 uint32_t *hits, uint64_t *lease_id);

/* Whether LOADs read through t now (its readable op, and the mode for the victim tier). */
bool tiers_reads_through(const struct tiers *s, struct tier *t);
/*
 * Reads a part L1 misses from the first lower tier, from index *from on,
 * that reads through and holds it: 0 with *from its index (rd->done runs;
 * *from is the tier's already when rd's callbacks run inside read_begin),
 * or -ENOENT when none holds it.
 */
int tiers_read_begin(struct tiers *s, unsigned *from, const struct kvt_ns *ns,
		     const struct kvt_key *key, uint16_t rank, struct tier_read *rd);
/* The same, among the tiers above below (for a tier that takes a part from above it). */
int tiers_read_above(struct tiers *s, const struct tier *below, const struct kvt_ns *ns,
		     const struct kvt_key *key, uint16_t rank, struct tier_read *rd);

/* A STORE completed (ns, key) in L1: every write-through tier is offered each part. */
void tiers_stored(struct tiers *s, const struct kvt_ns *ns, const struct kvt_key *key);
/* Whether STOREs may wait for the writer rather than evict a dirty item. */
bool tiers_store_may_wait(const struct tiers *s);
/*
 * Whether L1's victims would be lost: evict mode, and the victim tier takes
 * no writes (failed, full). A read from a lower tier then promotes into L1
 * only where that evicts no dirty item (a block L1 alone holds): a degraded
 * tier must not make the healthy one drop data. What cannot be promoted is
 * served through a bounce buffer.
 */
bool tiers_victims_lost(const struct tiers *s);

/* A LOAD's block came from tier index i (promoted: kept in L1). */
void tiers_count_loaded(struct tiers *s, unsigned i, bool promoted);

/* Every stat of t: its own and the stack's counters of it (any thread). */
void tiers_stats_visit(const struct tier *t, stat_visit_fn fn, void *ctx);

#endif
