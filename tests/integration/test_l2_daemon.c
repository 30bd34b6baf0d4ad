/*
 * test_l2_daemon.c — evict mode through a real kvtierd with an L2 file:
 * victims reach L2 and come back byte-exact (promoted into L1), LOOKUP
 * reports their tier, capacity holds, a restart recovers every block L2 held,
 * garbage written into the file gives misses and never wrong bytes, a kill -9
 * during heavy stores leaves nothing corrupt behind, and the mode changes
 * live through PUT /v1/policy. Write-behind: an unpaced burst past L1 loses
 * nothing, SIGTERM writes what is dirty, kill -9 loses at most the dirty
 * gauge's worth, and a warm LRU scan evicts clean items with no L2 writes.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dp_helpers.h"

#define BLOCK MiB
#define L1_BLOCKS 16                  /* --l1-size 16MiB of 1 MiB slots */
#define L2_SIZE (64 * MiB)

/* The L2 file, outside the daemon's runtime dir so that it outlives a daemon. */
static char l2_dir[64], l2_path[128];

static void make_l2_dir(void)
{
	snprintf(l2_dir, sizeof(l2_dir), "/tmp/kvtier-l2.XXXXXX");
	assert_non_null(mkdtemp(l2_dir));
	snprintf(l2_path, sizeof(l2_path), "%s/l2", l2_dir);
}

static void remove_l2_dir(void)
{
	unlink(l2_path);
	rmdir(l2_dir);
}

/* L1 evicts only for want of a slot: one victim per new block once full. */
/* Evict mode; one client may lease all of L1 (tests pin it so to hold what L1 has). */
static struct daemon_fixture *start_evict(void)
{
	return start((const char *[]){"--l1-size", "16MiB", "--l1-region-size", "1MiB",
				      "--l1-high-watermark", "1", "--l1-low-watermark", "0.99",
				      "--max-leased-bytes-per-uid", "16MiB",
				      "--l2-path", l2_path, "--l2-size", "64MiB",
				      "--l2-region-size", "4MiB", NULL});
}

/* The kernel's view of the daemon's io_uring (its fdinfo), for a failure's log. */
static void show_ring(const struct daemon_fixture *d)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd),
		 "for f in /proc/%d/fd/*; do readlink \"$f\" | grep -q io_uring && "
		 "cat /proc/%d/fdinfo/\"${f##*/}\" >&2; done", (int)d->pid, (int)d->pid);
	(void)!system(cmd);
}

static bool evict_mode(struct daemon_fixture *d)
{
	json_t *p = daemon_get_json(d, "/v1/policy");
	bool evict = p && strcmp(json_string_value(json_object_get(p, "mode")), "evict") == 0;
	json_decref(p);
	return evict;
}

/*
 * What L2 has still to do: in evict mode the dirty L1 items the writer has
 * not handed down yet, then its reads and writes waiting to be submitted or
 * submitted. Read in that order: the daemon publishes each step before it
 * drops the one before (a handed-down item's write is queued before the
 * item stops being dirty; an I/O is in flight before it leaves the queue),
 * so nothing is missed between two reads.
 */
static long long l2_pending(struct daemon_fixture *d)
{
	long long dirty = evict_mode(d) ? daemon_stat(d, "l1.dirty_items") : 0;
	long long queued = daemon_stat(d, "l2.ios_queued");
	return dirty + queued + daemon_stat(d, "l2.ios_inflight");
}

/*
 * Waits until L2 has no read or write pending: at most 60 s, since on a
 * loaded CI machine O_DIRECT writes into the fallocated file (unwritten
 * extents, converted at completion) have taken over 10 s. Queued I/O counts:
 * right after a loop call that queued writes, the loop may not yet have
 * submitted them.
 */
static void settle(struct daemon_fixture *d)
{
	for (int i = 0; i < 12000 && l2_pending(d) != 0; i++)
		sleep_ms(5);
	if (l2_pending(d) != 0)
		show_ring(d);
	assert_int_equal(l2_pending(d), 0);
}

