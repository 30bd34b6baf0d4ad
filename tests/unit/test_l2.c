/*
 * test_l2.c — the L2 engine on a real file with O_DIRECT and io_uring:
 * round trips from the write buffer and from disk, tensor-parallel items,
 * capacity under reclaim, restart recovery, corruption of the file (data and
 * headers), namespace drops that survive a restart, direct writes from the
 * caller's memory with the caller's checksums, and injected faults
 * (EIO, short reads, -EAGAIN) through the engine's fault hook.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "l2.h"
#include "l2fmt.h"
#include "test_util.h"
#include <xxhash.h>

#define KiB 1024u
#define REGION (256 * KiB)
#define NREGIONS 8
#define PART 10000u              /* not a multiple of the block: padding is exercised */
#define SLOT l2fmt_align(PART)

/* Reads land here: O_DIRECT wants aligned memory, which cmocka's allocator does not give. */
static _Alignas(4096) uint8_t dst_block[(PART + 4095) / 4096 * 4096];

struct fixture {
	char path[256];
	struct ns_registry reg;
	struct kvt_ns *ns;       /* TP 1 */
	struct kvt_ns *tp2;      /* TP 2 */
	struct l2 l2;
	bool open;
	uint8_t *dst;            /* aligned read target (dst_block) */
	uint32_t write_buffers;  /* 0: the engine's default (2) */
	/* fault injection */
	int fault_res;           /* the result to force; 0: none */
	unsigned fault_count;    /* completions to alter */
	bool fault_short;        /* halve the transfer instead */
	bool fault_writes;       /* alter writes, not reads */
};

static int inject(void *ctx, bool write, uint32_t wanted, int res)
{
	struct fixture *f = ctx;
	if (write != f->fault_writes || !f->fault_count || res < 0)
		return res;
	f->fault_count--;
	if (f->fault_short)
		return (int)(wanted / 2 > L2FMT_BLOCK ? wanted / 2 : 100);
	return f->fault_res;
}

static void l2_up(struct fixture *f)
{
	char why[256] = "";
	struct l2_config cfg = {.path = f->path, .size = REGION * NREGIONS, .region_size = REGION,
				.queue_depth = 8, .write_buffers = f->write_buffers};
	int err = l2_open(&f->l2, &cfg, why, sizeof(why));
	if (err)
		fail_msg("l2_open: %s", why);
	assert_int_equal(l2_recover(&f->l2), 0);
	l2_start(&f->l2);
	f->l2.ring.fault = inject;
	f->l2.ring.fault_ctx = f;
	f->open = true;
}

static void l2_down(struct fixture *f)
{
	l2_close(&f->l2);
	f->open = false;
}

static struct fixture *fixture_new(void)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	snprintf(f->path, sizeof(f->path), "%s/kvtier-test-l2-XXXXXX", dir);
	int fd = mkstemp(f->path);
	assert_true(fd >= 0);
	close(fd);
	ns_registry_init(&f->reg);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, PART, 1, &f->ns), 1);
	assert_int_equal(ns_get(&f->reg, "model-a", "tp", PART, 2, &f->tp2), 1);
	f->dst = dst_block;
	l2_up(f);
	return f;
}

static void fixture_free(struct fixture *f)
{
	if (f->open)
		l2_down(f);
	unlink(f->path);
	ns_registry_destroy(&f->reg);
	free(f);
}

/* Runs completions until nothing is in flight or queued. */
static void settle(struct fixture *f)
{
	l2_submit(&f->l2);
	while (!l2ring_idle(&f->l2.ring)) {
		struct pollfd p = {l2_event_fd(&f->l2), POLLIN, 0};
		assert_true(poll(&p, 1, 10000) == 1);
		l2_process(&f->l2);
	}
}

/* Hands the victim (ns, n) to L2 without waiting for its write. */
static void put_nowait(struct fixture *f, const struct kvt_ns *ns, uint64_t n)
{
	static uint8_t bytes[2][PART];
	const uint8_t *parts[2] = {bytes[0], bytes[1]};
	uint32_t lengths[2] = {PART, PART};
	struct kvt_key key = test_key(n);
	for (uint16_t r = 0; r < ns->tp_size; r++)
		test_fill(bytes[r], PART, n * 8 + r);
	struct l1_victim v = {ns, &key, ns->tp_size, parts, lengths, L1_EVICT_CAPACITY, true, NULL};
	l2_write_victim(&f->l2, &v);
}

