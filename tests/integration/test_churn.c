/*
 * test_churn.c — clients that die with STOREs and LOADs in flight: hundreds
 * of them, killed (SIGKILL) or closing their sockets, in L1-only and evict
 * mode, while another client's data must come back byte-exact. Afterwards
 * every per-client resource (connections, sessions, buffers, leases, pins)
 * is back to zero. Meant for the sanitizer build, where a use after free in
 * the daemon aborts it and the final stop fails.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp_helpers.h"

#define BLOCK (256 * KiB)
#define CHILD_BLOCKS 16   /* blocks per request of a dying client */
#define CHURN_KEYS 256    /* the dying clients' keys: 64 MiB, more than an evict-mode L1 */
#define GOOD_KEY 100000   /* the surviving client's keys start here */
#define GOOD_BLOCKS 8
#define KILLS_PER_MODE 200
#define AT_ONCE 4         /* dying clients alive at a time */

/*
 * A client that stores and loads CHILD_BLOCKS blocks on two lanes, takes a
 * lease, and dies with all of it in flight: by SIGKILL when `kill`, else by
 * closing its sockets and exiting. It first waits for `settle` completions,
 * so the deaths land at different points of the requests' lives.
 */
static void dying_client(const char *socket, unsigned seed, int kill, unsigned settle)
{
	struct kvt_client_options o = {.socket_path = socket, .model = "churn",
				       .block_bytes = BLOCK, .lanes = 2};
	struct kvt_client *c;
	void *addr;
	uint32_t idx;
	int rc = kvt_client_open(&o, &c);
	if (rc || (rc = kvt_buffer_create(c, CHILD_BLOCKS * BLOCK, &addr, &idx))) {
		fprintf(stderr, "dying client %u: cannot start: %s\n", seed, kvt_strerror(rc));
		_exit(1);
	}
	struct kvt_block st[CHILD_BLOCKS], ld[CHILD_BLOCKS];
	uint64_t first = (seed * 7u) % (CHURN_KEYS - CHILD_BLOCKS);
	blocks_for(st, first, CHILD_BLOCKS, BLOCK);
	blocks_for(ld, (first + CHILD_BLOCKS) % (CHURN_KEYS - CHILD_BLOCKS), CHILD_BLOCKS, BLOCK);
	for (unsigned i = 0; i < CHILD_BLOCKS; i++)
		test_fill((uint8_t *)addr + (uint64_t)i * BLOCK, BLOCK, first + i);
	struct kvt_key keys[CHILD_BLOCKS];
	uint8_t tiers[CHILD_BLOCKS];
	for (unsigned i = 0; i < CHILD_BLOCKS; i++)
		keys[i] = ld[i].key;
	struct kvt_lookup lk = {.keys = keys, .nkeys = CHILD_BLOCKS, .lease_ms = 60000,
				.tiers = tiers};
	uint64_t id;
	kvt_submit_lookup(c, 0, &lk, &id);
	for (unsigned lane = 0; lane < 2; lane++) {
		for (int i = 0; i < 4; i++) {
			kvt_submit_store(c, lane, idx, st, CHILD_BLOCKS, &id);
			kvt_submit_load(c, lane, idx, ld, CHILD_BLOCKS, &id);
		}
	}
	struct kvt_completion done[4];
	for (unsigned got = 0; got < settle;) {
		int n = kvt_poll(c, got & 1, done, 1, 1000);
		if (n <= 0)
			break;
		got += (unsigned)n;
	}
	if (kill)
		raise(SIGKILL);
	_exit(0); /* the kernel closes the sockets with requests outstanding */
}

static pid_t spawn(const char *socket, unsigned seed)
{
	pid_t pid = fork();
	if (pid == 0)
		dying_client(socket, seed, seed % 2 == 0, seed % 5);
	assert_true(pid > 0);
	return pid;
}

