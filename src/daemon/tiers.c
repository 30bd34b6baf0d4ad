/* tiers.c — see tiers.h. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "tiers.h"

#define COUNT(t, field) atomic_fetch_add_explicit(&(t)->counters.field, 1, memory_order_relaxed)

static bool is_victim_tier(const struct tier *t)
{
	return t->ops->victims != NULL;
}

/* After each round of the loop: reap, write behind, the handed-in step, submit. */
static void after_round(struct loop_hook *hook)
{
	struct tiers *s = (struct tiers *)((char *)hook - offsetof(struct tiers, hook));
	for (unsigned i = 0; i < s->nlower; i++)
		if (s->lower[i]->ops->reap)
			s->lower[i]->ops->reap(s->lower[i]);
	l1_write_behind(s->l1, UINT32_MAX); /* a no-op while no victim tier takes them */
	int within = s->between ? s->between(s->between_ctx, kvt_now_ms()) : -1;
	for (unsigned i = 0; i < s->nlower; i++) {
		int ms = s->lower[i]->ops->submit ? s->lower[i]->ops->submit(s->lower[i]) : -1;
		if (ms >= 0 && (within < 0 || ms < within))
			within = ms;
	}
	if (within >= 0)
		loop_wake_within(s->loop, (uint32_t)within);
}

void tiers_init(struct tiers *s, struct l1 *l1, struct loop *loop)
{
	*s = (struct tiers){.l1 = l1, .loop = loop, .hook.run = after_round};
	loop_add_hook(loop, &s->hook);
}

/* The stack's counters of t, as stat_table.h rows labelled with its name. */
static void counters_describe(struct tier *t)
{
	snprintf(t->hit_labels, sizeof(t->hit_labels), "tier=\"%s\",result=\"hit\"", t->name);
	snprintf(t->tier_label, sizeof(t->tier_label), "tier=\"%s\"", t->name);
	t->counter_defs[0] = (struct stat_def){
		"lookup_hits", STAT_COUNTER, "kvtier_lookup_blocks_total", t->hit_labels,
		"Keys answered by lookups, by tier and result (a miss ends a chain).",
		offsetof(struct tier_counters, lookup_hits)};
	t->counter_defs[1] = (struct stat_def){
		"blocks_loaded", STAT_COUNTER, "kvtier_tier_blocks_loaded_total", t->tier_label,
		"Blocks LOAD requests read from a lower tier (a part of kvtier_blocks_loaded_total).",
		offsetof(struct tier_counters, blocks_loaded)};
	t->counter_defs[2] = (struct stat_def){
		"blocks_promoted", STAT_COUNTER, "kvtier_tier_blocks_promoted_total", t->tier_label,
		"Blocks read from a lower tier and kept in L1 (promoted).",
		offsetof(struct tier_counters, blocks_promoted)};
}

int tiers_add(struct tiers *s, struct tier *t)
{
	if (s->nlower == TIERS_MAX_LOWER)
		return -ENOSPC;
	if (is_victim_tier(t) && tiers_victim_tier(s))
		return -EEXIST;
	counters_describe(t);
	s->lower[s->nlower++] = t;
	return 0;
}

void tiers_close(struct tiers *s, uint32_t flush_ms)
{
	for (unsigned i = 0; i < s->nlower; i++)
		if (s->lower[i]->ops->flush)
			s->lower[i]->ops->flush(s->lower[i], flush_ms);
	/* Top down: a tier closing finishes its reads, whose bytes may go to a tier below it. */
	for (unsigned i = 0; i < s->nlower; i++) {
		struct tier *t = s->lower[i];
		if (is_victim_tier(t))
			l1_set_lower_tier(s->l1, NULL);
		t->ops->close(t);
	}
	s->nlower = 0;
	loop_remove_hook(s->loop, &s->hook);
}

struct tier *tiers_find(const struct tiers *s, const char *name)
{
	for (unsigned i = 0; i < s->nlower; i++)
		if (strcmp(s->lower[i]->name, name) == 0)
			return s->lower[i];
	return NULL;
}