/* Hands the victim (ns, n) to L2: each part's bytes derive from (n, rank). */
static void put(struct fixture *f, const struct kvt_ns *ns, uint64_t n)
{
	put_nowait(f, ns, n);
	settle(f);
}

struct read_result {
	struct l2_read rd;
	int status;
	bool done;
};

static void read_done(struct l2_read *rd, int status)
{
	struct read_result *r = (struct read_result *)rd;
	r->status = status;
	r->done = true;
}

/* Reads (ns, n, rank) into f->dst: 0 with the right bytes, or the error. */
static int get(struct fixture *f, const struct kvt_ns *ns, uint64_t n, uint16_t rank,
	       bool *from_memory)
{
	struct read_result r = {.rd.done = read_done};
	struct kvt_key key = test_key(n);
	memset(f->dst, 0xee, SLOT);
	int rc = l2_read_begin(&f->l2, ns, &key, rank, f->dst, SLOT, &r.rd);
	if (from_memory)
		*from_memory = rc == 1;
	if (rc < 0)
		return rc;
	if (rc == 0) {
		l2_submit(&f->l2);
		while (!r.done) {
			struct pollfd p = {l2_event_fd(&f->l2), POLLIN, 0};
			assert_true(poll(&p, 1, 10000) == 1);
			l2_process(&f->l2);
		}
		if (r.status)
			return r.status;
	}
	assert_int_equal(r.rd.length, PART);
	/* Never wrong bytes: a successful read is byte-exact. */
	assert_true(test_check(f->dst, PART, n * 8 + rank));
	return 0;
}

static uint64_t stat_of(struct fixture *f, size_t offset)
{
	struct l2_stats_snapshot s;
	l2_stats_read(&f->l2, &s);
	return *(uint64_t *)((char *)&s + offset);
}
#define STAT(f, field) stat_of(f, offsetof(struct l2_stats_snapshot, field))

/* Items that fit in one region: its header, then records of one block plus data. */
#define PER_REGION ((REGION - L2FMT_BLOCK) / (L2FMT_BLOCK + SLOT))

static void test_round_trip_memory_and_disk(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	/* A victim's writes wait as queued until submitted, then are in flight. */
	put_nowait(f, f->ns, 1);
	assert_true(STAT(f, ios_queued) > 0);
	assert_int_equal(STAT(f, ios_inflight), 0);
	uint64_t queued = STAT(f, ios_queued);
	l2_submit(&f->l2);
	assert_int_equal(STAT(f, ios_queued), 0);
	assert_int_equal(STAT(f, ios_inflight), queued);
	settle(f);
	l2_submit(&f->l2); /* publishes the gauges after the completions */
	assert_int_equal(STAT(f, ios_inflight), 0);
	bool mem;
	struct kvt_key k1 = test_key(1);
	assert_true(l2_contains(&f->l2, f->ns, &k1));
	assert_int_equal(get(f, f->ns, 1, 0, &mem), 0);
	assert_true(mem); /* still in the open region's write buffer */
	/* Fill past the first region so it is sealed, written and released. */
	for (uint64_t n = 2; n <= 2 * PER_REGION + 1; n++)
		put(f, f->ns, n);
	settle(f);
	assert_int_equal(get(f, f->ns, 1, 0, &mem), 0);
	assert_false(mem);
	assert_int_equal(get(f, f->ns, 2 * PER_REGION + 1, 0, &mem), 0);
	assert_int_equal(get(f, f->ns, 999, 0, NULL), -ENOENT);
	assert_int_equal(STAT(f, read_misses), 1);
	assert_int_equal(STAT(f, victims_written), 2 * PER_REGION + 1);
	/* A victim L2 holds already is not written twice. */
	put(f, f->ns, 1);
	assert_int_equal(STAT(f, victims_present), 1);
	fixture_free(f);
}

