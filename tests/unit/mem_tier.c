/* mem_tier.c — see mem_tier.h. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "mem_tier.h"

static struct mem_tier *of(const struct tier *t)
{
	return (struct mem_tier *)((char *)t - offsetof(struct mem_tier, tier));
}

static struct mem_part *find(struct mem_tier *m, const struct kvt_ns *ns,
			     const struct kvt_key *key, uint16_t rank)
{
	for (unsigned i = 0; i < m->nparts; i++)
		if (m->parts[i].ns_digest == ns->digest && m->parts[i].rank == rank &&
		    memcmp(&m->parts[i].key, key, sizeof(*key)) == 0)
			return &m->parts[i];
	return NULL;
}

static bool contains(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key)
{
	for (uint16_t r = 0; r < ns->tp_size; r++)
		if (!find(of(t), ns, key, r))
			return false;
	return true;
}

static bool readable(struct tier *t)
{
	return of(t)->readable;
}

/* Reads at once: the target, the bytes, done, all before it returns. */
static int read_begin(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		      uint16_t rank, struct tier_read *rd)
{
	const struct mem_part *p = find(of(t), ns, key, rank);
	if (!p)
		return -ENOENT;
	uint8_t *dst = rd->target(rd, p->length);
	if (dst)
		memcpy(dst, p->bytes, p->length);
	rd->done(rd, dst ? 0 : -ENOENT, dst ? p->length : 0);
	return 0;
}

static void stored(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		   uint16_t rank)
{
	(void)ns;
	(void)key;
	(void)rank;
	of(t)->offered++;
}

static bool take_nothing(void *ctx, const struct l1_victim *victim)
{
	(void)ctx;
	(void)victim;
	return false;
}

static struct l1_lower_tier victims(struct tier *t)
{
	return (struct l1_lower_tier){.ctx = of(t), .take_victim = take_nothing};
}

static bool writable(struct tier *t)
{
	return of(t)->readable && of(t)->writable;
}

static void ns_usage(struct tier *t, const struct kvt_ns *ns, struct tier_usage *out)
{
	struct mem_tier *m = of(t);
	*out = (struct tier_usage){0};
	for (unsigned i = 0; i < m->nparts; i++)
		if (m->parts[i].ns_digest == ns->digest) {
			out->items++;
			out->bytes += m->parts[i].length;
		}
}

static void summary(const struct tier *t, struct tier_summary *out)
{
	const struct mem_tier *m = of(t);
	*out = (struct tier_summary){.state = m->readable ? "ready" : "stopped",
				     .degraded = !m->readable, .items = m->nparts};
}

static void stats_visit_tier(const struct tier *t, stat_visit_fn fn, void *ctx)
{
	const struct mem_tier *m = of(t);
	stats_visit(&m->def, 1, &m->held, fn, ctx);
}

static void flush(struct tier *t, uint32_t limit_ms)
{
	(void)limit_ms;
	of(t)->flushed = ++*of(t)->clock;
}

static void close_tier(struct tier *t)
{
	of(t)->closed = ++*of(t)->clock;
}

static const struct tier_ops write_through_ops = {
	.contains = contains, .readable = readable, .read_begin = read_begin, .stored = stored,
	.ns_usage = ns_usage, .summary = summary, .stats_visit = stats_visit_tier,
	.flush = flush, .close = close_tier,
};

static const struct tier_ops victim_ops = {
	.contains = contains, .readable = readable, .read_begin = read_begin,
	.victims = victims, .writable = writable, .ns_usage = ns_usage, .summary = summary,
	.stats_visit = stats_visit_tier, .flush = flush, .close = close_tier,
};

void mem_tier_init(struct mem_tier *m, const char *name, uint8_t wire, bool victims,
		   unsigned *clock)
{
	*m = (struct mem_tier){
		.tier = {.ops = victims ? &victim_ops : &write_through_ops, .name = name,
			 .wire = wire, .unit = "items", .usage_help = "Bytes held.",
			 .quota_help = "Quota."},
		.readable = true, .writable = true, .clock = clock,
		.def = {"parts_held", STAT_GAUGE, "", "", "Parts held.", 0}};
}

void mem_tier_put(struct mem_tier *m, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, const uint8_t *bytes, uint32_t length)
{
	struct mem_part *p = &m->parts[m->nparts++];
	*p = (struct mem_part){.ns_digest = ns->digest, .key = *key, .rank = rank,
			       .length = length};
	memcpy(p->bytes, bytes, length);
	atomic_store(&m->held, m->nparts);
}
