/*
 * stat_table.h — one shape for every stats list of kvtierd (L1, L2, the
 * data plane, its refusals, the GPU side): X-macro lists of
 *
 *     X(field, kind, metric, labels, help)
 *
 * field: the snapshot's uint64_t member and the /v1/stats JSON key; kind:
 * COUNTER (only grows) or GAUGE; metric: the Prometheus family ("" for JSON
 * only); labels: the sample's labels without braces ("" for none); help:
 * what it counts, the family's HELP line (a family's first sample's help).
 * A list becomes a stat_def array with STAT_DEF, and each engine's visitor
 * hands (def, value) pairs from a snapshot to /metrics (metrics.c) and
 * /v1/stats (api.c), which name no field by hand.
 */
#ifndef KVTD_STAT_TABLE_H
#define KVTD_STAT_TABLE_H

#include <stddef.h>
#include <stdint.h>

enum stat_kind {
	STAT_COUNTER,
	STAT_GAUGE,
};

struct stat_def {
	const char *field;
	enum stat_kind kind;
	const char *metric;
	const char *labels;
	const char *help;
	size_t offset;             /* of the uint64_t in the snapshot */
};

/* One stat_def of a list whose snapshot type is SNAP (define STAT_SNAP first). */
#define STAT_DEF(field, kind, metric, labels, help) \
	{#field, STAT_##kind, metric, labels, help, offsetof(STAT_SNAP, field)},
/* The uint64_t snapshot member of a list entry. */
#define STAT_SNAP_FIELD(field, kind, metric, labels, help) uint64_t field;
/* The live (atomic) member of a list entry. */
#define STAT_LIVE_FIELD(field, kind, metric, labels, help) _Atomic uint64_t field;

typedef void (*stat_visit_fn)(void *ctx, const struct stat_def *def, uint64_t value);

/* Calls fn with each of the n defs and its value in snapshot. */
static inline void stats_visit(const struct stat_def *defs, size_t n, const void *snapshot,
			       stat_visit_fn fn, void *ctx)
{
	for (size_t i = 0; i < n; i++)
		fn(ctx, &defs[i], *(const uint64_t *)((const char *)snapshot + defs[i].offset));
}

#endif