static void test_tp_items_whole(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	put(f, f->tp2, 7);
	struct kvt_key k = test_key(7);
	assert_true(l2_contains(&f->l2, f->tp2, &k));
	assert_false(l2_contains(&f->l2, f->ns, &k)); /* another namespace */
	assert_int_equal(get(f, f->tp2, 7, 0, NULL), 0);
	assert_int_equal(get(f, f->tp2, 7, 1, NULL), 0);
	struct read_result r = {.rd.done = read_done};
	assert_int_equal(l2_read_begin(&f->l2, f->tp2, &k, 0, f->dst, 4096, &r.rd), -ERANGE);
	fixture_free(f);
}

/* No completion is reaped: once every write buffer is full, victims are dropped. */
static void behind_drops(uint32_t write_buffers, uint64_t buffered)
{
	struct fixture *f = fixture_new();
	if (write_buffers) { /* reopen with that many buffers */
		l2_down(f);
		f->write_buffers = write_buffers;
		l2_up(f);
	}
	uint64_t total = (buffered + 1) * PER_REGION;
	for (uint64_t n = 0; n < total; n++)
		put_nowait(f, f->ns, n);
	uint64_t dropped = STAT(f, victims_dropped_behind);
	assert_int_equal(dropped, total - buffered * PER_REGION);
	assert_int_equal(STAT(f, victims_written), buffered * PER_REGION);
	settle(f);
	for (uint64_t n = 0; n < total; n++)
		assert_int_equal(get(f, f->ns, n, 0, NULL), n < buffered * PER_REGION ? 0 : -ENOENT);
	fixture_free(f);
}

static void test_behind_drops_never_waits(void **state)
{
	(void)state;
	behind_drops(0, 2); /* the default: two write buffers */
	behind_drops(3, 3);
}

static void test_capacity_reclaims_oldest(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	uint64_t total = 4 * NREGIONS * PER_REGION;
	for (uint64_t n = 0; n < total; n++) {
		put(f, f->ns, n);
		settle(f);
		assert_true(STAT(f, used_bytes) <= STAT(f, capacity_bytes));
	}
	struct stat st;
	assert_int_equal(stat(f->path, &st), 0);
	assert_true((uint64_t)st.st_size <= REGION * NREGIONS);
	assert_true(STAT(f, regions_reclaimed) > 0);
	assert_int_equal(STAT(f, items_reclaimed) + STAT(f, items), total);
	/* Oldest first: the first items are gone, the last are there, byte-exact. */
	assert_int_equal(get(f, f->ns, 0, 0, NULL), -ENOENT);
	for (uint64_t n = total - PER_REGION; n < total; n++)
		assert_int_equal(get(f, f->ns, n, 0, NULL), 0);
	fixture_free(f);
}

static void test_restart_recovers_every_block(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	uint64_t total = 3 * PER_REGION + 2;
	for (uint64_t n = 0; n < total; n++)
		put(f, n % 2 ? f->tp2 : f->ns, n);
	l2_down(f); /* writes what is buffered */
	l2_up(f);
	assert_int_equal(STAT(f, recovered_items), total);
	assert_int_equal(STAT(f, items), total);
	for (uint64_t n = 0; n < total; n++) {
		const struct kvt_ns *ns = n % 2 ? f->tp2 : f->ns;
		for (uint16_t r = 0; r < ns->tp_size; r++)
			assert_int_equal(get(f, ns, n, r, NULL), 0);
	}
	/* New writes after a restart do not clobber what was recovered. */
	for (uint64_t n = total; n < total + PER_REGION; n++)
		put(f, f->ns, n);
	l2_down(f);
	l2_up(f);
	assert_int_equal(STAT(f, items), total + PER_REGION);
	assert_int_equal(get(f, f->ns, 0, 0, NULL), 0);
	fixture_free(f);
}

/* The file offset of the data of item n of a fresh run (TP 1, written in order). */
static uint64_t data_offset(uint64_t n)
{
	uint64_t region = n / PER_REGION, slot = n % PER_REGION;
	return region * REGION + L2FMT_BLOCK + slot * (L2FMT_BLOCK + SLOT) + L2FMT_BLOCK;
}

