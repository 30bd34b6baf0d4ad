/*
 * owner_stats.h — counters written by one owner thread and read by any:
 * a relaxed load and store instead of an atomic read-modify-write (no lock
 * prefix on the hot paths). STAT_* take a pointer to an owner with a
 * `stats` member of _Atomic uint64_t fields, STATS_* a pointer to the stats
 * themselves. Used by the L1 and L2 engines and the data plane's modules
 * (each written by the loop thread only).
 */
#ifndef KVTD_OWNER_STATS_H
#define KVTD_OWNER_STATS_H

#include <stdatomic.h>
#include <stdint.h>

/* On a stats struct itself (a module that is handed another's counters). */
#define STATS_GET(st, field) atomic_load_explicit(&(st)->field, memory_order_relaxed)
#define STATS_SET(st, field, v) atomic_store_explicit(&(st)->field, (v), memory_order_relaxed)
#define STATS_ADD(st, field, n) STATS_SET(st, field, STATS_GET(st, field) + (n))

/* On an owner x with a stats member. */
#define STAT_GET(x, field) STATS_GET(&(x)->stats, field)
#define STAT_SET(x, field, v) STATS_SET(&(x)->stats, field, v)
#define STAT_ADD(x, field, n) STATS_ADD(&(x)->stats, field, n)
#define STAT_SUB(x, field, n) STAT_ADD(x, field, -(uint64_t)(n))

#endif