/* Stores keys [first, first+n) three at a time, letting L2 catch up in between. */
static void store_settled(struct daemon_fixture *d, struct kvt_client *c, struct staging *s,
			  uint64_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 3) {
		store_range(c, s, first + i, n - i < 3 ? n - i : 3, BLOCK);
		settle(d);
	}
}

/* LOOKUP of keys [first, first+n): the hit count, each key's tier in tiers. */
static uint32_t lookup_tiers(struct kvt_client *c, uint64_t first, uint32_t n, uint8_t *tiers)
{
	struct kvt_key keys[64];
	for (uint32_t i = 0; i < n; i++)
		keys[i] = test_key(first + i);
	struct kvt_lookup lk = {.keys = keys, .nkeys = n, .tiers = tiers};
	assert_int_equal(kvt_lookup(c, &lk), 0);
	return lk.hits;
}

/*
 * LOADs key into out: its status. A loaded block must be byte-exact; a
 * missing one must leave the staging bytes as they were.
 */
static int32_t load_checked(struct kvt_client *c, struct staging *out, uint64_t key)
{
	struct kvt_block b;
	blocks_for(&b, key, 1, BLOCK);
	memset(out->p, 0xab, BLOCK);
	assert_int_equal(kvt_load(c, out->index, &b, 1), 0);
	if (b.status == 0) {
		assert_int_equal(b.length, BLOCK);
		if (!test_check(out->p, BLOCK, key))
			fail_msg("key %llu came back with wrong bytes", (unsigned long long)key);
	} else {
		for (uint32_t i = 0; i < BLOCK; i++)
			if (out->p[i] != 0xab)
				fail_msg("a missing block (%d) wrote staging byte %u", b.status, i);
	}
	return b.status;
}

static void test_evict_round_trip(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	store_settled(d, c, &in, 0, 48);
	assert_int_equal(daemon_stat(d, "l2.victims_dropped_behind"), 0);
	/* Every block is written once, behind, from its L1 slots (it stays in L1, clean). */
	assert_int_equal(daemon_stat(d, "l2.victims_written"), 48);
	assert_int_equal(daemon_stat(d, "l2.direct_writes"), 48);
	assert_int_equal(daemon_stat(d, "l1.evictions_dirty"), 0);
	assert_int_equal(daemon_stat(d, "l1.dirty_items"), 0);

	/* LOOKUP sees every block, each with its tier. */
	uint8_t tiers[64];
	assert_int_equal(lookup_tiers(c, 0, 48, tiers), 48);
	for (uint32_t i = 0; i < 48; i++)
		assert_int_equal(tiers[i], i < 48 - L1_BLOCKS ? 2 : 1);

	/* Every block comes back byte-exact; L2 blocks are promoted into L1. */
	for (uint64_t k = 0; k < 48; k++) {
		assert_int_equal(load_checked(c, &out, k), 0);
		settle(d);
		if (k == 0) { /* promoted: an L1 hit now */
			assert_int_equal(lookup_tiers(c, 0, 1, tiers), 1);
			assert_int_equal(tiers[0], 1);
		}
	}
	assert_true(daemon_stat(d, "l2.blocks_loaded") >= 48 - L1_BLOCKS);
	assert_true(daemon_stat(d, "l2.blocks_promoted") >= 1);
	long long reads = daemon_stat(d, "l2.reads"), memory = daemon_stat(d, "l2.reads_from_memory");
	assert_true(reads - memory >= 1); /* some came from the disk */
	assert_int_equal(daemon_stat(d, "l2.checksum_failures"), 0);

	/* Capacity: more than L2 holds, and it never grows past its cap. */
	for (uint64_t k = 1000; k < 1090; k += 3) {
		store_range(c, &in, k, 3, BLOCK);
		settle(d);
		assert_true(daemon_stat(d, "l2.used_bytes") <= daemon_stat(d, "l2.capacity_bytes"));
	}
	struct stat st;
	assert_int_equal(stat(l2_path, &st), 0);
	assert_true((uint64_t)st.st_size <= L2_SIZE);
	assert_true(daemon_stat(d, "l2.regions_reclaimed") >= 1);
	assert_int_equal(load_checked(c, &out, 1088), 0);

	json_t *t = daemon_get_json(d, "/v1/tiers");
	json_t *l2 = json_array_get(json_object_get(t, "tiers"), 1);
	assert_string_equal(json_string_value(json_object_get(l2, "name")), "l2");
	assert_string_equal(json_string_value(json_object_get(l2, "state")), "ready");
	json_decref(t);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* Overwrites len bytes at each of the offsets with garbage. */
static void scribble(const uint64_t *offsets, unsigned n, size_t len)
{
	int fd = open(l2_path, O_WRONLY);
	assert_true(fd >= 0);
	uint8_t *junk = malloc(len);
	for (size_t i = 0; i < len; i++)
		junk[i] = (uint8_t)(i * 131 + 7);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pwrite(fd, junk, len, (off_t)offsets[i]), (ssize_t)len);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	free(junk);
}