static void scribble(const char *path, uint64_t offset, size_t len)
{
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	uint8_t junk[64];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	assert_int_equal(pwrite(fd, junk, len, (off_t)offset), (ssize_t)len);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void test_corruption_is_a_miss(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	uint64_t total = 2 * PER_REGION;
	for (uint64_t n = 0; n < total; n++)
		put(f, f->ns, n);
	l2_down(f);
	/* Garbage in item 3's data; in the header of item PER_REGION + 2. */
	scribble(f->path, data_offset(3) + 100, 64);
	scribble(f->path, data_offset(PER_REGION + 2) - L2FMT_BLOCK + 8, 16);
	l2_up(f);
	/* The bad header ends its region's scan: it and what follows are gone. */
	assert_int_equal(STAT(f, items), total - (PER_REGION - 2));
	assert_int_equal(get(f, f->ns, 3, 0, NULL), -ENOENT);
	assert_int_equal(STAT(f, checksum_failures), 1);
	struct kvt_key k3 = test_key(3);
	assert_false(l2_contains(&f->l2, f->ns, &k3)); /* dropped after the failure */
	for (uint64_t n = 0; n < total; n++) {
		int rc = get(f, f->ns, n, 0, NULL);
		bool lost = n == 3 || n >= PER_REGION + 2;
		assert_int_equal(rc, lost ? -ENOENT : 0);
	}
	fixture_free(f);
}

static void test_ns_drop_survives_restart(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	for (uint64_t n = 0; n < 6; n++)
		put(f, n % 2 ? f->tp2 : f->ns, n);
	settle(f);
	assert_int_equal(l2_ns_drop(&f->l2, f->tp2), 3);
	assert_int_equal(get(f, f->tp2, 1, 0, NULL), -ENOENT);
	assert_int_equal(get(f, f->ns, 0, 0, NULL), 0);
	l2_down(f);
	l2_up(f);
	assert_int_equal(STAT(f, items), 3);
	assert_int_equal(get(f, f->tp2, 1, 0, NULL), -ENOENT);
	assert_int_equal(get(f, f->ns, 4, 0, NULL), 0);
	/* Dropped while its record is still being written: it stays dropped after a restart. */
	put_nowait(f, f->tp2, 11);
	assert_int_equal(l2_ns_drop(&f->l2, f->tp2), 1);
	settle(f);
	l2_down(f);
	l2_up(f);
	assert_int_equal(STAT(f, items), 3);
	assert_int_equal(get(f, f->tp2, 11, 0, NULL), -ENOENT);
	/* An operator's evict of everything empties L2, across a restart too. */
	l2_down(f);
	l2_up(f);
	l2_evict(&f->l2, UINT64_MAX);
	settle(f);
	assert_int_equal(STAT(f, items), 0);
	l2_down(f);
	l2_up(f);
	assert_int_equal(STAT(f, items), 0);
	fixture_free(f);
}

/* A direct write's bytes: aligned, zero past the part (as L1 slots are). */
static _Alignas(4096) uint8_t direct_bytes[2][(PART + 4095) / 4096 * 4096];

struct direct_result {
	struct l2_direct d;
	struct l2_direct_part parts[2];
	int status;
	unsigned calls;
};

static void direct_done(struct l2_direct *d, int status)
{
	struct direct_result *r = (struct direct_result *)d;
	r->status = status;
	r->calls++;
}

/* Reserves (ns, n) for a direct write from direct_bytes; the reserve's result. */
static int direct_reserve(struct fixture *f, const struct kvt_ns *ns, uint64_t n,
			  struct direct_result *r)
{
	const uint8_t *parts[2] = {direct_bytes[0], direct_bytes[1]};
	uint32_t lengths[2] = {PART, PART};
	struct kvt_key key = test_key(n);
	for (uint16_t i = 0; i < ns->tp_size; i++) {
		memset(direct_bytes[i], 0, SLOT);
		test_fill(direct_bytes[i], PART, n * 8 + i);
	}
	memset(r, 0, sizeof(*r));
	r->d.done = direct_done;
	struct l1_victim v = {ns, &key, ns->tp_size, parts, lengths, L1_EVICT_WATERMARK, false, NULL};
	return l2_direct_reserve(&f->l2, &v, &r->d);
}

/* Sets the checksums as the writer's thread does (bad: one that does not match) and writes. */
static void direct_write(struct fixture *f, struct direct_result *r, bool bad)
{
	for (uint16_t i = 0; i < r->d.nparts; i++)
		r->d.parts[i].checksum = XXH3_64bits(r->d.parts[i].data, r->d.parts[i].length) + bad;
	l2_direct_write(&f->l2, &r->d);
	settle(f);
}

static void test_direct_write_from_callers_memory(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	struct direct_result r, again;
	struct kvt_key k1 = test_key(1);
	/* Reserved: held (lookups see it) but neither durable nor readable yet. */
	assert_int_equal(direct_reserve(f, f->tp2, 1, &r), 0);
	assert_true(l2_contains(&f->l2, f->tp2, &k1));
	assert_false(l2_durable(&f->l2, f->tp2, &k1));
	assert_int_equal(get(f, f->tp2, 1, 0, NULL), -ENOENT);
	assert_int_equal(direct_reserve(f, f->tp2, 1, &again), -EEXIST);
	assert_int_equal(STAT(f, victims_present), 1);
	/* Written: done once, durable, read from disk byte-exact (never from a write buffer). */
	direct_write(f, &r, false);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.status, 0);
	assert_true(l2_durable(&f->l2, f->tp2, &k1));
	bool mem;
	assert_int_equal(get(f, f->tp2, 1, 0, &mem), 0);
	assert_false(mem);
	assert_int_equal(get(f, f->tp2, 1, 1, NULL), 0);
	assert_int_equal(STAT(f, direct_writes), 1);
	assert_int_equal(STAT(f, victims_written), 1);
	assert_int_equal(STAT(f, bytes_written), L2FMT_BLOCK + 2 * l2fmt_record_bytes(PART));
	/* The checksum on disk is the caller's: a wrong one makes a miss, never bytes. */
	assert_int_equal(direct_reserve(f, f->ns, 2, &r), 0);
	direct_write(f, &r, true);
	assert_int_equal(get(f, f->ns, 2, 0, NULL), -ENOENT);
	assert_int_equal(STAT(f, checksum_failures), 1);
	/* Dropped between reserve and write: written all the same, gone after a restart. */
	assert_int_equal(direct_reserve(f, f->tp2, 3, &r), 0);
	assert_int_equal(l2_ns_drop(&f->l2, f->tp2), 2);
	direct_write(f, &r, false);
	assert_int_equal(r.calls, 1);
	/* A failed write: done with -EIO, the item forgotten. */
	struct kvt_key k4 = test_key(4);
	assert_int_equal(direct_reserve(f, f->ns, 4, &r), 0);
	f->fault_writes = true;
	f->fault_res = -EIO;
	f->fault_count = 1;
	direct_write(f, &r, false);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.status, -EIO);
	assert_false(l2_contains(&f->l2, f->ns, &k4));
	/* A restart finds what was written, and neither the dropped nor the failed items. */
	assert_int_equal(direct_reserve(f, f->ns, 5, &r), 0);
	direct_write(f, &r, false);
	l2_down(f);
	l2_up(f);
	assert_int_equal(get(f, f->tp2, 1, 1, NULL), -ENOENT);
	assert_int_equal(get(f, f->tp2, 3, 0, NULL), -ENOENT);
	assert_int_equal(get(f, f->ns, 5, 0, NULL), 0);
	assert_int_equal(get(f, f->ns, 2, 0, NULL), -ENOENT); /* its checksum is still wrong */
	fixture_free(f);
}

