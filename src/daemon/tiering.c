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

/* --- read-through from L2 --- */

/* Whether LOADs go to L2 for blocks L1 misses: evict mode, L2 ready (failed or not: reads verify). */
static bool read_through_on(const struct tiering *t)
{
	return t->l2 && t->evict && l2_readable(t->l2);
}

/* The copies are all queued once the last L2 read or wait is over: seal the batch. */
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

/* Gives back what an L2 or L3 read held, and fails its block with status. */
static void read_undo(struct tiering *t, struct tier_block *b, int32_t status)
{
	target_give_back(t, b->state == TIER_BLOCK_PROMOTING, &b->ref, b->bounce);
	b->bounce = NULL;
	block_fail(b, status);
}

/* An L2 or L3 read of length bytes is back: its block's copy to staging starts now. */
static void read_arrived(struct tier_xfer *x, struct tier_block *b, uint32_t length)
{
	b->length = length;
	const uint8_t *from = b->state == TIER_BLOCK_PROMOTING ? b->ref.data : b->bounce;
	copy_add(x->engine, &x->batch, b->staging, from, b->length);
}

static void on_l2_read(struct l2_read *rd, int status)
{
	struct tier_block *b = (struct tier_block *)((char *)rd - offsetof(struct tier_block, rd));
	struct tier_xfer *x = b->xfer;
	if (status) /* an I/O error or a checksum failure: a miss, counted by L2 */
		read_undo(x->tiering, b, -ENOENT);
	else
		read_arrived(x, b, b->rd.length);
	block_settled(x);
}

/* Where a read's bytes go: a new L1 slot (promotion), else a bounce buffer; NULL: neither. */
static uint8_t *read_target(struct tiering *t, struct tier_block *b, uint32_t len)
{
	b->status = 0;
	if (l1_store_begin(t->l1, b->ns, &b->key, b->rank, len, 0, &b->ref) == 0) {
		b->state = TIER_BLOCK_PROMOTING;
		return b->ref.data;
	}
	if (posix_memalign((void **)&b->bounce, ARENA_SLOT_ALIGN, arena_slot_size(b->ns->block_bytes))) {
		b->status = -ENOENT;
		return NULL;
	}
	b->state = TIER_BLOCK_BOUNCING;
	return b->bounce;
}

/*
 * Reads a block L1 misses from L2. The target is a new L1 slot (the block
 * is promoted) or, when none can be had, a bounce buffer. Taking the slot
 * may evict L1 items, whose victims are written to L2 and may reclaim an L2
 * region: so L2 is asked for the part twice, for its length before the slot
 * is taken and for the read after, when it may be gone. False when L2 does
 * not hold the part (the block stays FAILED, -ENOENT).
 */
static bool load_from_l2(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
			 uint32_t room)
{
	const struct kvt_ns *ns = b->ns;
	const struct kvt_key *key = &b->key;
	uint16_t rank = b->rank;
	int64_t len = l2_part_length(t->l2, ns, key, rank);
	if (len < 0)
		return false; /* L2 does not hold it: stays FAILED with -ENOENT */
	if ((uint64_t)len > room) {
		COUNT(t, rejected.out_of_range);
		block_fail(b, -ERANGE);
		return true;
	}
	uint64_t cap = arena_slot_size(ns->block_bytes);
	uint8_t *dst = read_target(t, b, (uint32_t)len);
	if (!dst)
		return true;
	b->rd.done = on_l2_read;
	int rc = l2_read_begin(t->l2, ns, key, rank, dst, cap, &b->rd);
	if (rc < 0)
		read_undo(t, b, -ENOENT);
	else if (rc == 1) /* from a write buffer, copied already */
		read_arrived(x, b, b->rd.length);
	else
		x->pending++;
	return true;
}

/* --- read-through from L3 --- */

struct tier_l3_read {
	struct l3_read rd;         /* first: the engine's callbacks get its address */
	struct tier_block *b;      /* NULL once abandoned: the LOAD answered without it */
	uint32_t room;             /* the LOAD's room in staging */
	/* Abandoned: the target the kernel may still write, kept until done. */
	struct tiering *t;
	struct l1_ref ref;         /* a promotion's begun L1 store, or */
	uint8_t *bounce;           /* a bounce buffer */
	bool promoting;
};

static uint8_t *l3_target(struct l3_read *rd, uint32_t length)
{
	struct tier_l3_read *r = (struct tier_l3_read *)rd;
	if (length > r->room)
		return NULL; /* a miss: it does not fit what the client asked */
	return read_target(r->b->xfer->tiering, r->b, length);
}

/*
 * The kernel holds the read past its timeout (l3_abandon_stuck): the block
 * becomes a miss and its LOAD goes on; the read's target moves here, to be
 * given back when the kernel returns (on_l3_read), so nothing else gets
 * memory the kernel may still write.
 */
