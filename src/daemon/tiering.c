/* tiering.c — see tiering.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "clock.h"
#include "owner_stats.h"
#include "tiering.h"

#define COUNT(t, field) STATS_ADD((t)->stats, field, 1)

void tier_xfer_init(struct tier_xfer *x, struct tiering *t, struct copy_engine *engine,
		    int device, unsigned lane, bool store, struct tier_block *blocks, uint32_t n)
{
	copy_batch_init(&x->batch, device, lane);
	x->tiering = t;
	x->engine = engine;
	x->store = store;
	x->pending = 1;
	x->blocks = blocks;
	x->n = n;
}

static void block_fail(struct tier_block *b, int32_t status)
{
	b->state = TIER_BLOCK_FAILED;
	b->status = status;
}

/* --- read-through from the lower tiers --- */

/* The copies are all queued once the last lower read or wait is over: seal the batch. */
static void block_settled(struct tier_xfer *x)
{
	if (--x->pending == 0)
		copy_batch_seal(x->engine, &x->batch);
}

/* A read's target goes back: the slot being promoted into (promoting), or the bounce buffer. */
static void target_give_back(struct tiering *t, bool promoting, struct l1_ref *ref, uint8_t *bounce)
{
	if (promoting)
		l1_store_abort(t->l1, ref);
	free(bounce);
}

/*
 * Where a read's bytes go: a new L1 slot (promotion), else a bounce buffer;
 * NULL: neither. While L1's victims would be lost, no promotion evicts a
 * dirty item (tiers_victims_lost).
 */
static uint8_t *read_target(struct tiering *t, struct tier_block *b, uint32_t len)
{
	unsigned flags = tiers_victims_lost(t->stack) ? L1_STORE_WAIT_DIRTY : 0;
	if (l1_store_begin(t->l1, b->ns, &b->key, b->rank, len, flags, &b->ref) == 0) {
		b->state = TIER_BLOCK_PROMOTING;
		return b->ref.data;
	}
	if (posix_memalign((void **)&b->bounce, ARENA_SLOT_ALIGN, arena_slot_size(b->ns->block_bytes)))
		return NULL;
	b->state = TIER_BLOCK_BOUNCING;
	return b->bounce;
}

/*
 * One block's read from a lower tier. It outlives its block when the tier
 * abandons it (the LOAD answers without it): the target the kernel may
 * still write then moves here, to be given back when the read is done, so
 * that nothing else gets memory the kernel may still write.
 */
struct lower_read {
	struct tier_read rd;       /* first: the tier's callbacks get its address */
	struct tier_block *b;      /* NULL once abandoned */
	uint32_t room;             /* the LOAD's room in staging */
	struct tiering *t;         /* abandoned: what it held */
	struct l1_ref ref;
	uint8_t *bounce;
	bool promoting;
};

/*
 * The tier knows the part's length: a new L1 slot for it (taking one may
 * evict L1 items, whose victims go to the victim tier) or a bounce buffer.
 * A part longer than the LOAD's room is refused (-ERANGE, counted).
 */
static uint8_t *lower_target(struct tier_read *rd, uint32_t length)
{
	struct lower_read *r = (struct lower_read *)rd;
	struct tier_block *b = r->b;
	struct tiering *t = b->xfer->tiering;
	if (length > r->room) {
		COUNT(t, rejected.out_of_range);
		b->status = -ERANGE;
		return NULL;
	}
	return read_target(t, b, length);
}

static void on_lower_abandoned(struct tier_read *rd)
{
	struct lower_read *r = (struct lower_read *)rd;
	struct tier_block *b = r->b;
	struct tier_xfer *x = b->xfer;
	r->t = x->tiering;
	r->promoting = b->state == TIER_BLOCK_PROMOTING;
	r->ref = b->ref;
	r->bounce = b->bounce;
	b->bounce = NULL;
	r->b = NULL;
	block_fail(b, -ENOENT);
	block_settled(x);
}