static void test_restart_and_corruption(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK);
	store_settled(d, c, &in, 0, 48);
	kvt_client_close(c);
	munmap(in.p, in.size);
	stop(d);

	/* A restart recovers every block L2 held (all: L1's were written behind); L1 starts empty. */
	const unsigned in_l2 = 48;
	d = start_evict();
	assert_int_equal(daemon_stat(d, "l2.recovered_items"), in_l2);
	c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging out = staging(c, BLOCK);
	uint8_t tiers[64];
	assert_int_equal(lookup_tiers(c, 0, 48, tiers), in_l2);
	for (uint64_t k = 0; k < in_l2; k++) {
		assert_int_equal(tiers[k], 2);
		assert_int_equal(load_checked(c, &out, k), 0);
	}
	kvt_client_close(c);
	munmap(out.p, out.size);
	stop(d);

	/* Garbage in the data of several records: misses, never wrong bytes. */
	uint64_t offsets[] = {4 * MiB + 300 * KiB, 9 * MiB + 10 * KiB, 14 * MiB + 1000 * KiB};
	scribble(offsets, 3, 4096);
	d = start_evict();
	c = client(d, "m", BLOCK, 1, 0, 0, 1);
	out = staging(c, BLOCK);
	unsigned loaded = 0;
	for (uint64_t k = 0; k < in_l2; k++)
		loaded += load_checked(c, &out, k) == 0;
	long long checksum_failures = daemon_stat(d, "l2.checksum_failures");
	assert_true(checksum_failures >= 1);
	assert_true(loaded >= 1 && loaded < in_l2);
	print_message("figures: corruption: 3 records scribbled over, %u of %u L2 blocks loaded "
		      "byte-exact, %u misses, %lld checksum failures, 0 wrong bytes\n", loaded,
		      (unsigned)in_l2, (unsigned)in_l2 - loaded, checksum_failures);
	kvt_client_close(c);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/*
 * A child process's stores: keys [first, first+limit), four at a time,
 * without pause, until done, killed, or the daemon goes; the count
 * acknowledged so far in *acked when not NULL.
 */
static void storer(const char *socket, uint64_t first, uint64_t limit, _Atomic uint64_t *acked)
{
	struct kvt_client_options o = {.socket_path = socket, .model = "m",
				       .block_bytes = BLOCK, .lanes = 1};
	struct kvt_client *c;
	void *addr;
	uint32_t idx;
	if (kvt_client_open(&o, &c) || kvt_buffer_create(c, 4 * (uint64_t)BLOCK, &addr, &idx))
		_exit(1);
	for (uint64_t k = first; k < first + limit; k += 4) {
		struct kvt_block b[4];
		blocks_for(b, k, 4, BLOCK);
		for (uint32_t i = 0; i < 4; i++)
			test_fill((uint8_t *)addr + (uint64_t)i * BLOCK, BLOCK, k + i);
		if (kvt_store(c, idx, b, 4))
			_exit(0); /* the daemon went away */
		for (uint32_t i = 0; i < 4; i++)
			if (b[i].status)
				_exit(2);
		if (acked)
			atomic_store(acked, k + 4 - first);
	}
	_exit(0);
}

