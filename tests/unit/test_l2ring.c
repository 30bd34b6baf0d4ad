/*
 * test_l2ring.c — L2's io_uring on a real O_DIRECT file: I/O past the
 * ring's depth waits in order and completes byte-exact, fixed I/O from the
 * second of two registered buffers, short transfers continued (a count
 * short of one block redone), -EAGAIN retried a bounded number of times, a
 * read past the end an error, and close completing everything queued.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "l2.h"
#include "l2fmt.h"
#include "l2ring.h"
#include "test_util.h"

#define BLOCKS 16
#define BLOCK L2FMT_BLOCK
#define FILE_BYTES (BLOCKS * BLOCK)

/* O_DIRECT wants aligned memory, which cmocka's allocator does not give. */
static _Alignas(4096) uint8_t src_mem[FILE_BYTES];
static _Alignas(4096) uint8_t dst_mem[FILE_BYTES];

struct fixture;

/* An I/O as a caller of the ring embeds it, knowing its fixture and its block. */
struct test_io {
	struct l2_io io;
	struct fixture *f;
	unsigned index;
};

struct fixture {
	char path[256];
	int fd;
	struct l2_ring ring;
	struct l2ring_stats stats;
	struct test_io ios[BLOCKS];
	int results[BLOCKS];     /* of each completion; 1: not completed */
	unsigned completions;
	/* fault injection: each of the next fault_count completions gets fault_res */
	int fault_res;
	unsigned fault_count;
	bool fault_half;         /* halve the count instead (rounded down to a block) */
};

static int inject(void *ctx, bool write, uint32_t wanted, int res)
{
	(void)write;
	struct fixture *f = ctx;
	if (!f->fault_count || res < 0)
		return res;
	f->fault_count--;
	if (f->fault_half)
		return (int)((wanted / 2) & ~(BLOCK - 1));
	return f->fault_res;
}

static void completed(struct l2_io *io, int res)
{
	struct test_io *t = (struct test_io *)io; /* io is its first member */
	t->f->results[t->index] = res;
	t->f->completions++;
}

/* Queues an I/O of len bytes at offset as slot i of the fixture. */
static void queue_io(struct fixture *f, unsigned i, bool write, uint8_t *mem, uint64_t offset,
		     uint32_t len)
{
	f->ios[i] = (struct test_io){{.complete = completed, .buf = mem, .offset = offset,
				      .len = len, .write = write}, f, i};
	f->results[i] = 1;
	l2ring_queue(&f->ring, &f->ios[i].io);
}

static struct fixture *fixture_new(uint32_t depth)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	snprintf(f->path, sizeof(f->path), "%s/kvtier-test-l2ring-XXXXXX", dir);
	int fd = mkstemp(f->path);
	assert_true(fd >= 0);
	close(fd);
	f->fd = open(f->path, O_RDWR | O_DIRECT);
	assert_true(f->fd >= 0);
	assert_int_equal(ftruncate(f->fd, FILE_BYTES), 0);
	char why[256] = "";
	int err = l2ring_open(&f->ring, f->fd, depth, &f->stats, why, sizeof(why));
	if (err)
		fail_msg("l2ring_open: %s", why);
	f->ring.fault = inject;
	f->ring.fault_ctx = f;
	return f;
}

static void fixture_free(struct fixture *f)
{
	l2ring_close(&f->ring);
	close(f->fd);
	unlink(f->path);
	free(f);
}

/* Queues block i of the file: written from src_mem, or read into dst_mem. */
static void queue_block(struct fixture *f, unsigned i, bool write, uint8_t *mem, uint32_t len)
{
	queue_io(f, i, write, mem, (uint64_t)i * BLOCK, len);
}

/* Submits and completes until the ring is idle. */
static void settle(struct fixture *f)
{
	l2ring_submit(&f->ring);
	while (!l2ring_idle(&f->ring)) {
		struct pollfd p = {l2ring_event_fd(&f->ring), POLLIN, 0};
		assert_true(poll(&p, 1, 10000) == 1);
		l2ring_process(&f->ring);
	}
}

#define STAT(f, field) atomic_load(&(f)->stats.field)

/* Queues a write of every block of the file from src_mem, filled from seed. */
static void queue_writes(struct fixture *f, uint64_t seed)
{
	test_fill(src_mem, FILE_BYTES, seed);
	for (unsigned i = 0; i < BLOCKS; i++)
		queue_block(f, i, true, src_mem + i * BLOCK, BLOCK);
}

static void write_all_blocks(struct fixture *f)
{
	queue_writes(f, 7);
	settle(f);
}