static void reap_one(void)
{
	int status;
	pid_t pid = wait(&status);
	assert_true(pid > 0);
	/* A child that could not even connect would make the test prove nothing. */
	assert_false(WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

/* Waits (bounded) until the daemon has `left` clients. */
static void wait_clients(struct daemon_fixture *d, long long left)
{
	long long n = -1;
	for (int i = 0; i < 800 && n != left; i++)
		if ((n = daemon_stat(d, "dataplane.clients_active")) != left)
			sleep_ms(25);
	assert_int_equal(n, left);
}

/* Loads the good client's blocks and checks every byte; returns how many were found. */
static unsigned check_good(struct kvt_client *good, struct staging *s)
{
	struct kvt_block b[GOOD_BLOCKS];
	blocks_for(b, GOOD_KEY, GOOD_BLOCKS, BLOCK);
	memset(s->p, 0, (size_t)GOOD_BLOCKS * BLOCK);
	assert_int_equal(kvt_load(good, s->index, b, GOOD_BLOCKS), 0);
	unsigned found = 0;
	for (unsigned i = 0; i < GOOD_BLOCKS; i++) {
		if (b[i].status == -ENOENT)
			continue;
		assert_int_equal(b[i].status, 0);
		assert_int_equal(b[i].length, BLOCK);
		assert_true(test_check(s->p + (uint64_t)i * BLOCK, BLOCK, GOOD_KEY + i));
		found++;
	}
	return found;
}

/*
 * KILLS_PER_MODE dying clients, AT_ONCE alive at a time, while the good
 * client keeps loading its blocks; then the counters and the good data.
 * `all_kept`: the good blocks can never be evicted (L1 holds everything).
 */
static void churn(struct daemon_fixture *d, int all_kept)
{
	struct kvt_client *good = client(d, "good", BLOCK, 1, 0, 0, 1);
	struct staging s = staging(good, (uint64_t)GOOD_BLOCKS * BLOCK);
	store_range(good, &s, GOOD_KEY, GOOD_BLOCKS, BLOCK);
	unsigned alive = 0;
	for (unsigned seed = 0; seed < KILLS_PER_MODE; seed++) {
		spawn(d->socket, seed);
		if (++alive == AT_ONCE) {
			reap_one();
			alive--;
		}
		if (seed % 20 == 0) {
			unsigned found = check_good(good, &s);
			if (all_kept)
				assert_int_equal(found, GOOD_BLOCKS);
		}
	}
	while (alive--)
		reap_one();
	wait_clients(d, 1);
	assert_int_equal(daemon_stat(d, "dataplane.connections_active"), 1);
	assert_int_equal(daemon_stat(d, "dataplane.buffers_registered"), 1);
	assert_int_equal(daemon_stat(d, "l1.leases_active"), 0);
	assert_int_equal(daemon_stat(d, "l1.pinned_items"), 0);
	unsigned found = check_good(good, &s);
	if (all_kept)
		assert_int_equal(found, GOOD_BLOCKS);
	assert_int_equal(kvt_ping(good), 0);
	kvt_client_close(good);
	wait_clients(d, 0);
	assert_int_equal(daemon_stat(d, "dataplane.connections_active"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.buffers_registered"), 0);
	assert_int_equal(daemon_stat(d, "l1.pinned_items"), 0);
	assert_true(daemon_stat(d, "dataplane.connections_total") >= 2 * KILLS_PER_MODE);
	print_message("figures: %d clients died with requests in flight (%d SIGKILL, %d closed), "
		      "%lld connections; after them 0 connections, buffers, leases and pins left; "
		      "the other client's blocks byte-exact\n", KILLS_PER_MODE, KILLS_PER_MODE / 2,
		      KILLS_PER_MODE / 2, daemon_stat(d, "dataplane.connections_total"));
}

static void test_churn_l1_only(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "128MiB", NULL});
	churn(d, 1);
	stop(d);
}

static char l2_dir[64], l2_path[128];

static void test_churn_evict(void **state)
{
	(void)state;
	snprintf(l2_dir, sizeof(l2_dir), "/var/tmp/kvtier-churn-XXXXXX");
	assert_non_null(mkdtemp(l2_dir));
	snprintf(l2_path, sizeof(l2_path), "%s/l2", l2_dir);
	struct daemon_fixture *d = start((const char *[]){
		"--l1-size", "16MiB", "--l1-region-size", "1MiB", "--l1-high-watermark", "1",
		"--l1-low-watermark", "0.99", "--l2-path", l2_path, "--l2-size", "128MiB",
		"--l2-region-size", "4MiB", NULL});
	churn(d, 0);
	assert_true(daemon_stat(d, "l2.blocks_loaded") > 0); /* L2 reads were cut off */
	stop(d);
	unlink(l2_path);
	rmdir(l2_dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_churn_l1_only, teardown),
		cmocka_unit_test_teardown(test_churn_evict, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
