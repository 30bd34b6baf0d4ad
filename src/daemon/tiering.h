/*
 * tiering.h — the tiered transfer of one STORE or LOAD: each block's way
 * between a staging buffer and the tier stack (tiers.h). A STORE fills a
 * new L1 slot; a LOAD copies from L1, or, on an L1 miss, reads the block
 * through the first lower tier that holds it (tiers_read_begin) into a new
 * L1 slot it keeps (promotion) or, when no slot can be had, into a bounce
 * buffer. What the victim tier gave is clean in L1; what another tier gave
 * is dirty (the victim tier gets it as write-behind does). A STORE that
 * completes an item offers it to the write-through tiers (tiers_stored). A
 * STORE block whose slot would evict a dirty L1 item (not yet written
 * behind) waits for the writer, up to store_wait_ms, in arrival order
 * (tiering_background), while the stack lets STOREs wait. It knows no tier
 * by name, and no sockets or frames.
 *
 * Owner: the event loop thread, for every call and callback.
 */
#ifndef KVTD_TIERING_H
#define KVTD_TIERING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "copy.h"
#include "dp_stats.h"
#include "l1.h"
#include "tiers.h"

/* Where a block of a transfer stands; set when it is issued, read when the copies are done. */
enum tier_block_state {
	TIER_BLOCK_FAILED,     /* status says why; nothing held */
	TIER_BLOCK_STORING,    /* an L1 slot pinned, being filled from staging */
	TIER_BLOCK_LOADING,    /* an L1 part pinned, being copied to staging */
	TIER_BLOCK_PROMOTING,  /* an L1 slot pinned, filled by a lower tier's read, then copied to staging */
	TIER_BLOCK_BOUNCING,   /* a lower tier's read into a bounce buffer, then copied to staging */
	TIER_BLOCK_WAITING,    /* a STORE waiting for the writer to clean L1's LRU end */
};

struct tier_xfer;
struct tiering;

struct tier_block {
	enum tier_block_state state;
	int32_t status;            /* 0, or the block's KVT_E* / -errno status */
	uint32_t length;           /* bytes moved */
	struct l1_ref ref;         /* STORING, LOADING, PROMOTING */
	uint8_t *bounce;           /* BOUNCING */
	uint8_t *staging;          /* where a lower tier's read's bytes go once read */
	struct tier_xfer *xfer;
	unsigned from;             /* PROMOTING or BOUNCING: the lower tier read (its index) */
	/* The part: a STORE's, kept for a retry while WAITING; a LOAD's read from a lower tier. */
	const struct kvt_ns *ns;
	struct kvt_key key;
	uint16_t rank;
	uint64_t wait_since_ms;
	STAILQ_ENTRY(tier_block) wait_link;
};

/* The blocks of one request, copied as one batch of one copy engine. */
struct tier_xfer {
	struct copy_batch batch;   /* the copy engine hands this back (tier_xfer_of) */
	struct tiering *tiering;
	struct copy_engine *engine;
	bool store;
	uint32_t pending;          /* lower-tier reads and waiting STOREs, +1 until every block is issued */
	uint32_t n;
	struct tier_block *blocks;
};

static inline struct tier_xfer *tier_xfer_of(struct copy_batch *b)
{
	return (struct tier_xfer *)((char *)b - offsetof(struct tier_xfer, batch));
}

/*
 * The tiers a transfer uses (the stack), and the waiting STOREs. The data
 * plane's counters of blocks moved (dp_stats.h) are kept here.
 */
struct tiering {
	struct l1 *l1;
	struct tiers *stack;
	uint32_t store_wait_ms;    /* a STORE's bound on waiting for the writer; 0: drop at once */
	struct dp_stats *stats;
	STAILQ_HEAD(, tier_block) waiting;  /* WAITING blocks, oldest first */
};

/* Starts a transfer of n blocks (blocks zeroed by the caller) on engine. */
void tier_xfer_init(struct tier_xfer *x, struct tiering *t, struct copy_engine *engine,
		    int device, unsigned lane, bool store, struct tier_block *blocks, uint32_t n);
/*
 * Issues block i: key's rank part of ns, between staging and the tiers,
 * length bytes (a STORE's part; for a LOAD the room staging has). On return
 * the block is FAILED with its status, or its copy is queued or waits for
 * an L2 read. Counts refusals (quota, out_of_range) in the stats.
 */
void tier_block_issue(struct tiering *t, struct tier_xfer *x, uint32_t i, const struct kvt_ns *ns,
		      uint16_t rank, const struct kvt_key *key, uint8_t *staging, uint32_t length);
/* Every block is issued: the batch is sealed once the last L2 read is back. */
void tier_xfer_issued(struct tier_xfer *x);
/*
 * Once the batch is done (copy_engine_reap): commits what was written,
 * unpins what was read, frees bounce buffers, counts each block, and
 * returns the batch's fault (0, or -EFAULT for a faulting copy: every copied
 * block then fails with it, since which one faulted is not known).
 */
int32_t tier_xfer_finish(struct tiering *t, struct tier_xfer *x);

/*
 * After each round of the loop (the stack's between step, after L1's
 * write-behind): waiting STOREs are retried, oldest first (past their
 * bound, they evict dirty items). Returns the ms until the oldest waiting
 * STORE's bound (the loop must look again by then), or -1 when none waits.
 * ctx: the struct tiering.
 */
int tiering_background(void *ctx, uint64_t now_ms);

#endif
