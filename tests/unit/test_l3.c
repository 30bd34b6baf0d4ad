/*
 * test_l3.c — the L3 engine (l3.h) on a real directory with io_uring, no
 * daemon: names and their parsing, a publish and a read back byte-exact, a
 * second publish of the same part (present, not rewritten), a read of a
 * missing part, a part longer than the reader's room, a corrupt header and a
 * corrupt data block (quarantined, then plain misses), refusals at open,
 * the dead publishers' temporaries removed at open, a read that hangs
 * cancelled by its linked timeout, reads whose cancel is refused given up
 * (abandoned: in the ring and queued for it) and finished when the kernel
 * returns, and a symlink at a
 * part's name refused. Every engine but the refused-cancel one runs with
 * linked timeouts.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "l3.h"
#include "test_util.h"

#define PART 10000u /* not a multiple of 4 KiB: padding is exercised */
#define ROOM 12288u

/* O_DIRECT wants aligned memory, which cmocka's allocator does not give. */
static _Alignas(4096) uint8_t src_block[ROOM];
static _Alignas(4096) uint8_t dst_block[ROOM];

struct fixture {
	char root[256];
	struct ns_registry reg;
	struct kvt_ns *ns;
	struct l3 l3;
};

struct result {
	struct l3_read rd;
	struct l3_publish pub;
	int status;
	bool done;
	bool abandoned;
	uint32_t target_length;
};

static uint8_t *target(struct l3_read *rd, uint32_t length)
{
	struct result *r = (struct result *)rd;
	r->target_length = length;
	return dst_block;
}

static void read_abandoned(struct l3_read *rd)
{
	((struct result *)rd)->abandoned = true;
}

static void read_done(struct l3_read *rd, int status)
{
	struct result *r = (struct result *)rd;
	r->status = status;
	r->done = true;
}

static void publish_done(struct l3_publish *p, int status)
{
	struct result *r = (struct result *)((char *)p - offsetof(struct result, pub));
	r->status = status;
	r->done = true;
}

static void settle(struct fixture *f, struct result *r)
{
	l3_submit(&f->l3);
	while (!r->done) {
		struct pollfd p = {l3_event_fd(&f->l3), POLLIN, 0};
		assert_true(poll(&p, 1, 10000) == 1);
		l3_process(&f->l3);
	}
	assert_int_equal(l3_active(&f->l3), 0);
}

static int publish(struct fixture *f, uint64_t n)
{
	struct result r = {0};
	memset(src_block, 0, sizeof(src_block));
	test_fill(src_block, PART, n);
	struct kvt_key key = test_key(n);
	r.pub.done = publish_done;
	assert_int_equal(l3_publish_begin(&f->l3, f->ns, &key, 0, src_block, PART, &r.pub), 0);
	settle(f, &r);
	return r.status;
}

static int read_back(struct fixture *f, uint64_t n, uint32_t cap)
{
	struct result r = {0};
	struct kvt_key key = test_key(n);
	memset(dst_block, 0, sizeof(dst_block));
	r.rd.target = target;
	r.rd.done = read_done;
	assert_int_equal(l3_read_begin(&f->l3, f->ns, &key, 0, cap, &r.rd), 0);
	settle(f, &r);
	if (r.status == 0) {
		assert_int_equal(r.target_length, PART);
		assert_true(test_check(dst_block, PART, n));
	}
	return r.status;
}

static void part_path(struct fixture *f, uint64_t n, char *buf, size_t len)
{
	struct kvt_key key = test_key(n);
	assert_int_equal(l3_part_path(buf, len, f->root, f->ns->digest, &key, 0), 0);
}

