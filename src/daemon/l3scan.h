/*
 * l3scan.h — the L3 keeper: a thread of its own that walks the shared L3
 * directory (blocking metadata calls, never on the event loop) every
 * interval or when asked, and on each walk
 *   - makes L3's own directories again when they are gone,
 *   - accounts every node's files (files, and the bytes each allocates: a
 *     sparse file costs what it holds; one past the largest part is foreign),
 *     opening each directory from the root down through no symlink, so
 *     nothing a writer of the shared directory links in leads it outside,
 *   - enforces the namespace quota: a namespace (its digest) whose files,
 *     every node's, pass it loses its oldest files down to 95% of it,
 *   - enforces the cap: past it, removes the oldest files by modification
 *     time (their publish time) down to 95% of it; every node does both on
 *     what it sees, so no coordinator is needed, and two nodes removing the
 *     same file is an ENOENT, not an error,
 *   - removes temporaries older than L3SCAN_STALE_S (publishers that died),
 *   - counts quarantine/ in L3's bytes and expires it (L3SCAN_QUARANTINE_S,
 *     or past a sixteenth of the cap, oldest first),
 *   - keeps what each namespace (digest) holds after it, for l3scan_ns_usage,
 *   - hands the list of parts it saw (namespace digest, key, rank) to its
 *     owner through a callback on the keeper's thread, for lookups.
 * Owner: l3svc (start, kick, stop); the stats are read from any thread.
 */
#ifndef KVTD_L3SCAN_H
#define KVTD_L3SCAN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvtier.h"
#include "stat_table.h"

#define L3SCAN_STALE_S 600  /* a publish never takes this long: older temporaries are dead */
#define L3SCAN_LOW 0.95     /* a cap or quota enforcement removes files down to this share of it */
#define L3SCAN_QUARANTINE_S 3600 /* a quarantined file is kept this long for an operator to look at */

#define L3SCAN_STATS(X) \
	X(scans, COUNTER, "kvtier_l3_scans_total", "", \
	  "Walks of the L3 directory (accounting every node's files, the cap, stale temporaries).") \
	X(files_removed, COUNTER, "kvtier_evictions_total", "tier=\"l3\",reason=\"cap\"", \
	  "L3 files this node removed, oldest first, to keep L3 within l3-size.") \
	X(quota_files_removed, COUNTER, "kvtier_evictions_total", "tier=\"l3\",reason=\"quota\"", \
	  "L3 files this node removed, their namespace's oldest first, to keep each namespace within namespace-l3-quota.") \
	X(temporaries_removed, COUNTER, "kvtier_l3_temporaries_removed_total", "", \
	  "Temporaries of publishers that died, removed by the walk.") \
	X(quarantine_removed, COUNTER, "kvtier_l3_quarantine_removed_total", "", \
	  "Quarantined files removed: older than an hour, or past a sixteenth of l3-size, oldest first.") \
	X(dirs_remade, COUNTER, "kvtier_l3_dirs_remade_total", "", \
	  "L3's own directories (tmp, quarantine, v1) found gone and made again.") \
	X(scan_errors, COUNTER, "kvtier_l3_scan_errors_total", "", \
	  "Directories or files the walk could not read or remove (other than vanished ones).") \
	X(capacity_bytes, GAUGE, "kvtier_tier_capacity_bytes", "tier=\"l3\"", \
	  "l3-size, the cap every node enforces; 0: none.") \
	X(namespace_quota_bytes, GAUGE, "kvtier_l3_namespace_quota_bytes", "", \
	  "namespace-l3-quota, the bytes of L3 files one namespace may hold (every node's); 0: none.") \
	X(used_bytes, GAUGE, "kvtier_tier_used_bytes", "tier=\"l3\"", \
	  "Bytes of L3 files (every node's) at the end of the last walk.") \
	X(items, GAUGE, "kvtier_tier_items", "tier=\"l3\"", "L3 files (parts) at the end of the last walk.") \
	X(quarantine_bytes, GAUGE, "kvtier_l3_quarantine_bytes", "", \
	  "Bytes of quarantined files (failed verification), counted in L3's bytes.") \
	X(last_scan_ms, GAUGE, "kvtier_l3_scan_duration_seconds", "", "How long the last walk took (the JSON field in ms, the metric in seconds).")

struct l3scan_stats {
	L3SCAN_STATS(STAT_LIVE_FIELD)
};

struct l3scan_stats_snapshot {
	L3SCAN_STATS(STAT_SNAP_FIELD)
};

/* A part the walk saw. */
struct l3scan_part {
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank;
};

/* What one namespace (its digest) holds in L3, every node's files, at the end of a walk. */
struct l3scan_ns_usage {
	uint64_t ns_digest;
	uint64_t files, bytes;
};

struct l3scan {
	char root[512];
	uint64_t cap;                /* bytes; 0: none */
	uint64_t ns_quota;           /* bytes per namespace digest; 0: none */
	uint32_t interval_ms;
	/* Runs on the keeper's thread after each walk; takes parts (free() it). */
	void (*seen)(void *ctx, struct l3scan_part *parts, uint64_t n);
	void *ctx;
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool kicked, stopping;
	struct l3scan_ns_usage *usage; /* the last walk's, by digest; under lock */
	uint64_t nusage;
	struct l3scan_stats stats;
};

/* What the keeper keeps L3 within, and how often it walks. */
struct l3scan_limits {
	uint64_t cap;         /* every node's files together; 0: none */
	uint64_t ns_quota;    /* one namespace's files, every node's; 0: none */
	uint32_t interval_ms;
};

/* Starts the keeper on root (its first walk at once). 0 or -errno. */
int l3scan_start(struct l3scan *s, const char *root, const struct l3scan_limits *limits,
		 void (*seen)(void *ctx, struct l3scan_part *parts, uint64_t n), void *ctx);
/* Asks for a walk now (this node published past what the cap leaves). Any thread. */
void l3scan_kick(struct l3scan *s);
/* Stops the thread (a walk in progress finishes first). */
void l3scan_stop(struct l3scan *s);

/* The last walk's files and bytes of the namespace of ns_digest (0, 0 before a walk,
 * when it has none, or with the keeper stopped). Any thread, but not during
 * l3scan_start or l3scan_stop (their owner's thread: the event loop's). */
void l3scan_ns_usage(struct l3scan *s, uint64_t ns_digest, uint64_t *files, uint64_t *bytes);

void l3scan_stats_read(const struct l3scan *s, struct l3scan_stats_snapshot *out);
void l3scan_stats_visit(const struct l3scan *s, stat_visit_fn fn, void *ctx);

#endif
