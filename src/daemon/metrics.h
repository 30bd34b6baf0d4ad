/*
 * metrics.h — the Prometheus text exposition (format 0.0.4) of the daemon's
 * counters: L1's, each lower tier's (through the stack) and the data
 * plane's, read without stopping any.
 */
#ifndef KVTD_METRICS_H
#define KVTD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "ns.h"
#include "tiers.h"

struct l1;
struct tiers;
struct dp;
struct http_stats;

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* One namespace's usage and quotas, copied on the loop thread for a scrape. */
struct metrics_ns {
	uint32_t id;
	char model[KVT_NS_MODEL_MAX + 1];
	uint64_t l1_bytes, l1_quota, l1_quota_evictions;
	struct tier_usage lower[TIERS_MAX_LOWER];  /* the stack's lower tiers, in order */
};

/*
 * The whole page, malloc'd (free it), or NULL when out of memory; ns: the
 * namespaces (nns of them) for the per-namespace families.
 */
char *metrics_render(const struct l1 *l1, const struct tiers *tiers, const struct dp *dp,
		     const struct http_stats *http, const struct metrics_ns *ns, uint32_t nns,
		     size_t *len);

#endif
