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
 * Prometheus wants base units: a field counted in milliseconds (its name
 * ending in _ms) whose metric ends in _seconds is exported divided by 1000.
 * A list becomes a stat_def array with STAT_DEF, and each engine's visitor
 * (stats_visit over its live counters) hands (def, value) pairs to /metrics
 * (metrics.c) and /v1/stats (api.c), which name no field by hand.
 */
#ifndef KVTD_STAT_TABLE_H
#define KVTD_STAT_TABLE_H

#include <stdatomic.h>
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
	size_t offset;             /* of the _Atomic uint64_t in the live struct */
};

/* One stat_def of a list kept in the struct STAT_LIVE (define it first). */
#define STAT_DEF(field, kind, metric, labels, help) \
	{#field, STAT_##kind, metric, labels, help, offsetof(STAT_LIVE, field)},
/* The uint64_t snapshot member of a list entry. */
#define STAT_SNAP_FIELD(field, kind, metric, labels, help) uint64_t field;
/* The live (atomic) member of a list entry. */
#define STAT_LIVE_FIELD(field, kind, metric, labels, help) _Atomic uint64_t field;

typedef void (*stat_visit_fn)(void *ctx, const struct stat_def *def, uint64_t value);

/* Calls fn with each of the n defs and its value now in live (relaxed loads, any thread). */
static inline void stats_visit(const struct stat_def *defs, size_t n, const void *live,
			       stat_visit_fn fn, void *ctx)
{
	for (size_t i = 0; i < n; i++)
		fn(ctx, &defs[i],
		   atomic_load_explicit((const _Atomic uint64_t *)((const char *)live + defs[i].offset),
					memory_order_relaxed));
}

/*
 * A snapshot of a live struct made of a list's fields alone (STAT_LIVE_FIELD
 * and STAT_SNAP_FIELD give both the same layout): field by field, relaxed.
 */
static inline void stats_copy(const void *live, void *snapshot, size_t bytes)
{
	const _Atomic uint64_t *from = live;
	uint64_t *to = snapshot;
	for (size_t i = 0; i < bytes / sizeof(uint64_t); i++)
		to[i] = atomic_load_explicit(&from[i], memory_order_relaxed);
}

#endif