static unsigned count_files(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	unsigned n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void l3_up_with(struct fixture *f, uint32_t op_timeout_ms, bool no_cancel)
{
	char why[256] = "";
	struct l3_config cfg = {.path = f->root, .queue_depth = 4, .node = "unit",
				.op_timeout_ms = op_timeout_ms, .no_cancel = no_cancel};
	if (l3_open(&f->l3, &cfg, why, sizeof(why)))
		fail_msg("l3_open: %s", why);
}

static void l3_up_timeout(struct fixture *f, uint32_t op_timeout_ms)
{
	l3_up_with(f, op_timeout_ms, false);
}

static void l3_up(struct fixture *f)
{
	l3_up_timeout(f, 10000);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	snprintf(f->root, sizeof(f->root), "%s/kvtier-test-l3-XXXXXX", dir);
	assert_non_null(mkdtemp(f->root));
	ns_registry_init(&f->reg);
	assert_int_equal(ns_get(&f->reg, "model-a", NULL, PART, 1, &f->ns), 1);
	l3_up(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	l3_close(&f->l3);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	ns_registry_destroy(&f->reg);
	free(f);
	return 0;
}

static void test_names(void **state)
{
	(void)state;
	struct kvt_key key = test_key(7), back;
	char path[L3_PATH_MAX];
	assert_int_equal(l3_part_path(path, sizeof(path), "/r", 0xabcdef, &key, 3), 0);
	const char *name = strrchr(path, '/') + 1;
	char want[64];
	snprintf(want, sizeof(want), "/r/v1/0000000000abcdef/%.2s/%.2s/", name, name + 2);
	assert_memory_equal(path, want, strlen(want));
	uint16_t rank;
	assert_int_equal(l3_name_parse(name, &back, &rank), 0);
	assert_memory_equal(&back, &key, sizeof(key));
	assert_int_equal(rank, 3);
	assert_int_equal(l3_name_parse("zz", &back, &rank), -EINVAL);
	char bad[64];
	snprintf(bad, sizeof(bad), "%.32s.x", name);
	assert_int_equal(l3_name_parse(bad, &back, &rank), -EINVAL);
	snprintf(bad, sizeof(bad), "%.32s.70000", name);
	assert_int_equal(l3_name_parse(bad, &back, &rank), -EINVAL);
	assert_int_equal(l3_part_path(path, 20, "/r", 1, &key, 0), -ENAMETOOLONG);
}

static void test_publish_then_read(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(publish(f, 1), 0);
	char path[L3_PATH_MAX], tmp[L3_PATH_MAX + 8];
	part_path(f, 1, path, sizeof(path));
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 4096 + 12288); /* header block + data to 4 KiB */
	snprintf(tmp, sizeof(tmp), "%s/tmp", f->root);
	assert_int_equal(count_files(tmp), 0);
	assert_int_equal(read_back(f, 1, ROOM), 0);
	/* The same part again: there already, the file untouched. */
	assert_int_equal(publish(f, 1), -EEXIST);
	struct stat again;
	assert_int_equal(stat(path, &again), 0);
	assert_int_equal(again.st_ino, st.st_ino);
	assert_int_equal(read_back(f, 2, ROOM), -ENOENT);   /* never published */
	assert_int_equal(read_back(f, 1, PART - 1), -ERANGE); /* longer than the room */
	struct l3_stats_snapshot s;
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.published, 1);
	assert_int_equal(s.publish_present, 1);
	assert_int_equal(s.reads, 1);
	assert_int_equal(s.read_misses, 1);
	assert_int_equal(s.read_failures, 1);
	assert_int_equal(s.bytes_read, PART);
	assert_int_equal(s.bytes_written, 2 * (4096 + 12288)); /* the twin was written, then found present */
	assert_string_equal(l3_state(&f->l3), "ready");
	assert_null(l3_fault_reason(&f->l3));
}

static void flip(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static void test_corruption_is_quarantined(void **state)
{
	struct fixture *f = *state;
	char path[2][L3_PATH_MAX], q[L3_PATH_MAX + 16];
	for (uint64_t n = 0; n < 2; n++) {
		assert_int_equal(publish(f, 10 + n), 0);
		part_path(f, 10 + n, path[n], sizeof(path[n]));
	}
	flip(path[0], 40);          /* the header */
	flip(path[1], 4096 + 9999); /* the last data byte */
	assert_int_equal(read_back(f, 10, ROOM), -EBADMSG);
	assert_int_equal(read_back(f, 11, ROOM), -EBADMSG);
	assert_int_equal(access(path[0], F_OK), -1);
	assert_int_equal(access(path[1], F_OK), -1);
	snprintf(q, sizeof(q), "%s/quarantine", f->root);
	assert_int_equal(count_files(q), 2);
	assert_int_equal(read_back(f, 10, ROOM), -ENOENT); /* never served again */
	struct l3_stats_snapshot s;
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.checksum_failures, 2);
	assert_int_equal(s.quarantined, 2);
	assert_int_equal(s.read_failures, 2);
	assert_int_equal(s.read_misses, 1);
}

static void test_open_refusals_and_dead_temporaries(void **state)
{
	struct fixture *f = *state;
	char why[256], path[L3_PATH_MAX];
	struct l3 other;
	snprintf(path, sizeof(path), "%s/absent", f->root);
	struct l3_config cfg = {.path = path, .node = "unit"};
	assert_int_equal(l3_open(&other, &cfg, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "No such file"));
	snprintf(path, sizeof(path), "%s/file", f->root);
	int fd = open(path, O_CREAT | O_WRONLY, 0644);
	close(fd);
	assert_int_equal(l3_open(&other, &cfg, why, sizeof(why)), -ENOTDIR);
	assert_non_null(strstr(why, "not a directory"));
	/* A dead process of this node left a temporary; another node's stays. */
	char dead[L3_PATH_MAX + 32], alive[L3_PATH_MAX + 32];
	snprintf(dead, sizeof(dead), "%s/tmp/unit.999999999.5", f->root);
	snprintf(alive, sizeof(alive), "%s/tmp/other.1.5", f->root);
	close(open(dead, O_CREAT | O_WRONLY, 0644));
	close(open(alive, O_CREAT | O_WRONLY, 0644));
	l3_close(&f->l3);
	l3_up(f);
	assert_int_equal(access(dead, F_OK), -1);
	assert_int_equal(access(alive, F_OK), 0);
}