static void on_lower_read(struct tier_read *rd, int status, uint32_t length)
{
	struct lower_read *r = (struct lower_read *)rd;
	struct tier_block *b = r->b;
	if (!b) { /* abandoned before: its target goes back now */
		target_give_back(r->t, r->promoting, &r->ref, r->bounce);
		free(r);
		return;
	}
	free(r);
	struct tier_xfer *x = b->xfer;
	if (status) { /* a miss, an I/O error or a failed check (counted by the tier) */
		target_give_back(x->tiering, b->state == TIER_BLOCK_PROMOTING, &b->ref, b->bounce);
		b->bounce = NULL;
		block_fail(b, b->status ? b->status : -ENOENT);
	} else {
		b->length = length;
		const uint8_t *from = b->state == TIER_BLOCK_PROMOTING ? b->ref.data : b->bounce;
		copy_add(x->engine, &x->batch, b->staging, from, b->length);
	}
	block_settled(x);
}

/* Reads a block L1 misses through the lower tiers; FAILED (-ENOENT) as it was when none holds it. */
static void load_from_lower(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
			    uint32_t room)
{
	struct lower_read *r = calloc(1, sizeof(*r));
	if (!r)
		return;
	*r = (struct lower_read){.rd = {.cap = (uint32_t)arena_slot_size(b->ns->block_bytes),
					.target = lower_target, .done = on_lower_read,
					.abandoned = on_lower_abandoned},
				 .b = b, .room = room};
	b->from = 0;
	b->status = 0;
	x->pending++; /* before: done may run inside read_begin */
	if (tiers_read_begin(t->stack, &b->from, b->ns, &b->key, b->rank, &r->rd)) {
		x->pending--;
		free(r);
		block_fail(b, -ENOENT);
	}
}

/* --- issuing a block --- */

/* Whether STOREs wait for the writer rather than evict a dirty item (the stack lets them). */
static unsigned store_flags(const struct tiering *t)
{
	return t->store_wait_ms && tiers_store_may_wait(t->stack) ? L1_STORE_WAIT_DIRTY : 0;
}

/* May evict L1 items (their victims to the victim tier in evict mode) to free a slot. */
static int store_begin(struct tiering *t, struct tier_block *b, unsigned flags)
{
	return l1_store_begin(t->l1, b->ns, &b->key, b->rank, b->length, flags, &b->ref);
}

/* The slot is had (or refused): the copy from staging starts. */
static void store_started(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
			  int err)
{
	if (err == -KVT_EQUOTA)
		COUNT(t, rejected.quota);
	if (err) {
		block_fail(b, err == -EEXIST ? 0 : err); /* a stored part is a no-op */
		return;
	}
	b->state = TIER_BLOCK_STORING;
	copy_add(x->engine, &x->batch, b->ref.data, b->staging, b->length);
}

static void wait_push(struct tiering *t, struct tier_xfer *x, struct tier_block *b)
{
	b->state = TIER_BLOCK_WAITING;
	b->wait_since_ms = kvt_now_ms();
	STAILQ_INSERT_TAIL(&t->waiting, b, wait_link);
	x->pending++;
	COUNT(t, store_waits);
	COUNT(t, store_waiting);
}

static void store_block(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
			const struct kvt_ns *ns, uint16_t rank, const struct kvt_key *key,
			uint32_t length)
{
	b->ns = ns;
	b->key = *key;
	b->rank = rank;
	b->length = length;
	/* One that needs no dirty eviction goes ahead of the waiting ones. */
	int err = store_begin(t, b, store_flags(t));
	if (err == -EAGAIN)
		wait_push(t, x, b);
	else
		store_started(t, x, b, err);
}

/* Retries the oldest waiting STORE: false while it must wait on. */
static bool wait_retry(struct tiering *t, uint64_t now_ms)
{
	struct tier_block *b = STAILQ_FIRST(&t->waiting);
	bool late = now_ms - b->wait_since_ms >= t->store_wait_ms;
	int err = store_begin(t, b, late ? 0 : store_flags(t));
	if (err == -EAGAIN)
		return false;
	STAILQ_REMOVE_HEAD(&t->waiting, wait_link);
	STATS_ADD(t->stats, store_waiting, -(uint64_t)1);
	STATS_ADD(t->stats, store_wait_us, (now_ms - b->wait_since_ms) * 1000u);
	if (late)
		COUNT(t, store_wait_timeouts);
	store_started(t, b->xfer, b, err);
	block_settled(b->xfer);
	return true;
}

