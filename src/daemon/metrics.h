/*
 * metrics.h — the Prometheus text exposition (format 0.0.4) of the daemon's
 * counters: L1's and the data plane's, read without stopping either.
 */
#ifndef KVTD_METRICS_H
#define KVTD_METRICS_H

#include <stddef.h>

struct l1;
struct l2;
struct dp;

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The whole page, malloc'd (free it), or NULL when out of memory. */
char *metrics_render(const struct l1 *l1, const struct l2 *l2, const struct dp *dp, size_t *len);

#endif