static void test_past_the_depth_in_order_byte_exact(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(2);
	queue_writes(f, 7);
	assert_int_equal(STAT(f, ios_queued), BLOCKS);
	l2ring_submit(&f->ring);
	assert_int_equal(STAT(f, ios_inflight), 2);
	assert_int_equal(STAT(f, ios_queued), BLOCKS - 2);
	assert_ptr_equal(STAILQ_FIRST(&f->ring.queued), &f->ios[2].io); /* the first two went, in order */
	settle(f);
	assert_int_equal(f->completions, BLOCKS);
	for (unsigned i = 0; i < BLOCKS; i++)
		assert_int_equal(f->results[i], 0);
	assert_int_equal(STAT(f, ios_queued), 0);
	assert_int_equal(STAT(f, ios_inflight), 0);

	memset(dst_mem, 0, FILE_BYTES);
	for (unsigned i = 0; i < BLOCKS; i++)
		queue_block(f, i, false, dst_mem + i * BLOCK, BLOCK);
	settle(f);
	assert_true(test_check(dst_mem, FILE_BYTES, 7));
	assert_int_equal(STAT(f, short_ios), 0);
	assert_int_equal(STAT(f, eagain_retries), 0);
	fixture_free(f);
}

/* A wrong buffer index would make the kernel refuse the fixed read (-EFAULT). */
static void test_fixed_io_from_the_second_buffer(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(8);
	write_all_blocks(f);
	struct iovec bufs[2] = {{src_mem, FILE_BYTES}, {dst_mem, FILE_BYTES}};
	assert_int_equal(l2ring_register(&f->ring, bufs, 2), 0);
	assert_int_equal(f->ring.nfixed, 2);
	memset(dst_mem, 0, FILE_BYTES);
	queue_block(f, 0, false, dst_mem, FILE_BYTES); /* the whole file, into buffer 1 */
	settle(f);
	assert_int_equal(f->results[0], 0);
	assert_true(test_check(dst_mem, FILE_BYTES, 7));
	fixture_free(f);
}

static void test_short_transfers_continue(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(8);
	write_all_blocks(f);
	memset(dst_mem, 0, FILE_BYTES);
	f->fault_half = true;
	f->fault_count = 3; /* 64 KiB: 32, then 16, then 8 KiB moved, then the rest at once */
	queue_block(f, 0, false, dst_mem, FILE_BYTES);
	settle(f);
	assert_int_equal(f->results[0], 0);
	assert_int_equal(STAT(f, short_ios), 3);
	assert_true(test_check(dst_mem, FILE_BYTES, 7));

	/* A count short of one block moves nothing: the block is read again. */
	f->fault_half = false;
	f->fault_res = 100;
	f->fault_count = 2;
	memset(dst_mem, 0, FILE_BYTES);
	queue_block(f, 1, false, dst_mem, BLOCK);
	settle(f);
	assert_int_equal(f->results[1], 0);
	assert_int_equal(STAT(f, short_ios), 5);
	assert_memory_equal(dst_mem, src_mem + BLOCK, BLOCK);
	fixture_free(f);
}

static void test_eagain_retried_then_failed(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(8);
	write_all_blocks(f);
	f->fault_res = -EAGAIN;
	f->fault_count = 3;
	queue_block(f, 0, false, dst_mem, BLOCK);
	settle(f);
	assert_int_equal(f->results[0], 0);
	assert_int_equal(STAT(f, eagain_retries), 3);
	/* -EAGAIN forever: 16 retries, then the error, not a hang. */
	f->fault_count = 1000;
	queue_block(f, 1, false, dst_mem, BLOCK);
	settle(f);
	assert_int_equal(f->results[1], -EAGAIN);
	assert_int_equal(STAT(f, eagain_retries), 3 + 16);
	assert_int_equal(f->fault_count, 1000 - 17);
	fixture_free(f);
}

static void test_read_past_the_end_fails(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(8);
	write_all_blocks(f);
	queue_io(f, 0, false, dst_mem, FILE_BYTES, BLOCK);
	settle(f);
	assert_int_equal(f->results[0], -EIO);
	assert_int_equal(STAT(f, short_ios), 0);
	fixture_free(f);
}

static void test_close_completes_what_is_queued(void **state)
{
	(void)state;
	struct fixture *f = fixture_new(2);
	queue_writes(f, 9);
	l2ring_close(&f->ring); /* nothing submitted yet */
	assert_int_equal(f->completions, BLOCKS);
	for (unsigned i = 0; i < BLOCKS; i++)
		assert_int_equal(f->results[i], 0);
	assert_int_equal(pread(f->fd, dst_mem, FILE_BYTES, 0), FILE_BYTES);
	assert_true(test_check(dst_mem, FILE_BYTES, 9));
	l2ring_close(&f->ring); /* twice is harmless */
	close(f->fd);
	unlink(f->path);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_past_the_depth_in_order_byte_exact),
		cmocka_unit_test(test_fixed_io_from_the_second_buffer),
		cmocka_unit_test(test_short_transfers_continue),
		cmocka_unit_test(test_eagain_retried_then_failed),
		cmocka_unit_test(test_read_past_the_end_fails),
		cmocka_unit_test(test_close_completes_what_is_queued),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