struct tier *tiers_victim_tier(const struct tiers *s)
{
	for (unsigned i = 0; i < s->nlower; i++)
		if (is_victim_tier(s->lower[i]))
			return s->lower[i];
	return NULL;
}

bool tiers_victim_serves(const struct tiers *s)
{
	struct tier *v = tiers_victim_tier(s);
	return v && v->ops->readable(v);
}

int tiers_set_evict(struct tiers *s, bool evict)
{
	if (!tiers_victim_serves(s))
		return -EAGAIN;
	struct tier *v = tiers_victim_tier(s);
	struct l1_lower_tier lower = v->ops->victims(v);
	s->evict = evict;
	l1_set_lower_tier(s->l1, evict ? &lower : NULL);
	return 0;
}

bool tiers_reads_through(const struct tiers *s, struct tier *t)
{
	return (s->evict || !is_victim_tier(t)) && t->ops->readable(t);
}

/* l1_lookup's way below L1: the first tier holding the key (its wire number), counted. */
static uint8_t held_below(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	struct tiers *s = ctx;
	for (unsigned i = 0; i < s->nlower; i++) {
		struct tier *t = s->lower[i];
		if (tiers_reads_through(s, t) && t->ops->contains(t, ns, key)) {
			COUNT(t, lookup_hits);
			return t->wire;
		}
	}
	return KVT_TIER_NONE;
}

int tiers_lookup(struct tiers *s, const struct kvt_ns *ns, const struct kvt_key *keys,
		 uint32_t nkeys, uint8_t *tiers, uint32_t lease_ms, uint64_t now_ms,
		 uint32_t *hits, uint64_t *lease_id)
{
	struct l1_below below = {.held = held_below, .ctx = s};
	return l1_lookup(s->l1, ns, keys, nkeys, tiers, lease_ms, now_ms, &below, hits, lease_id);
}

int tiers_read_begin(struct tiers *s, unsigned *from, const struct kvt_ns *ns,
		     const struct kvt_key *key, uint16_t rank, struct tier_read *rd)
{
	for (unsigned i = *from; i < s->nlower; i++) {
		struct tier *t = s->lower[i];
		*from = i; /* set first: rd's target and done may run inside read_begin */
		if (tiers_reads_through(s, t) && t->ops->read_begin(t, ns, key, rank, rd) == 0)
			return 0;
	}
	return -ENOENT;
}

int tiers_read_above(struct tiers *s, const struct tier *below, const struct kvt_ns *ns,
		     const struct kvt_key *key, uint16_t rank, struct tier_read *rd)
{
	for (unsigned i = 0; i < s->nlower && s->lower[i] != below; i++) {
		struct tier *t = s->lower[i];
		if (t->ops->readable(t) && t->ops->contains(t, ns, key) &&
		    t->ops->read_begin(t, ns, key, rank, rd) == 0)
			return 0;
	}
	return -ENOENT;
}

void tiers_stored(struct tiers *s, const struct kvt_ns *ns, const struct kvt_key *key)
{
	for (unsigned i = 0; i < s->nlower; i++) {
		struct tier *t = s->lower[i];
		for (uint16_t r = 0; t->ops->stored && r < ns->tp_size; r++)
			t->ops->stored(t, ns, key, r);
	}
}

bool tiers_store_may_wait(const struct tiers *s)
{
	struct tier *v = tiers_victim_tier(s);
	return v && s->evict && v->ops->writable(v);
}

bool tiers_victims_lost(const struct tiers *s)
{
	struct tier *v = tiers_victim_tier(s);
	return v && s->evict && !v->ops->writable(v);
}

void tiers_count_loaded(struct tiers *s, unsigned i, bool promoted)
{
	COUNT(s->lower[i], blocks_loaded);
	if (promoted)
		COUNT(s->lower[i], blocks_promoted);
}

void tiers_stats_visit(const struct tier *t, stat_visit_fn fn, void *ctx)
{
	t->ops->stats_visit(t, fn, ctx);
	stats_visit(t->counter_defs, sizeof(t->counter_defs) / sizeof(t->counter_defs[0]),
		    &t->counters, fn, ctx);
}