/* A namespace at its L2 quota drops its own oldest items; usage is per namespace. */
static void test_ns_quota_and_usage(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	uint64_t rec = L2FMT_BLOCK + SLOT, items, bytes;
	put(f, f->tp2, 100);
	f->ns->l2_quota = 3 * rec;
	for (uint64_t n = 0; n < 5; n++)
		put(f, f->ns, n);
	l2_ns_usage(&f->l2, f->ns, &items, &bytes);
	assert_int_equal(items, 3);
	assert_int_equal(bytes, 3 * rec);
	assert_int_equal(STAT(f, items_dropped_quota), 2);
	assert_int_equal(get(f, f->ns, 0, 0, NULL), -ENOENT); /* oldest first */
	assert_int_equal(get(f, f->ns, 1, 0, NULL), -ENOENT);
	for (uint64_t n = 2; n < 5; n++)
		assert_int_equal(get(f, f->ns, n, 0, NULL), 0);
	l2_ns_usage(&f->l2, f->tp2, &items, &bytes);
	assert_int_equal(items, 1);
	assert_int_equal(bytes, 2 * rec);
	assert_int_equal(get(f, f->tp2, 100, 1, NULL), 0);
	/* One victim larger than the whole quota is refused, not written. */
	f->tp2->l2_quota = rec;
	put(f, f->tp2, 101);
	assert_int_equal(STAT(f, victims_dropped_quota), 1);
	/* A lowered quota trims at once; usage survives a restart (by digest). */
	f->ns->l2_quota = rec;
	assert_int_equal(l2_ns_trim(&f->l2, f->ns), 2);
	assert_int_equal(get(f, f->ns, 4, 0, NULL), 0);
	settle(f);
	l2_down(f);
	l2_up(f);
	l2_ns_usage(&f->l2, f->ns, &items, &bytes);
	assert_true(items >= 1); /* quota drops are not written to disk: a restart may bring more back */
	assert_int_equal(l2_ns_drop(&f->l2, f->ns), items);
	l2_ns_usage(&f->l2, f->ns, &items, &bytes);
	assert_int_equal(items, 0);
	assert_int_equal(bytes, 0);
	fixture_free(f);
}