int tiering_background(void *ctx, uint64_t now_ms)
{
	struct tiering *t = ctx;
	while (!STAILQ_EMPTY(&t->waiting) && wait_retry(t, now_ms))
		;
	if (STAILQ_EMPTY(&t->waiting))
		return -1;
	uint64_t waited = now_ms - STAILQ_FIRST(&t->waiting)->wait_since_ms;
	return waited >= t->store_wait_ms ? 0 : (int)(t->store_wait_ms - waited);
}

static void load_block(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
		       const struct kvt_ns *ns, uint16_t rank, const struct kvt_key *key,
		       uint32_t room)
{
	int err = l1_load_begin(t->l1, ns, key, rank, &b->ref);
	if (err == -ENOENT && t->stack->nlower) {
		block_fail(b, -ENOENT);
		b->ns = ns;
		b->key = *key;
		b->rank = rank;
		load_from_lower(t, x, b, room);
		return;
	}
	if (err) {
		block_fail(b, err);
		return;
	}
	if (b->ref.length > room) { /* the part does not fit its space */
		l1_load_end(t->l1, &b->ref);
		COUNT(t, rejected.out_of_range);
		block_fail(b, -ERANGE);
		return;
	}
	b->state = TIER_BLOCK_LOADING;
	b->length = b->ref.length;
	copy_add(x->engine, &x->batch, b->staging, b->ref.data, b->length);
}

void tier_block_issue(struct tiering *t, struct tier_xfer *x, uint32_t i, const struct kvt_ns *ns,
		      uint16_t rank, const struct kvt_key *key, uint8_t *staging, uint32_t length)
{
	struct tier_block *b = &x->blocks[i];
	b->xfer = x;
	b->staging = staging;
	if (x->store)
		store_block(t, x, b, ns, rank, key, length);
	else
		load_block(t, x, b, ns, rank, key, length);
}

void tier_xfer_issued(struct tier_xfer *x)
{
	block_settled(x);
}

/* --- finishing --- */

static void count_block(struct tiering *t, bool store, const struct tier_block *b)
{
	switch (b->state) {
	case TIER_BLOCK_WAITING: /* never at the end: a waiting block holds its batch open */
	case TIER_BLOCK_FAILED:
		if (!store && b->status == -ENOENT)
			COUNT(t, blocks_load_missing);
		return;
	case TIER_BLOCK_STORING:
		COUNT(t, blocks_stored);
		STATS_ADD(t->stats, bytes_stored, b->length);
		return;
	case TIER_BLOCK_PROMOTING:
	case TIER_BLOCK_BOUNCING:
		tiers_count_loaded(t->stack, b->from, b->state == TIER_BLOCK_PROMOTING);
		/* fall through */
	case TIER_BLOCK_LOADING:
		COUNT(t, blocks_loaded);
		STATS_ADD(t->stats, bytes_loaded, b->length);
		return;
	}
}

/* A STORE that completed its item offers it to the write-through tiers. */
static void store_committed(struct tiering *t, const struct tier_block *b, bool completed)
{
	if (completed && b->state == TIER_BLOCK_STORING)
		tiers_stored(t->stack, b->ns, &b->key);
}

/* Commits or unpins one block; a fault fails every block that was copied. */
static void block_finish(struct tiering *t, bool store, struct tier_block *b, int32_t fault)
{
	bool written = b->state == TIER_BLOCK_STORING || b->state == TIER_BLOCK_PROMOTING;
	/* The victim tier holds what it gave; what another tier gave is the victim tier's to take (dirty). */
	b->ref.clean = b->state == TIER_BLOCK_PROMOTING &&
		       t->stack->lower[b->from] == tiers_victim_tier(t->stack);
	if (written && fault)
		l1_store_abort(t->l1, &b->ref);
	else if (written)
		store_committed(t, b, l1_store_commit(t->l1, &b->ref));
	else if (b->state == TIER_BLOCK_LOADING)
		l1_load_end(t->l1, &b->ref);
	free(b->bounce);
	b->bounce = NULL;
	if (fault && b->state != TIER_BLOCK_FAILED)
		block_fail(b, fault);
	count_block(t, store, b);
}

int32_t tier_xfer_finish(struct tiering *t, struct tier_xfer *x)
{
	int32_t fault = atomic_load(&x->batch.failed);
	for (uint32_t i = 0; i < x->n; i++)
		block_finish(t, x->store, &x->blocks[i], fault);
	return fault;
}