static void on_l3_abandoned(struct l3_read *rd)
{
	struct tier_l3_read *r = (struct tier_l3_read *)rd;
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

static void on_l3_read(struct l3_read *rd, int status)
{
	struct tier_l3_read *r = (struct tier_l3_read *)rd;
	if (!r->b) { /* abandoned before: its target goes back now */
		target_give_back(r->t, r->promoting, &r->ref, r->bounce);
		free(r);
		return;
	}
	struct tier_block *b = r->b;
	struct tier_xfer *x = b->xfer;
	uint32_t length = rd->op.length;
	free(rd); /* the tier_l3_read */
	if (status) {
		read_undo(x->tiering, b, -ENOENT);
	} else {
		read_arrived(x, b, length);
		l3svc_read_one(x->tiering->l3, b->ns, &b->key, b->rank);
	}
	block_settled(x);
}

/* Reads a block L1 and L2 miss from L3; FAILED (-ENOENT) as it was when it cannot start. */
static void load_from_l3(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
			 uint32_t room)
{
	struct tier_l3_read *r = calloc(1, sizeof(*r));
	if (!r)
		return;
	b->from_l3 = true;
	r->b = b;
	r->room = room;
	r->rd.target = l3_target;
	r->rd.abandoned = on_l3_abandoned;
	r->rd.done = on_l3_read;
	if (l3_read_begin(&t->l3->l3, b->ns, &b->key, b->rank,
			  (uint32_t)arena_slot_size(b->ns->block_bytes), &r->rd)) {
		free(r);
		return;
	}
	x->pending++;
}

/* --- issuing a block --- */

/* Whether STOREs wait for the writer rather than evict a dirty item: evict mode, L2 writing. */
static unsigned store_flags(const struct tiering *t)
{
	return t->l2 && t->evict && t->store_wait_ms && l2_writable(t->l2) ? L1_STORE_WAIT_DIRTY
									    : 0;
}

/* May evict L1 items (their victims to L2 in evict mode) to free a slot. */
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
	b->wait_next = NULL;
	if (t->wait_tail)
		t->wait_tail->wait_next = b;
	else
		t->wait_head = b;
	t->wait_tail = b;
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
	struct tier_block *b = t->wait_head;
	bool late = now_ms - b->wait_since_ms >= t->store_wait_ms;
	int err = store_begin(t, b, late ? 0 : store_flags(t));
	if (err == -EAGAIN)
		return false;
	if ((t->wait_head = b->wait_next) == NULL)
		t->wait_tail = NULL;
	STATS_ADD(t->stats, store_waiting, -(uint64_t)1);
	STATS_ADD(t->stats, store_wait_us, (now_ms - b->wait_since_ms) * 1000u);
	if (late)
		COUNT(t, store_wait_timeouts);
	store_started(t, b->xfer, b, err);
	block_settled(b->xfer);
	return true;
}

int tiering_background(struct tiering *t, uint64_t now_ms)
{
	l1_write_behind(t->l1, UINT32_MAX);
	while (t->wait_head && wait_retry(t, now_ms))
		;
	if (!t->wait_head)
		return -1;
	uint64_t waited = now_ms - t->wait_head->wait_since_ms;
	return waited >= t->store_wait_ms ? 0 : (int)(t->store_wait_ms - waited);
}

static void load_block(struct tiering *t, struct tier_xfer *x, struct tier_block *b,
		       const struct kvt_ns *ns, uint16_t rank, const struct kvt_key *key,
		       uint32_t room)
{
	int err = l1_load_begin(t->l1, ns, key, rank, &b->ref);
	if (err == -ENOENT && (read_through_on(t) || t->l3)) {
		block_fail(b, -ENOENT);
		b->ns = ns;
		b->key = *key;
		b->rank = rank;
		if (!(read_through_on(t) && load_from_l2(t, x, b, room)) && t->l3)
			load_from_l3(t, x, b, room);
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
		if (b->from_l3) {
			COUNT(t, blocks_loaded_l3);
		} else {
			COUNT(t, blocks_loaded_l2);
			if (b->state == TIER_BLOCK_PROMOTING)
				COUNT(t, blocks_promoted);
		}
		/* fall through */
	case TIER_BLOCK_LOADING:
		COUNT(t, blocks_loaded);
		STATS_ADD(t->stats, bytes_loaded, b->length);
		return;
	}
}

/* A STORE that completed its item hands every part to L3's publisher. */
static void store_committed(struct tiering *t, const struct tier_block *b, bool completed)
{
	if (!completed || !t->l3 || b->state != TIER_BLOCK_STORING)
		return;
	for (uint16_t r = 0; r < b->ns->tp_size; r++)
		l3svc_stored(t->l3, b->ns, &b->key, r);
}

/* Commits or unpins one block; a fault fails every block that was copied. */
static void block_finish(struct tiering *t, bool store, struct tier_block *b, int32_t fault)
{
	bool written = b->state == TIER_BLOCK_STORING || b->state == TIER_BLOCK_PROMOTING;
	/* L2 holds what it promoted; what L3 gave is L2's to take (dirty). */
	b->ref.clean = b->state == TIER_BLOCK_PROMOTING && !b->from_l3;
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