/* Items 0..PER_REGION-1 written out, so reads go to the disk. */
static void fill_to_disk(struct fixture *f)
{
	for (uint64_t n = 0; n < 2 * PER_REGION; n++)
		put(f, f->ns, n);
	settle(f);
}

static void test_faults_eio_short_eagain(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	fill_to_disk(f);
	f->fault_res = -EIO;
	f->fault_count = 1;
	assert_int_equal(get(f, f->ns, 1, 0, NULL), -EIO);
	assert_int_equal(STAT(f, io_errors), 1);
	assert_int_equal(get(f, f->ns, 1, 0, NULL), 0); /* the next read succeeds */

	f->fault_short = true;
	f->fault_count = 3;
	assert_int_equal(get(f, f->ns, 2, 0, NULL), 0);
	assert_int_equal(STAT(f, short_ios), 3);
	f->fault_short = false;

	f->fault_res = -EAGAIN;
	f->fault_count = 2;
	assert_int_equal(get(f, f->ns, 3, 0, NULL), 0);
	assert_int_equal(STAT(f, eagain_retries), 2);
	/* -EAGAIN forever: bounded retries, then an error, not a hang. */
	f->fault_count = 1000;
	assert_int_equal(get(f, f->ns, 4, 0, NULL), -EIO);
	f->fault_count = 0;
	assert_false(STAT(f, failed));
	fixture_free(f);
}

/* Runs one probe of a failed L2 to completion; returns whether L2 is writable after. */
static bool probe(struct fixture *f)
{
	assert_int_equal(l2_probe(&f->l2), 0);
	assert_int_equal(l2_probe(&f->l2), -EALREADY); /* one at a time */
	settle(f);
	return l2_writable(&f->l2);
}

static void test_repeated_errors_fail_l2(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	fill_to_disk(f);
	assert_int_equal(l2_probe(&f->l2), -EINVAL); /* nothing to probe while healthy */
	f->fault_res = -EIO;
	f->fault_count = 1000;
	for (uint64_t n = 0; n < 8; n++)
		assert_int_equal(get(f, f->ns, n, 0, NULL), -EIO);
	assert_int_equal(STAT(f, failed), 1);
	assert_false(l2_writable(&f->l2));
	assert_true(l2_readable(&f->l2));
	/* Writes stop... */
	put(f, f->ns, 5000);
	assert_int_equal(STAT(f, victims_dropped_off), 1);
	/* ...while what verifies is still served: the disk's good data stays readable. */
	f->fault_count = 0;
	struct kvt_key k = test_key(9);
	assert_true(l2_contains(&f->l2, f->ns, &k));
	assert_int_equal(get(f, f->ns, 9, 0, NULL), 0);
	assert_int_equal(STAT(f, failed), 1); /* a good read does not end the failure */
	/* A probe whose write fails keeps L2 failed; one that succeeds ends it. */
	f->fault_writes = true;
	f->fault_count = 1;
	assert_false(probe(f));
	assert_int_equal(STAT(f, probes_failed), 1);
	assert_true(probe(f));
	assert_int_equal(STAT(f, probes_failed), 1);
	assert_int_equal(STAT(f, recoveries), 1);
	f->fault_writes = false;
	assert_true(l2_writable(&f->l2));
	put(f, f->ns, 5001);
	assert_int_equal(get(f, f->ns, 5001, 0, NULL), 0);
	/* The probe rewrote a header with what it held: a restart finds everything. */
	uint64_t items = STAT(f, items);
	l2_down(f);
	l2_up(f);
	assert_int_equal(STAT(f, items), items);
	assert_int_equal(get(f, f->ns, 9, 0, NULL), 0);
	fixture_free(f);
}

