/*
 * owner_stats.h — counters written by one owner thread and read by any:
 * a relaxed load and store instead of an atomic read-modify-write (no lock
 * prefix on the hot paths). X is a pointer to a struct with a
 * `stats` member of _Atomic uint64_t fields. Used by the L1 and L2 engines
 * and the data plane (each written by the loop thread only).
 */
#ifndef KVTD_OWNER_STATS_H
#define KVTD_OWNER_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#define STAT_GET(x, field) atomic_load_explicit(&(x)->stats.field, memory_order_relaxed)
#define STAT_SET(x, field, v) \
	atomic_store_explicit(&(x)->stats.field, (v), memory_order_relaxed)
#define STAT_ADD(x, field, n) STAT_SET(x, field, STAT_GET(x, field) + (n))
#define STAT_SUB(x, field, n) STAT_ADD(x, field, -(uint64_t)(n))

#endif
