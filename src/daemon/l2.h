/*
 * l2.h — the L2 tier engine: a file or block device opened with O_DIRECT,
 * cut into log-structured regions (docs/l2-format.md), its reads and writes
 * on one io_uring (l2ring.h) on the owner thread; the index of the parts it
 * holds; the write
 * buffers victims are copied into; reads into caller memory, checksummed;
 * region reclaim (oldest region first); recovery of the index at start; and
 * the counters of all of it.
 *
 * A library with no sockets or threads of its own. After l2_open, l2_recover
 * may run on any one thread; from l2_start on, every call comes from the
 * owner thread, which calls l2_process when l2_event_fd is readable and
 * l2_submit after queueing work. l2_stats_read may be called from any thread.
 *
 * Items are written whole (every part of a block, in one write) and dropped
 * whole, so an item in L2 is always complete. A namespace with an L2 quota
 * (kvt_ns.l2_quota) drops its own oldest items to take a victim past it.
 */
#ifndef KVTD_L2_H
#define KVTD_L2_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "index.h"
#include "kvtier/kvtier.h"
#include "l1.h"
#include "l2ring.h"
#include "ns.h"
#include "stat_table.h"

/* The L2 engine's counters and gauges (stat_table.h's shape); its ring's are L2RING_STATS. */
#define L2_STATS(X) \
	X(victims_written, COUNTER, "kvtier_l2_victims_total", "result=\"written\"", \
	  "L1 victims offered to L2, by what became of them: written.") \
	X(bytes_written, COUNTER, "kvtier_stored_bytes_total", "tier=\"l2\"", \
	  "Bytes written to L2, headers and padding included.") \
	X(direct_writes, COUNTER, "kvtier_l2_direct_writes_total", "", \
	  "Items written straight from their L1 slots, checksummed off the loop (the writer's way; " \
	  "the rest of the written victims were copied into a write buffer at eviction).") \
	X(victims_present, COUNTER, "kvtier_l2_victims_total", "result=\"present\"", \
	  "L1 victims skipped: L2 held them already.") \
	X(victims_dropped_behind, COUNTER, "kvtier_l2_victims_total", "result=\"dropped_behind\"", \
	  "L1 victims dropped: no write buffer or region free (L2 behind).") \
	X(victims_dropped_unfit, COUNTER, "kvtier_l2_victims_total", "result=\"dropped_unfit\"", \
	  "L1 victims dropped: larger than a region.") \
	X(victims_dropped_off, COUNTER, "kvtier_l2_victims_total", "result=\"dropped_off\"", \
	  "L1 victims dropped: L2 not ready or failed.") \
	X(victims_dropped_quota, COUNTER, "kvtier_l2_victims_total", "result=\"dropped_quota\"", \
	  "L1 victims dropped: larger than their namespace's L2 quota.") \
	X(reads, COUNTER, "", "", "Part reads served by L2.") \
	X(reads_from_disk, COUNTER, "kvtier_l2_reads_total", "source=\"disk\"", \
	  "Part reads L2 served, by source: the disk.") \
	X(reads_from_memory, COUNTER, "kvtier_l2_reads_total", "source=\"write_buffer\"", \
	  "Part reads served from a write buffer.") \
	X(bytes_read, COUNTER, "kvtier_loaded_bytes_total", "tier=\"l2\"", "Data bytes read from L2.") \
	X(read_misses, COUNTER, "kvtier_l2_read_misses_total", "", \
	  "Part reads of blocks L2 does not hold.") \
	X(checksum_failures, COUNTER, "kvtier_l2_checksum_failures_total", "", \
	  "L2 reads whose data checksum failed (each a miss; the item is dropped).") \
	X(io_errors, COUNTER, "kvtier_l2_io_errors_total", "", "L2 reads and writes that failed.") \
	X(regions_reclaimed, COUNTER, "kvtier_l2_regions_reclaimed_total", "", \
	  "Regions reclaimed for new writes.") \
	X(items_reclaimed, COUNTER, "kvtier_evictions_total", "tier=\"l2\",reason=\"reclaim\"", \
	  "Items dropped with their region (L2 evictions).") \
	X(items_dropped_admin, COUNTER, "kvtier_evictions_total", "tier=\"l2\",reason=\"admin\"", \
	  "Items dropped by an operator.") \
	X(items_dropped_quota, COUNTER, "kvtier_evictions_total", "tier=\"l2\",reason=\"quota\"", \
	  "Items dropped to keep their namespace within its L2 quota.") \
	X(recoveries, COUNTER, "", "", "Times a probe found a failed L2 writable again.") \
	X(probes_failed, COUNTER, "", "", "Probe writes of a failed L2 that failed.") \
	X(recovered_items, GAUGE, "kvtier_l2_recovered_items", "", "Items the scan at start found.") \
	X(recovery_dropped, GAUGE, "kvtier_l2_recovery_dropped_records", "", \
	  "Records the scan at start dropped (items missing a part).") \
	X(capacity_bytes, GAUGE, "kvtier_tier_capacity_bytes", "tier=\"l2\"", \
	  "Bytes of the L2 file or device in use as regions.") \
	X(used_bytes, GAUGE, "kvtier_tier_used_bytes", "tier=\"l2\"", "Bytes of regions holding records.") \
	X(items, GAUGE, "kvtier_tier_items", "tier=\"l2\"", "Items (blocks, every part) held.") \
	X(regions, GAUGE, "kvtier_l2_regions", "", "L2 regions.") \
	X(free_regions, GAUGE, "kvtier_l2_free_regions", "", "L2 regions holding nothing.") \
	X(ready, GAUGE, "kvtier_l2_ready", "", "1 once the L2 index is rebuilt.") \
	X(failed, GAUGE, "kvtier_l2_failed", "", \
	  "1 after repeated I/O errors: writes stopped until a probe succeeds; reads go on.")