/*
 * A part whose read never answers (a FIFO at its name that this process
 * holds open for writing, and writes nothing to, as a hung file system
 * would): the linked timeout cancels the header read, and the read fails
 * with -ETIMEDOUT instead of waiting for ever. L3 stays ready (reads do not
 * degrade it) and serves the next read.
 */
static void test_hung_read_times_out(void **state)
{
	struct fixture *f = *state;
	l3_close(&f->l3);
	l3_up_timeout(f, 100);
	char path[L3_PATH_MAX];
	assert_int_equal(publish(f, 30), 0); /* makes the part's directories */
	part_path(f, 30, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0644), 0);
	int writer = open(path, O_RDWR);
	assert_true(writer >= 0);
	assert_int_equal(read_back(f, 30, ROOM), -ETIMEDOUT);
	struct l3_stats_snapshot s;
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.op_timeouts, 1);
	assert_int_equal(s.read_failures, 1);
	assert_int_equal(s.io_errors, 1);
	assert_int_equal(s.degraded, 0);
	close(writer);
	assert_int_equal(publish(f, 31), 0);
	assert_int_equal(read_back(f, 31, ROOM), 0);
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.op_timeouts, 1);
	assert_int_equal(s.reads, 1);
}

/*
 * Whether four of the reads wait in the kernel on a header read (opened, in
 * the ring: the FIFO has no bytes) and the fifth for room in the ring, with
 * no completion left to take: a state only bytes in the FIFO end.
 */
static bool four_reading_one_queued(const struct fixture *f, struct result *r, int n)
{
	int reading = 0;
	for (int i = 0; i < n; i++) {
		const struct l3_op *op = &r[i].rd.op;
		reading += op->fd >= 0 && op->waiting_since_ms && op != STAILQ_FIRST(&f->l3.queued);
	}
	return reading == 4 && !STAILQ_EMPTY(&f->l3.queued) &&
	       io_uring_cq_ready((struct io_uring *)&f->l3.ring) == 0;
}

/*
 * Reads the kernel will not let go (no linked timeout: as a hard NFS mount
 * refuses the cancel; a FIFO that is never written), one more than the ring
 * takes, so the last waits for room: l3_abandon_stuck gives each up once
 * its step has waited op_timeout_ms and the grace, in the kernel or in the
 * queue, not before and only once; target never runs after; when the
 * kernel returns at last (bytes in the FIFO) the files are closed and each
 * done comes with -ETIMEDOUT.
 */
static void test_refused_cancel_abandons_the_read(void **state)
{
	struct fixture *f = *state;
	enum { N = 5 }; /* the ring takes 4 (queue_depth) */
	l3_close(&f->l3);
	l3_up_with(f, 100, true);
	char path[L3_PATH_MAX];
	assert_int_equal(publish(f, 32), 0);
	part_path(f, 32, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0644), 0);
	int writer = open(path, O_RDWR);
	assert_true(writer >= 0);
	struct result r[N] = {0};
	struct kvt_key key = test_key(32);
	for (int i = 0; i < N; i++) {
		r[i].rd.target = target;
		r[i].rd.abandoned = read_abandoned;
		r[i].rd.done = read_done;
		assert_int_equal(l3_read_begin(&f->l3, f->ns, &key, 0, ROOM, &r[i].rd), 0);
	}
	l3_submit(&f->l3); /* a FIFO refuses O_DIRECT at once: each is reopened buffered */
	while (!four_reading_one_queued(f, r, N)) {
		struct pollfd p = {l3_event_fd(&f->l3), POLLIN, 0};
		assert_true(poll(&p, 1, 10000) == 1);
		l3_process(&f->l3);
	}
	uint64_t now = kvt_now_ms();
	assert_int_equal(l3_abandon_stuck(&f->l3, now), 0); /* not yet */
	assert_int_equal(l3_abandon_stuck(&f->l3, now + 100 + L3_ABANDON_GRACE_MS), N);
	for (int i = 0; i < N; i++)
		assert_true(r[i].abandoned && !r[i].done);
	assert_int_equal(l3_abandon_stuck(&f->l3, now + 100 + L3_ABANDON_GRACE_MS), 0); /* once */
	struct l3_stats_snapshot s;
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.reads_abandoned, N);
	assert_int_equal(s.reads_held, N);
	assert_int_equal(s.op_timeouts, 0);
	assert_int_equal(l3_active(&f->l3), N);

	/* The kernel returns: 4 KiB at a time end a waiting read each (closes, and the
	 * queued read's steps, need none; extra bytes just stay in the FIFO). */
	uint8_t junk[4096] = {0};
	for (int writes = 0; l3_active(&f->l3); writes++) {
		assert_true(writes < 2 * N);
		if (!io_uring_cq_ready(&f->l3.ring))
			assert_int_equal(write(writer, junk, sizeof(junk)), (ssize_t)sizeof(junk));
		struct pollfd p = {l3_event_fd(&f->l3), POLLIN, 0};
		assert_true(poll(&p, 1, 10000) == 1);
		l3_process(&f->l3);
	}
	for (int i = 0; i < N; i++) {
		assert_true(r[i].done);
		assert_int_equal(r[i].status, -ETIMEDOUT);
		assert_int_equal(r[i].target_length, 0); /* not after it was given up */
	}
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.reads_held, 0);
	assert_int_equal(s.read_failures, N);
	assert_int_equal(s.quarantined, 0);
	close(writer);
	assert_int_equal(publish(f, 33), 0); /* and L3 serves on */
	assert_int_equal(read_back(f, 33, ROOM), 0);
}