/* Forgets a daemon that has exited (its dir kept by daemon_stop, or never stopped). */
static void forget_exited(struct daemon_fixture *d)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	(void)!system(cmd);
	free(d);
	current = NULL;
}

static void test_kill9_during_stores(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	pid_t child = fork();
	if (child == 0)
		storer(d->socket, 0, 100000, NULL);
	for (int i = 0; i < 2000 && daemon_stat(d, "l2.victims_written") < 40; i++)
		sleep_ms(5);
	assert_true(daemon_stat(d, "l2.victims_written") >= 40);
	kill(d->pid, SIGKILL);
	assert_true(daemon_stop(d) != 0); /* killed; its dir is kept: remove it */
	forget_exited(d);
	waitpid(child, NULL, 0);

	d = start_evict();
	long long recovered = daemon_stat(d, "l2.recovered_items");
	assert_true(recovered >= 1);
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging out = staging(c, BLOCK);
	/* Whatever was stored: each block is byte-exact or missing. */
	long long loaded = 0, missing = 0;
	uint64_t k = 0;
	for (; k < 2000 && loaded < recovered; k++) {
		int32_t st = load_checked(c, &out, k);
		loaded += st == 0;
		missing += st != 0;
	}
	assert_true(loaded >= 1);
	print_message("figures: kill -9 under stores: %lld items recovered from L2, %lld blocks "
		      "loaded byte-exact, %lld of the first %llu keys missing (in L1 at the kill), "
		      "0 corrupt\n", recovered, loaded, missing, (unsigned long long)k);
	kvt_client_close(c);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

static void put_mode(struct daemon_fixture *d, const char *mode, int want_status)
{
	char body[64];
	snprintf(body, sizeof(body), "{\"mode\":\"%s\"}", mode);
	int status;
	json_t *r = daemon_request(d, "PUT", "/v1/policy", body, &status);
	assert_int_equal(status, want_status);
	if (status == 200)
		assert_string_equal(json_string_value(json_object_get(r, "mode")), mode);
	json_decref(r);
}

static void test_mode_changes_live(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	store_settled(d, c, &in, 0, 24);
	uint8_t tiers[64];
	assert_int_equal(lookup_tiers(c, 0, 24, tiers), 24);

	put_mode(d, "l1-only", 200);
	assert_int_equal(lookup_tiers(c, 0, 24, tiers), 0); /* key 0 is in L2 only */
	assert_int_equal(load_checked(c, &out, 0), -ENOENT);
	long long written = daemon_stat(d, "l2.victims_written");
	store_settled(d, c, &in, 100, 3); /* victims are dropped, not written */
	assert_int_equal(daemon_stat(d, "l2.victims_written"), written);

	put_mode(d, "evict", 200);
	/* Keys 8..10 left L1 while L2 was off, but were written behind before it. */
	assert_int_equal(lookup_tiers(c, 0, 12, tiers), 12);
	assert_int_equal(load_checked(c, &out, 0), 0);
	put_mode(d, "sideways", 400);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* POST /v1/tiers/l1/evict; the answer (caller json_decref). */
static json_t *evict_l1(struct daemon_fixture *d, const char *body)
{
	int status;
	json_t *j = daemon_request(d, "POST", "/v1/tiers/l1/evict", body, &status);
	assert_int_equal(status, 200);
	return j;
}

static long long jint(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	assert_true(json_is_integer(v));
	return (long long)json_integer_value(v);
}

/*
 * An operator's "evict all" in evict mode moves what L2 can take, stops
 * while L2 is busy (answering complete: false) and says what it dropped,
 * which here is nothing: every block comes back from L2 byte-exact.
 */
static void test_admin_evict_moves_to_l2(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	store_settled(d, c, &in, 0, L1_BLOCKS);
	long long evicted = 0, to_l2 = 0, dropped = 0, calls = 0;
	bool complete = false;
	while (!complete && calls++ < 1000) {
		json_t *j = evict_l1(d, "{\"all\": true}");
		evicted += jint(j, "blocks_evicted");
		to_l2 += jint(j, "blocks_to_l2");
		dropped += jint(j, "blocks_dropped");
		complete = json_is_true(json_object_get(j, "complete"));
		json_decref(j);
		settle(d);
	}
	assert_true(complete);
	assert_int_equal(evicted, L1_BLOCKS);
	assert_int_equal(to_l2 + dropped, evicted);
	assert_int_equal(dropped, 0);
	assert_int_equal(daemon_stat(d, "l2.victims_dropped_behind"), 0);
	assert_int_equal(daemon_stat(d, "l1.items"), 0);
	for (uint64_t k = 0; k < L1_BLOCKS; k++)
		assert_int_equal(load_checked(c, &out, k), 0);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* The L2 state in /v1/tiers. */
static char *l2_state(struct daemon_fixture *d)
{
	json_t *root = daemon_get_json(d, "/v1/tiers"), *t;
	size_t i;
	char *state = NULL;
	json_array_foreach(json_object_get(root, "tiers"), i, t)
		if (strcmp(json_string_value(json_object_get(t, "name")), "l2") == 0)
			state = strdup(json_string_value(json_object_get(t, "state")));
	json_decref(root);
	return state;
}

static bool l2_state_is(struct daemon_fixture *d, const char *want)
{
	char *state = l2_state(d);
	bool is = state && strcmp(state, want) == 0;
	free(state);
	return is;
}

/*
 * A disk that stops returning data (the file cut to nothing under the
 * daemon: every read comes back short) marks L2 failed: reads give misses,
 * never wrong bytes, the probes say "degraded", and a probe write (which
 * works: it grows the file again) brings L2 back without a restart.
 */
static void test_failed_l2_probed_back(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	store_settled(d, c, &in, 0, L1_BLOCKS + 12);
	assert_true(l2_state_is(d, "ready"));
	/* Lease what L1 holds, so that loads promote nothing and write no victims. */
	uint64_t lease;
	assert_int_equal(lookup_range(c, 12, L1_BLOCKS, 60000, &lease), L1_BLOCKS);
	assert_int_equal(truncate(l2_path, 0), 0);
	unsigned misses = 0;
	for (uint64_t k = 0; k < 12 && !l2_state_is(d, "failed"); k++, misses++)
		assert_int_equal(load_checked(c, &out, k), -ENOENT);
	assert_true(l2_state_is(d, "failed"));
	struct timespec failed_at, back_at;
	clock_gettime(CLOCK_MONOTONIC, &failed_at);
	assert_int_equal(kvt_release(c, lease), 0);
	int status;
	char *health = daemon_request_text(d, "GET", "/healthz", NULL, &status);
	assert_int_equal(status, 200);
	assert_non_null(strstr(health, "\"status\":\"degraded\""));
	assert_non_null(strstr(health, "\"state\":\"failed\",\"writes\":\"stopped\",\"reads\":\"served\""));
	free(health);
	char *ready = daemon_request_text(d, "GET", "/readyz", NULL, &status);
	assert_int_equal(status, 200); /* L1 still serves */
	assert_non_null(strstr(ready, "\"state\":\"failed\""));
	free(ready);
	/* The first probe comes a second after the failure; wait for it, bounded. */
	for (int i = 0; i < 1000 && !l2_state_is(d, "ready"); i++)
		sleep_ms(10);
	assert_true(l2_state_is(d, "ready"));
	clock_gettime(CLOCK_MONOTONIC, &back_at);
	assert_int_equal(daemon_stat(d, "l2.recoveries"), 1);
	print_message("figures: failing disk: L2 failed after %lld I/O errors, %u loads answered "
		      "as misses (0 wrong bytes), back in service %.1f s later by its first probe\n",
		      daemon_stat(d, "l2.io_errors"), misses,
		      (double)(back_at.tv_sec - failed_at.tv_sec) +
			      (double)(back_at.tv_nsec - failed_at.tv_nsec) / 1e9);
	health = daemon_request_text(d, "GET", "/healthz", NULL, &status);
	assert_non_null(strstr(health, "\"status\":\"ok\""));
	free(health);
	/* Writable again: new victims reach L2 and come back. */
	long long written = daemon_stat(d, "l2.victims_written");
	store_settled(d, c, &in, 1000, L1_BLOCKS + 3);
	assert_true(daemon_stat(d, "l2.victims_written") > written);
	assert_int_equal(load_checked(c, &out, 1000), 0);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* Which daemon log line contains text. */
static bool log_says(const struct daemon_fixture *d, const char *text)
{
	FILE *f = fopen(d->log, "r");
	char line[1024];
	bool said = false;
	while (f && fgets(line, sizeof(line), f))
		said |= strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return said;
}

/* An L2 on tmpfs is RAM: the daemon starts, and warns. */
static void test_l2_on_tmpfs_warns(void **state)
{
	(void)state;
	char path[64];
	snprintf(path, sizeof(path), "/dev/shm/kvtier-test-l2-%d", (int)getpid());
	struct daemon_fixture *d = start((const char *[]){"--l2-path", path, "--l2-size", "64MiB",
							  NULL});
	assert_true(log_says(d, "is on tmpfs or ramfs"));
	stop(d);
	unlink(path);
}

static void test_bad_l2_settings_refused(void **state)
{
	(void)state;
	struct daemon_fixture d = {0};
	/* A directory is not a file or device: the daemon says so and exits. */
	assert_int_equal(daemon_start(&d, (const char *[]){"--l2-path", "/tmp", "--l2-size",
							   "64MiB", NULL}), -1);
	assert_true(log_says(&d, "l2-path /tmp: is a directory, not a regular file or a block device"));
	waitpid(d.pid, NULL, 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d.dir);
	(void)!system(cmd);
}

/* --- write-behind --- */

/* kvtier-bench, built beside $KVTIERD, with args: its exit status; its output in out. */
static int run_bench(const struct daemon_fixture *d, const char *args, char *out, size_t cap)
{
	char cmd[1024];
	const char *bin = getenv("KVTIERD");
	assert_non_null(bin);
	snprintf(cmd, sizeof(cmd), "\"$(dirname '%s')/kvtier-bench\" --socket '%s' %s 2>&1", bin,
		 d->socket, args);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	size_t n = fread(out, 1, cap - 1, f);
	out[n] = 0;
	return pclose(f);
}

/* An unpaced burst four times L1, L2 with room: no block lost, every load byte-exact. */
static void test_unpaced_burst_loses_nothing(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "256MiB", "--l2-path",
							   l2_path, "--l2-size", "2GiB", NULL});
	static char out[8192];
	int rc = run_bench(d, "--block-size 2MiB --blocks 512 --threads 1", out, sizeof(out));
	if (rc != 0 || !strstr(out, "verified: every byte"))
		fail_msg("kvtier-bench failed (%d):\n%s", rc, out);
	settle(d);
	assert_int_equal(daemon_stat(d, "l2.victims_dropped_behind"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_load_missing"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.store_wait_timeouts"), 0);
	assert_int_equal(daemon_stat(d, "l1.dirty_items"), 0);
	print_message("figures: unpaced burst of 2x512 2 MiB blocks through 256 MiB L1: 0 lost, "
		      "%lld written behind, %lld clean victims, %lld STORE blocks waited %lld ms "
		      "in all\n", daemon_stat(d, "l1.written_behind"),
		      daemon_stat(d, "l1.evictions_clean"), daemon_stat(d, "dataplane.store_waits"),
		      daemon_stat(d, "dataplane.store_wait_us") / 1000);
	stop(d);
	remove_l2_dir();
}

/* SIGTERM with dirty items: they are written before the exit; a restart serves them all. */
static void test_stop_flushes_dirty_items(void **state)
{
	(void)state;
	make_l2_dir();
	const char *const flags[] = {"--l1-size", "16MiB", "--l1-region-size", "1MiB",
				     "--l1-high-watermark", "1", "--l1-low-watermark", "0.99",
				     "--l2-path", l2_path, "--l2-size", "64MiB",
				     "--l2-region-size", "4MiB", "--l2-write-buffers", "2", NULL};
	struct daemon_fixture *d = start(flags);
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK);
	put_mode(d, "l1-only", 200); /* the writer is off: everything stays dirty */
	for (uint64_t k = 0; k < 15; k += 3)
		store_range(c, &in, k, 3, BLOCK);
	assert_int_equal(daemon_stat(d, "l1.dirty_items"), 15);
	put_mode(d, "evict", 200);
	kvt_client_close(c);
	munmap(in.p, in.size);
	kill(d->pid, SIGTERM);
	int status;
	assert_int_equal(waitpid(d->pid, &status, 0), d->pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	bool flushed = log_says(d, "stop: L2 holds what L1 held");
	bool dirty_at_stop = log_says(d, "stop: writing ");
	assert_true(flushed || !dirty_at_stop);
	assert_false(log_says(d, "not written within stop-flush-ms"));
	forget_exited(d);

	d = start(flags);
	assert_int_equal(daemon_stat(d, "l2.recovered_items"), 15);
	c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging out = staging(c, BLOCK);
	for (uint64_t k = 0; k < 15; k++)
		assert_int_equal(load_checked(c, &out, k), 0);
	print_message("figures: SIGTERM with 15 dirty items (%s at the stop): all 15 served "
		      "after the restart\n", dirty_at_stop ? "some still dirty" : "all handed down");
	kvt_client_close(c);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* kill -9 under stores: at most the dirty gauge's worth is lost, nothing is corrupt. */
static void test_kill9_loses_at_most_dirty(void **state)
{
	(void)state;
	make_l2_dir();
	const char *const flags[] = {"--l1-size", "16MiB", "--l1-region-size", "1MiB",
				     "--l1-high-watermark", "1", "--l1-low-watermark", "0.99",
				     "--l2-path", l2_path, "--l2-size", "256MiB",
				     "--l2-region-size", "4MiB", NULL};
	struct daemon_fixture *d = start(flags);
	_Atomic uint64_t *acked = mmap(NULL, sizeof(*acked), PROT_READ | PROT_WRITE,
				       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(acked != MAP_FAILED);
	atomic_store(acked, 0);
	pid_t child = fork();
	if (child == 0)
		storer(d->socket, 0, 200, acked); /* 200 MiB: within L2, nothing reclaimed */
	for (int i = 0; i < 4000 && atomic_load(acked) < 60; i++)
		sleep_ms(5);
	uint64_t before = atomic_load(acked);
	long long dirty = daemon_stat(d, "l1.dirty_items");
	kill(d->pid, SIGKILL);
	uint64_t at_kill = atomic_load(acked);
	assert_true(before >= 60 && dirty >= 0);
	assert_true(daemon_stop(d) != 0);
	forget_exited(d);
	waitpid(child, NULL, 0);

	d = start(flags);
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging out = staging(c, BLOCK);
	uint64_t missing = 0;
	for (uint64_t k = 0; k < at_kill; k++) /* byte-exact or missing, never wrong */
		missing += load_checked(c, &out, k) != 0;
	/* What was dirty at the read, and what was acknowledged after it, may be gone. */
	assert_true(missing <= (uint64_t)dirty + (at_kill - before));
	print_message("figures: kill -9 under stores: %llu blocks acknowledged, %lld dirty at the "
		      "kill (+%llu acknowledged after the read), %llu lost, 0 corrupt\n",
		      (unsigned long long)at_kill, dirty, (unsigned long long)(at_kill - before),
		      (unsigned long long)missing);
	kvt_client_close(c);
	munmap(out.p, out.size);
	munmap((void *)acked, sizeof(*acked));
	stop(d);
	remove_l2_dir();
}

/* A warm LRU scan over a working set 12% larger than L1: clean victims, no L2 writes. */
static void test_warm_scan_writes_nothing(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start_evict();
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	const uint32_t set = L1_BLOCKS + 2;
	store_settled(d, c, &in, 0, set);
	long long written = daemon_stat(d, "l2.bytes_written");
	long long clean = daemon_stat(d, "l1.evictions_clean");
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t k = 0; k < set; k++) {
			assert_int_equal(load_checked(c, &out, k), 0);
			settle(d);
		}
	assert_int_equal(daemon_stat(d, "l2.bytes_written"), written);
	assert_true(daemon_stat(d, "l1.evictions_clean") - clean >= 2 * set - 2);
	assert_int_equal(daemon_stat(d, "l1.evictions_dirty"), 0);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

/* A client killed while its STORE blocks wait for the writer: the others carry on. */
static void test_client_killed_while_store_waits(void **state)
{
	(void)state;
	make_l2_dir();
	struct daemon_fixture *d = start((const char *[]){
		"--l1-size", "16MiB", "--l1-region-size", "1MiB", "--l1-high-watermark", "1",
		"--l1-low-watermark", "0.99", "--l2-path", l2_path, "--l2-size", "64MiB",
		"--l2-region-size", "4MiB", "--l2-write-buffers", "2", "--store-wait-ms", "60000",
		NULL});
	int killed = 0;
	for (int round = 0; round < 20 && killed < 3; round++) {
		pid_t child = fork();
		if (child == 0)
			storer(d->socket, 100000u * (uint64_t)(round + 1), 100000, NULL);
		for (int i = 0; i < 400 && daemon_stat(d, "dataplane.store_waiting") == 0; i++)
			sleep_ms(5);
		killed += daemon_stat(d, "dataplane.store_waiting") > 0;
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	assert_true(killed >= 1);
	/* The waiting blocks finish (the writer catches up), nothing stays pinned or waiting. */
	for (int i = 0; i < 2000 && (daemon_stat(d, "dataplane.store_waiting") ||
				     daemon_stat(d, "dataplane.clients_active")); i++)
		sleep_ms(5);
	assert_int_equal(daemon_stat(d, "dataplane.store_waiting"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.clients_active"), 0);
	assert_int_equal(daemon_stat(d, "l1.pinned_items"), 0);
	struct kvt_client *c = client(d, "m", BLOCK, 1, 0, 0, 1);
	struct staging in = staging(c, 3 * BLOCK), out = staging(c, BLOCK);
	store_settled(d, c, &in, 0, 3);
	assert_int_equal(load_checked(c, &out, 1), 0);
	print_message("figures: %d clients killed while their STOREs waited for the writer; "
		      "%lld blocks waited in all, the daemon served on\n", killed,
		      daemon_stat(d, "dataplane.store_waits"));
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
	remove_l2_dir();
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_evict_round_trip, teardown),
		cmocka_unit_test_teardown(test_restart_and_corruption, teardown),
		cmocka_unit_test_teardown(test_kill9_during_stores, teardown),
		cmocka_unit_test_teardown(test_mode_changes_live, teardown),
		cmocka_unit_test_teardown(test_unpaced_burst_loses_nothing, teardown),
		cmocka_unit_test_teardown(test_stop_flushes_dirty_items, teardown),
		cmocka_unit_test_teardown(test_kill9_loses_at_most_dirty, teardown),
		cmocka_unit_test_teardown(test_warm_scan_writes_nothing, teardown),
		cmocka_unit_test_teardown(test_client_killed_while_store_waits, teardown),
		cmocka_unit_test_teardown(test_admin_evict_moves_to_l2, teardown),
		cmocka_unit_test_teardown(test_failed_l2_probed_back, teardown),
		cmocka_unit_test_teardown(test_l2_on_tmpfs_warns, teardown),
		cmocka_unit_test(test_bad_l2_settings_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