struct l2_stats {
	L2_STATS(STAT_LIVE_FIELD)
	struct l2ring_stats ring;  /* last: the snapshot lists the ring's fields after L2's */
};

struct l2_stats_snapshot {
	L2_STATS(STAT_SNAP_FIELD)
	L2RING_STATS(STAT_SNAP_FIELD)
};


struct l2;
struct l2_region;
struct l2_wbuf;
struct l2_ns_usage;

/* Buckets of the per-namespace usage table (a power of two). */
#define L2_USAGE_BUCKETS 256

/*
 * A part read, owned by the caller (no allocation per read). done is called
 * on the owner thread with 0, -ENOENT (the item went away or its checksum
 * failed: a miss) or -EIO.
 */
struct l2_read {
	void (*done)(struct l2_read *rd, int status);
	uint32_t length;          /* data bytes of the part: set by l2_read_begin */
	/* Private. */
	struct l2_io io;
	struct l2_region *region;
	uint64_t checksum;
};

struct l2_config {
	const char *path;
	uint64_t size;            /* hard cap on the bytes used; 0: the size of an existing file or device */
	uint64_t region_size;     /* 0: chosen from size */
	uint32_t queue_depth;
	uint32_t write_buffers;   /* region-sized buffers victims are written from; 0 means 2 */
	uint8_t *arena;           /* memory reads go into (L1), registered with the ring when it can be */
	uint64_t arena_size;
};

struct l2 {
	int fd;
	bool in_memory;               /* the file is on tmpfs or ramfs: "L2" is RAM */
	struct l2_ring ring;          /* its reads and writes (tests set ring.fault) */
	uint8_t *arena;
	uint64_t arena_size;
	uint64_t region_size;
	uint32_t nregions;
	struct l2_region *regions;
	struct l2_region *open;       /* being filled, NULL when none */
	struct l2_wbuf *wbufs;        /* one fills while the others are written out */
	uint32_t nwbufs;
	uint64_t next_seq;
	struct index index;
	LIST_HEAD(l2_usage_bucket, l2_ns_usage) *usage;  /* by namespace digest */
	uint32_t consecutive_errors;
	bool probing;                 /* a probe write is in flight */
	struct l2_stats stats;
};

/*
 * Opens (creating a regular file when missing) and sizes the file, sets up
 * the ring, the write buffers and registrations. Reads nothing yet. 0 or
 * -errno with the reason in why (io_uring blocked, alignment, sizes).
 */
int l2_open(struct l2 *l2, const struct l2_config *cfg, char *why, size_t whylen);
/* Waits for I/O in flight, then frees everything (the file stays). */
void l2_close(struct l2 *l2);

/*
 * Rebuilds the index from the region headers on disk (synchronous reads).
 * Records after the first bad header of a region (a torn tail) are ignored;
 * items missing a part are dropped and counted. 0 or -errno.
 */
int l2_recover(struct l2 *l2);
/* After l2_recover: L2 serves from now on, on the calling (owner) thread. */
void l2_start(struct l2 *l2);

/* Readable when completions wait: call l2_process. */
int l2_event_fd(const struct l2 *l2);
void l2_process(struct l2 *l2);
/*
 * Takes the completions there are without waiting for the eventfd (when
 * there are none while I/O is out, after entering the kernel to run what
 * it holds for this thread), then submits what is queued; returns the I/O
 * still in flight. The eventfd is only a hint (a wake-up can come late or,
 * seen here, not at all): the owner calls this once per round and looks
 * again soon while I/O is out.
 */
uint32_t l2_poll(struct l2 *l2);
/* Hands queued reads and writes to the kernel. */
void l2_submit(struct l2 *l2);

/*
 * Ready: reads are served, also while failed (each verified by its checksum,
 * so a bad disk gives misses, never wrong bytes).
 */