/* A symlink at a part's name, even to a good copy of that part, is not opened. */
static void test_symlinked_part_is_refused(void **state)
{
	struct fixture *f = *state;
	char path[L3_PATH_MAX], copy[L3_PATH_MAX + 8];
	assert_int_equal(publish(f, 40), 0);
	part_path(f, 40, path, sizeof(path));
	snprintf(copy, sizeof(copy), "%s.copy", path);
	assert_int_equal(rename(path, copy), 0);
	assert_int_equal(symlink(copy, path), 0);
	assert_int_equal(read_back(f, 40, ROOM), -ELOOP);
	struct l3_stats_snapshot s;
	l3_stats_read(&f->l3, &s);
	assert_int_equal(s.read_failures, 1);
	assert_int_equal(s.io_errors, 1);
	assert_int_equal(s.reads, 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rename(copy, path), 0);
	assert_int_equal(read_back(f, 40, ROOM), 0); /* the file itself is served */
}

/*
 * A signature (l3mac.h) covers the header's signed fields and the data: a
 * change to either, or another key, fails it; a key file too short is refused.
 */
static void test_signatures(void **state)
{
	(void)state;
	static struct l3mac_key key, other;
	char path[] = "/tmp/kvtier-l3key-XXXXXX", why[256];
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "0123456789", 10), 10);
	assert_int_equal(l3mac_load(path, &key, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "the key must be 32 to 4096 bytes"));
	assert_int_equal(write(fd, "0123456789abcdefghijklmnopqrstuv", 32), 32);
	assert_int_equal(l3mac_load(path, &key, why, sizeof(why)), 0);
	assert_int_equal(key.len, 42);
	close(fd);
	unlink(path);
	other = key;
	other.bytes[0] ^= 1;
	_Alignas(4096) static uint8_t hdr[L2FMT_BLOCK];
	uint8_t data[100];
	test_fill(data, sizeof(data), 5);
	struct l2fmt_record r = {.ns_digest = 1, .key = test_key(2), .tp_size = 1,
				 .length = sizeof(data), .flags = L2FMT_RECORD_MAC};
	l2fmt_record_encode(hdr, &r);
	l3mac_sign(&key, hdr, data, sizeof(data));
	assert_true(l3mac_verify(&key, hdr, data, sizeof(data)));
	assert_false(l3mac_verify(&other, hdr, data, sizeof(data)));
	data[99] ^= 1;
	assert_false(l3mac_verify(&key, hdr, data, sizeof(data)));
	data[99] ^= 1;
	hdr[L2FMT_MAC_SIGNED - 1] ^= 1; /* the last signed byte: the header's own XXH3 */
	assert_false(l3mac_verify(&key, hdr, data, sizeof(data)));
	hdr[L2FMT_MAC_SIGNED - 1] ^= 1;
	hdr[L2FMT_MAC_OFFSET] ^= 1;
	assert_false(l3mac_verify(&key, hdr, data, sizeof(data)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_signatures),
		cmocka_unit_test_setup_teardown(test_publish_then_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corruption_is_quarantined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_refusals_and_dead_temporaries, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hung_read_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_cancel_abandons_the_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlinked_part_is_refused, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
