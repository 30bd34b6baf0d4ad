/*
 * tier.h — one lower tier (below L1) as the tier stack (tiers.h) sees it: a
 * descriptor of operations, in the manner of a Knot module or CacheLib
 * Navy's engine interface. One adapter file owns everything about a tier
 * (its settings, threads, stats and read path: l2svc.c, l3svc.c) and hands
 * the stack a struct tier whose ops are its own; no other file names the
 * tier. Adding a tier is one adapter file and one registration line
 * (docs/development.md, "How to add a tier").
 *
 * A tier is one of two kinds. The victim tier (victims set: L2) takes L1's
 * victims and the write-behind of dirty L1 items, and is read through only
 * in the stack's evict mode. A write-through tier (stored set: L3) is
 * offered each part a STORE completes, and is read whatever the mode.
 *
 * Owner: the event loop thread, every op but summary and stats_visit, which
 * any thread may call (the control plane's). Unset ops (NULL) are ops the
 * tier does not have; the stack skips them.
 */
#ifndef KVTD_TIER_H
#define KVTD_TIER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "l1.h"
#include "ns.h"
#include "stat_table.h"

/*
 * One part's read. The caller sets target, done (and abandoned, when it
 * can answer without the read) and keeps rd until done runs. The tier calls
 * target(rd, length) once it knows the part's length: it returns where the
 * bytes go (room for cap bytes), or NULL to refuse (the read then ends
 * -ENOENT). done(rd, status, length) runs once: status 0 with the bytes in
 * place, or -ENOENT (a miss, a failed check) or another -errno. When the
 * tier gives a read up that the kernel still holds, abandoned(rd) runs
 * first: the caller answers without it but keeps rd and the target memory
 * until done.
 */
struct tier_read {
	uint32_t cap;
	uint8_t *(*target)(struct tier_read *rd, uint32_t length);
	void (*done)(struct tier_read *rd, int status, uint32_t length);
	void (*abandoned)(struct tier_read *rd);
};

/* What one namespace holds in a tier. */
struct tier_usage {
	uint64_t items;            /* the tier's unit: items (L2), files (L3) */
	uint64_t bytes;
	uint64_t quota;            /* bytes; 0: none */
};

/* A tier's state and size, as /v1/tiers and the health probes show it. */
struct tier_summary {
	const char *state;         /* "ready", "recovering", "failed", "unavailable", "degraded"... */
	bool degraded;             /* /healthz says "degraded" (L1 serves on) */
	const char *writes, *reads;  /* "on", "stopped", "served"; NULL: not shown */
	const char *path;          /* NULL: not shown */
	const char *reason;        /* why degraded; NULL: none */
	uint64_t next_probe_in_ms; /* a failed tier's next probe; 0: none */
	uint64_t capacity_bytes, used_bytes, items, hits, misses, evictions;
};

struct tier;

struct tier_ops {
	/* --- lookups and reads --- */
	/* Whether it holds every part of (ns, key). */
	bool (*contains)(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key);
	/* Whether it serves reads now (a victim tier: only in evict mode, the stack asks). */
	bool (*readable)(struct tier *t);
	/*
	 * Begins reading rank's part of (ns, key) into what rd->target gives.
	 * 0: begun, rd->done runs (perhaps before this returns); -ENOENT: not
	 * held, nothing runs.
	 */
	int (*read_begin)(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
			  uint16_t rank, struct tier_read *rd);

	/* --- writes --- */
	/* A write-through tier: a STORE completed (ns, key) in L1; rank's part is offered. */
	void (*stored)(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		       uint16_t rank);
	/* The victim tier: L1's way down to it (l1.h), and whether it writes now. */
	struct l1_lower_tier (*victims)(struct tier *t);
	bool (*writable)(struct tier *t);
	/* The victim tier: its victim counters (taken: written or held already; dropped). */
	void (*victim_counts)(const struct tier *t, uint64_t *taken, uint64_t *dropped);

	/* --- namespaces --- */
	void (*ns_usage)(struct tier *t, const struct kvt_ns *ns, struct tier_usage *out);
	/* Drops what ns holds; returns the items dropped. */
	uint64_t (*ns_drop)(struct tier *t, const struct kvt_ns *ns);
	/* ns's quota of this tier changed (ns.h): trims ns to it. */
	void (*ns_trim)(struct tier *t, const struct kvt_ns *ns);

	/* --- the operator --- */
	/* Evicts bytes (UINT64_MAX: all); the bytes freed, or -EAGAIN while it cannot. */
	int64_t (*evict)(struct tier *t, uint64_t bytes);

	/* --- the loop: after each round --- */
	/* Takes completions (before L1's write-behind runs). */
	void (*reap)(struct tier *t);
	/* Submits what the round queued; ms within which the loop must look again, or -1. */
	int (*submit)(struct tier *t);

	/* --- state and stats: any thread --- */
	void (*summary)(const struct tier *t, struct tier_summary *out);
	/* Every stat of the tier (stat_table.h) for /metrics and /v1/stats. */
	void (*stats_visit)(const struct tier *t, stat_visit_fn fn, void *ctx);

	/* --- stop --- */
	/* Before a stop, the data plane closed: what must reach the tier does, within limit_ms. */
	void (*flush)(struct tier *t, uint32_t limit_ms);
	void (*close)(struct tier *t);
};

/* The stack's own counters of a tier (tiers.c counts them; labelled by the tier's name). */
struct tier_counters {
	_Atomic uint64_t lookup_hits;      /* keys LOOKUPs found in this tier */
	_Atomic uint64_t blocks_loaded;    /* blocks LOADs read from it */
	_Atomic uint64_t blocks_promoted;  /* of those, kept in L1 */
};

struct tier {
	const struct tier_ops *ops;
	const char *name;          /* "l2": its /v1/tiers name, JSON keys and metric labels */
	uint8_t wire;              /* what LOOKUP replies name it (enum kvt_tier) */
	const char *unit;          /* what its usage counts: "items", "files" */
	const char *usage_help;    /* how /metrics explains its per-namespace bytes */
	const char *quota_help;    /* and its per-namespace quota */
	/* The stack's (tiers.c): */
	struct tier_counters counters;
	char hit_labels[48];       /* tier="NAME",result="hit" */
	char tier_label[32];       /* tier="NAME" */
	struct stat_def counter_defs[3];
};

#endif