bool l2_readable(const struct l2 *l2);
/* Ready and not failed: victims are written. */
bool l2_writable(const struct l2 *l2);
/*
 * A failed L2 tries a write again: one header block rewritten with the bytes
 * it holds (a free region's zeros, or an idle region's own header). When it
 * succeeds L2 is no longer failed (counted in recoveries); when it fails,
 * in probes_failed. 0 when queued, -EINVAL when not failed (or not ready),
 * -EALREADY while one is in flight, -EAGAIN when no region is idle.
 */
int l2_probe(struct l2 *l2);

/*
 * Writes an L1 victim: its records go into the open region's write buffer
 * and out at once. Never waits: a victim L2 cannot take now is dropped and
 * counted (victims_dropped_*), one it holds already is counted as present.
 */
void l2_write_victim(struct l2 *l2, const struct l1_victim *v);
/*
 * A direct write: an item written from memory its owner keeps unchanged
 * until done is called (L1's slots, registered with the ring), with no copy
 * and with checksums the owner computes off the loop thread. Caller-owned,
 * with room for the item's parts.
 */
struct l2_direct_part {
	const uint8_t *data;      /* L2FMT_BLOCK-aligned; zero from length to the next block */
	uint32_t length;
	uint64_t checksum;        /* XXH3-64 of the data: the owner's, before l2_direct_write */
	uint64_t at;              /* private: the record's offset in its region */
};

struct l2_direct {
	/* On the owner thread once every write is done: 0, or -EIO / -ENOMEM (the item is dropped). */
	void (*done)(struct l2_direct *d, int status);
	/* Private. */
	struct l2_region *region;
	uint64_t region_seq;
	uint64_t ns_digest;
	struct kvt_key key;
	uint32_t ios;
	int status;
	uint16_t nparts;
	struct l2_direct_part parts[];  /* v->nparts of them */
};

/*
 * Reserves the records of v in the open region: from now on L2 holds the
 * item (l2_contains), though not durably and not readable (its reads miss)
 * until its writes complete. Fills d->parts[i].data and length from v; the
 * caller then sets each checksum and calls l2_direct_write. 0, or (counted
 * as for l2_write_victim) -EEXIST when held already, -EIO when not
 * writable, -E2BIG when larger than a region, -EDQUOT when larger than its
 * namespace's quota, -ENOSPC when L2 is behind, -ENOMEM.
 */
int l2_direct_reserve(struct l2 *l2, const struct l1_victim *v, struct l2_direct *d);
/*
 * Queues the header blocks (from the write buffer) and the data (from the
 * parts' own memory) of a reserved item; d->done follows. An item dropped
 * meanwhile is written all the same and its tombstone after (a restart
 * never brings it back).
 */
void l2_direct_write(struct l2 *l2, struct l2_direct *d);

/* Room for a victim now: an idle write buffer, or an open region less than half full. */
bool l2_has_room(const struct l2 *l2);
bool l2_contains(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key);
/* Held and on disk: every part's record write has completed (or was found at start). */
bool l2_durable(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key);

/* The data bytes of rank's part of (ns, key), or -ENOENT (counted as a read miss). */
int64_t l2_part_length(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key,
		       uint16_t rank);

/*
 * Starts reading rank's part of (ns, key) into dst (cap bytes, aligned to
 * L2FMT_BLOCK). Sets rd->length. Returns 0 when rd->done will be called, 1
 * when the bytes were copied already (from a write buffer), -ENOENT when L2
 * does not hold the part, -ERANGE when cap is too small, -EIO when L2 failed.
 */
int l2_read_begin(struct l2 *l2, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, uint8_t *dst, uint64_t cap, struct l2_read *rd);

/* Drops every item of ns; returns how many. */
uint64_t l2_ns_drop(struct l2 *l2, const struct kvt_ns *ns);
/*
 * What L2 holds of ns (found by its digest, so items of an earlier run
 * count): items, and bytes of their records.
 */
void l2_ns_usage(const struct l2 *l2, const struct kvt_ns *ns, uint64_t *items, uint64_t *bytes);
/*
 * Drops ns's oldest items until it is within ns->l2_quota (victims do this
 * as they come; this is for a quota just lowered). Returns how many.
 */
uint64_t l2_ns_trim(struct l2 *l2, const struct kvt_ns *ns);
/* Reclaims whole regions, oldest first, until bytes are freed (all: UINT64_MAX). */
uint64_t l2_evict(struct l2 *l2, uint64_t bytes);

void l2_stats_read(const struct l2 *l2, struct l2_stats_snapshot *out);
/* Calls fn with each stat of L2_STATS and L2RING_STATS and its value now (any thread). */
void l2_stats_visit(const struct l2 *l2, stat_visit_fn fn, void *ctx);

#endif