/* A start that cannot grow the file leaves it as it was: removed when new, cut back when grown. */
static void test_failed_start_undoes_the_file(void **state)
{
	(void)state;
	char path[256];
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	snprintf(path, sizeof(path), "%s/kvtier-test-l2-grow-%d", dir, (int)getpid());
	unlink(path);
	struct rlimit old, small = {REGION, RLIM_INFINITY};
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	struct l2 l2;
	char why[256] = "";
	struct l2_config cfg = {.path = path, .size = REGION * NREGIONS, .region_size = REGION,
				.queue_depth = 8};
	int err = l2_open(&l2, &cfg, why, sizeof(why));
	assert_int_equal(err, -EFBIG);
	assert_non_null(strstr(why, "cannot grow"));
	l2_close(&l2);
	struct stat st;
	assert_int_equal(stat(path, &st), -1); /* the new file is gone */
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_int_equal(ftruncate(fd, 8192), 0);
	close(fd);
	assert_int_equal(l2_open(&l2, &cfg, why, sizeof(why)), -EFBIG);
	l2_close(&l2);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 8192); /* the old file is as it was */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, was);
	/* Not a file or a device: said so, not blamed on O_DIRECT. */
	cfg.path = "/dev/null";
	assert_int_equal(l2_open(&l2, &cfg, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "is a character device, not a regular file or a block device"));
	l2_close(&l2);
	unlink(path);
}

static void test_format_rejects_bad_headers(void **state)
{
	(void)state;
	_Alignas(4096) static uint8_t block[L2FMT_BLOCK];
	struct l2fmt_record rec = {.region_seq = 5, .ns_digest = 9, .key = test_key(3), .rank = 1,
				   .tp_size = 2, .length = 77, .data_checksum = 42}, out;
	l2fmt_record_encode(block, &rec);
	assert_int_equal(l2fmt_record_decode(block, &out), 0);
	assert_int_equal(out.length, 77);
	assert_int_equal(out.rank, 1);
	assert_memory_equal(out.key.bytes, rec.key.bytes, KVT_KEY_BYTES);
	struct l2fmt_region reg;
	assert_int_equal(l2fmt_region_decode(block, &reg), -EBADMSG); /* wrong magic */
	block[40] ^= 1;
	assert_int_equal(l2fmt_record_decode(block, &out), -EBADMSG); /* checksum */
	block[40] ^= 1;
	block[8] = 2; /* a future version, checksum fixed up */
	uint64_t sum = XXH3_64bits(block, 64);
	memcpy(block + 64, &sum, 8);
	assert_int_equal(l2fmt_record_decode(block, &out), -EPROTO);
	/* A TP size past KVT_TP_MAX (issue 36, item 19): per-item arrays are sized by it. */
	rec.tp_size = KVT_TP_MAX + 1;
	l2fmt_record_encode(block, &rec);
	assert_int_equal(l2fmt_record_decode(block, &out), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_memory_and_disk),
		cmocka_unit_test(test_tp_items_whole),
		cmocka_unit_test(test_behind_drops_never_waits),
		cmocka_unit_test(test_capacity_reclaims_oldest),
		cmocka_unit_test(test_restart_recovers_every_block),
		cmocka_unit_test(test_corruption_is_a_miss),
		cmocka_unit_test(test_ns_drop_survives_restart),
		cmocka_unit_test(test_ns_quota_and_usage),
		cmocka_unit_test(test_direct_write_from_callers_memory),
		cmocka_unit_test(test_faults_eio_short_eagain),
		cmocka_unit_test(test_repeated_errors_fail_l2),
		cmocka_unit_test(test_failed_start_undoes_the_file),
		cmocka_unit_test(test_format_rejects_bad_headers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
