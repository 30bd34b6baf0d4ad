/*
 * test_dataplane.c — libkvtier against a real kvtierd: byte-exact round
 * trips, lanes and clients at once, eviction seen by LOOKUP and LOAD, leases,
 * tensor-parallel parts, buffer ownership, hostile frames, and a client
 * killed in the middle of a LOAD.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_fixture.h"
#include "dp_helpers.h"
#include "kvtier/protocol.h"
#include "test_util.h"
#include "wire.h"


static void test_round_trip(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	const uint32_t block = 256 * KiB;
	struct kvt_client *c = client(d, "m", block, 1, 0, 0, 1);
	struct staging in = staging(c, 16 * block), out = staging(c, 16 * block);

	store_range(c, &in, 100, 1, block);
	assert_int_equal(lookup_range(c, 100, 2, 0, NULL), 1);
	struct kvt_block b[16];
	blocks_for(b, 100, 1, block);
	assert_int_equal(kvt_load(c, out.index, b, 1), 0);
	assert_int_equal(b[0].status, 0);
	assert_int_equal(b[0].length, block);
	assert_true(test_check(out.p, block, 100));

	/* Sixteen in one request, one a shorter block. */
	store_range(c, &in, 200, 16, block);
	blocks_for(b, 200, 16, block);
	memset(out.p, 0, out.size);
	assert_int_equal(kvt_load(c, out.index, b, 16), 0);
	for (uint32_t i = 0; i < 16; i++) {
		assert_int_equal(b[i].status, 0);
		assert_true(test_check(out.p + (uint64_t)i * block, block, 200 + i));
	}
	assert_int_equal(lookup_range(c, 200, 16, 0, NULL), 16);
	assert_int_equal(kvt_ping(c), 0);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_stored"), 17);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_loaded"), 17);
	assert_int_equal(daemon_stat(d, "dataplane.bytes_loaded"), 17 * (long long)block);
	assert_int_equal(daemon_stat(d, "dataplane.ops.store.requests"), 2);
	assert_int_equal(daemon_stat(d, "dataplane.buffers_registered"), 2);
	assert_int_equal(kvt_buffer_unregister(c, in.index), 0);
	assert_int_equal(kvt_buffer_unregister(c, in.index), -ENOENT);
	assert_int_equal(daemon_stat(d, "dataplane.buffers_registered"), 1);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
}

struct lane_job {
	struct kvt_client *c;
	unsigned lane;
	struct staging in, out;
	uint64_t first;
	int ok;
};

/* One lane: 24 blocks stored and loaded back, 4 requests in flight. */
static void *lane_job_main(void *arg)
{
	struct lane_job *j = arg;
	const uint32_t block = 64 * KiB, n = 24;
	struct kvt_block st[24], ld[24];
	for (uint32_t i = 0; i < n; i++) {
		test_fill(j->in.p + (uint64_t)i * block, block, j->first + i);
		st[i] = (struct kvt_block){test_key(j->first + i), (uint64_t)i * block, block, 1};
		ld[i] = st[i];
	}
	j->ok = 1;
	for (int phase = 0; phase < 2; phase++) {
		struct kvt_block *b = phase ? ld : st;
		uint32_t sent = 0, done = 0;
		while (done < n) {
			while (sent < n && sent - done < 4) {
				uint64_t id;
				int rc = phase ? kvt_submit_load(j->c, j->lane, j->out.index, &b[sent], 1, &id)
					       : kvt_submit_store(j->c, j->lane, j->in.index, &b[sent], 1, &id);
				if (rc) {
					j->ok = 0;
					return NULL;
				}
				sent++;
			}
			struct kvt_completion comp[8];
			int got = kvt_poll(j->c, j->lane, comp, 8, -1);
			if (got <= 0) {
				j->ok = 0;
				return NULL;
			}
			for (int i = 0; i < got; i++)
				j->ok &= comp[i].status == 0;
			done += (uint32_t)got;
		}
		for (uint32_t i = 0; i < n; i++)
			j->ok &= b[i].status == 0;
	}
	for (uint32_t i = 0; i < n; i++)
		j->ok &= test_check(j->out.p + (uint64_t)i * block, block, j->first + i);
	return NULL;
}

static void test_lanes_and_clients(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	struct kvt_client *c1 = client(d, "m", 64 * KiB, 1, 0, 0, 3);
	struct kvt_client *c2 = client(d, "m", 64 * KiB, 1, 0, 0, 3);
	assert_int_equal(kvt_client_lanes(c1), 3);
	struct lane_job jobs[6];
	pthread_t th[6];
	for (unsigned i = 0; i < 6; i++) {
		struct kvt_client *c = i < 3 ? c1 : c2;
		/* Every lane of a client uses the client's buffers. */
		jobs[i] = (struct lane_job){.c = c, .lane = i % 3, .first = 1000 + i * 100,
					    .in = staging(c, 24 * 64 * KiB),
					    .out = staging(c, 24 * 64 * KiB)};
		pthread_create(&th[i], NULL, lane_job_main, &jobs[i]);
	}
	for (unsigned i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		assert_true(jobs[i].ok);
		munmap(jobs[i].in.p, jobs[i].in.size);
		munmap(jobs[i].out.p, jobs[i].out.size);
	}
	assert_int_equal(daemon_stat(d, "dataplane.clients_active"), 2);
	assert_int_equal(daemon_stat(d, "dataplane.connections_active"), 6);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_loaded"), 6 * 24);
	kvt_client_close(c1);
	kvt_client_close(c2);
	stop(d);
}

static const char *const small_l1[] = {"--l1-size", "16MiB", "--l1-region-size", "1MiB",
				       "--l1-high-watermark", "1", NULL};

static void test_eviction_seen_by_lookup_and_load(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(small_l1);
	const uint32_t block = MiB;
	struct kvt_client *c = client(d, "m", block, 1, 0, 0, 1);
	struct staging in = staging(c, 16 * block), out = staging(c, 8 * block);
	store_range(c, &in, 0, 8, block);
	assert_int_equal(lookup_range(c, 0, 8, 0, NULL), 8);
	/* Sixteen more fill L1: the first eight were least recently used. */
	store_range(c, &in, 100, 16, block);
	assert_int_equal(lookup_range(c, 0, 8, 0, NULL), 0);
	assert_int_equal(lookup_range(c, 100, 16, 0, NULL), 16);

	/* Looked up, then evicted before the LOAD: reported missing, not zeroed. */
	assert_int_equal(lookup_range(c, 100, 4, 0, NULL), 4);
	store_range(c, &in, 200, 16, block);
	memset(out.p, 0xab, out.size);
	struct kvt_block b[4];
	blocks_for(b, 100, 4, block);
	assert_int_equal(kvt_load(c, out.index, b, 4), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(b[i].status, -ENOENT);
	for (uint64_t i = 0; i < 4 * (uint64_t)block; i++)
		if (out.p[i] != 0xab)
			fail_msg("byte %llu of a missing block was written", (unsigned long long)i);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_load_missing"), 4);
	assert_true(daemon_stat(d, "l1.evictions_capacity") >= 24);
	kvt_client_close(c);
	munmap(in.p, in.size);
	munmap(out.p, out.size);
	stop(d);
}

static void test_leases(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(small_l1);
	const uint32_t block = MiB;
	struct kvt_client *c = client(d, "m", block, 1, 0, 0, 1);
	struct staging in = staging(c, 16 * block);
	store_range(c, &in, 0, 4, block);
	uint64_t lease;
	assert_int_equal(lookup_range(c, 0, 4, 60000, &lease), 4);
	assert_int_not_equal(lease, 0);
	assert_int_equal(daemon_stat(d, "l1.leases_active"), 1);
	/* Pressure well past capacity: the leased blocks stay. (Stores go 8 at
	 * a time: a request pins its own blocks, and 4 of 16 slots are leased.) */
	for (uint64_t k = 100; k < 132; k += 8)
		store_range(c, &in, k, 8, block);
	assert_int_equal(lookup_range(c, 0, 4, 0, NULL), 4);
	/* Released, they go under the next pressure. */
	assert_int_equal(kvt_release(c, lease), 0);
	assert_int_equal(kvt_release(c, lease), -ENOENT);
	store_range(c, &in, 300, 8, block);
	store_range(c, &in, 308, 8, block);
	assert_int_equal(lookup_range(c, 0, 4, 0, NULL), 0);

	/* A short lease expires by itself: wait (bounded) for the gauge to drop. */
	store_range(c, &in, 400, 4, block);
	assert_int_equal(lookup_range(c, 400, 4, 50, &lease), 4);
	long long active = 1;
	for (int i = 0; i < 200 && active != 0; i++) {
		sleep_ms(25);
		active = daemon_stat(d, "l1.leases_active");
	}
	assert_int_equal(active, 0);
	assert_int_equal(daemon_stat(d, "l1.leases_expired"), 1);
	/* KVT_LEASE_DEFAULT takes the daemon's default lease. */
	assert_int_equal(lookup_range(c, 400, 4, KVT_LEASE_DEFAULT, &lease), 4);
	assert_int_not_equal(lease, 0);
	assert_int_equal(kvt_release(c, lease), 0);
	store_range(c, &in, 500, 8, block);
	store_range(c, &in, 508, 8, block);
	assert_int_equal(lookup_range(c, 400, 4, 0, NULL), 0);
	kvt_client_close(c);
	munmap(in.p, in.size);
	stop(d);
}

static void test_tensor_parallel(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	const uint32_t block = 128 * KiB;
	struct kvt_client *r0 = client(d, "tp-model", block, 2, 0, 0, 1);
	struct kvt_client *r1 = client(d, "tp-model", block, 2, 1, 0, 1);
	struct kvt_client *sched = client(d, "tp-model", block, 2, 0, 1, 1);
	struct staging s0 = staging(r0, block), s1 = staging(r1, block);
	struct kvt_block b = {test_key(7), 0, block, 1};
	test_fill(s0.p, block, 7000);
	assert_int_equal(kvt_store(r0, s0.index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	assert_int_equal(lookup_range(sched, 7, 1, 0, NULL), 0); /* one rank of two */
	test_fill(s1.p, block, 7001);
	b.status = 1;
	assert_int_equal(kvt_store(r1, s1.index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	assert_int_equal(lookup_range(sched, 7, 1, 0, NULL), 1);
	/* Each rank loads its own part. */
	memset(s0.p, 0, block);
	memset(s1.p, 0, block);
	assert_int_equal(kvt_load(r0, s0.index, &b, 1), 0);
	assert_true(test_check(s0.p, block, 7000));
	assert_int_equal(kvt_load(r1, s1.index, &b, 1), 0);
	assert_true(test_check(s1.p, block, 7001));
	/* A part stored again is a no-op. */
	assert_int_equal(kvt_store(r1, s1.index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	/* The scheduler looks up only; a mismatched HELLO is refused. */
	assert_int_equal(kvt_store(sched, 0, &b, 1), -EPERM);
	struct kvt_client_options o = {.socket_path = d->socket, .model = "tp-model",
				       .block_bytes = block * 2, .tp_size = 2};
	struct kvt_client *bad;
	assert_int_equal(kvt_client_open(&o, &bad), -KVT_ENSCONFLICT);
	o.block_bytes = block;
	o.tp_size = 4;
	assert_int_equal(kvt_client_open(&o, &bad), -KVT_ENSCONFLICT);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.ns_conflict"), 2);
	/* The control plane sees the buffers and refuses to drop a namespace in use. */
	int status;
	json_t *j = daemon_request(d, "GET", "/v1/buffers", NULL, &status);
	assert_int_equal(status, 200);
	json_t *bufs = json_object_get(j, "buffers");
	assert_int_equal(json_array_size(bufs), 2);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(bufs, 0), "pid")),
			 getpid());
	assert_int_equal(json_integer_value(json_object_get(json_array_get(bufs, 0), "size_bytes")),
			 block);
	json_decref(j);
	j = daemon_request(d, "GET", "/v1/namespaces", NULL, &status);
	json_int_t id = json_integer_value(
		json_object_get(json_array_get(json_object_get(j, "namespaces"), 0), "id"));
	json_decref(j);
	char path[64];
	snprintf(path, sizeof(path), "/v1/namespaces/%lld", (long long)id);
	j = daemon_request(d, "DELETE", path, NULL, &status);
	assert_int_equal(status, 409);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
			    "in_use");
	json_decref(j);
	kvt_client_close(r0);
	kvt_client_close(r1);
	kvt_client_close(sched);
	/* Once its clients are gone, it goes with its blocks. */
	j = NULL;
	for (int i = 0; i < 200 && status != 200; i++) {
		json_decref(j);
		if (i)
			sleep_ms(25);
		j = daemon_request(d, "DELETE", path, NULL, &status);
	}
	assert_int_equal(status, 200);
	assert_int_equal(json_integer_value(json_object_get(j, "evicted_bytes")), 2 * block);
	json_decref(j);
	assert_int_equal(daemon_stat(d, "l1.items"), 0);
	munmap(s0.p, block);
	munmap(s1.p, block);
	stop(d);
}

static void test_buffer_ownership_and_bounds(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	const uint32_t block = 64 * KiB;
	struct kvt_client *a = client(d, "m", block, 1, 0, 0, 1);
	struct kvt_client *b = client(d, "m", block, 1, 0, 0, 1);
	struct staging sa = staging(a, 4 * block);
	struct kvt_block blk = {test_key(1), 0, block, 1};
	/* Another client's index is refused; so is an unknown one. */
	assert_int_equal(kvt_store(b, sa.index, &blk, 1), -EPERM);
	assert_int_equal(kvt_load(b, sa.index, &blk, 1), -EPERM);
	assert_int_equal(kvt_store(b, 999, &blk, 1), -ENOENT);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.foreign_buffer"), 2);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.unknown_buffer"), 1);
	/* Offsets and lengths outside the buffer or the block, per block. */
	struct kvt_block bad[4] = {
		{test_key(2), 4 * block, 1, 1},            /* starts past the end */
		{test_key(3), 3 * block + 1, block, 1},    /* runs past the end */
		{test_key(4), 0, block + 1, 1},            /* longer than a block */
		{test_key(5), 0, block, 1},                /* fine */
	};
	bad[1].offset = UINT64_MAX - 10;                    /* overflow attempt */
	assert_int_equal(kvt_store(a, sa.index, bad, 4), 0);
	assert_int_equal(bad[0].status, -ERANGE);
	assert_int_equal(bad[1].status, -ERANGE);
	assert_int_equal(bad[2].status, -ERANGE);
	assert_int_equal(bad[3].status, 0);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.out_of_range"), 3);
	/* A load into too little space is refused, not truncated. */
	struct kvt_block small = {test_key(5), 0, block - 1, 1};
	assert_int_equal(kvt_load(a, sa.index, &small, 1), 0);
	assert_int_equal(small.status, -ERANGE);
	/* Registration of a non-memfd, and of a size past the file, is refused. */
	FILE *f = tmpfile();
	uint32_t idx;
	assert_int_equal(ftruncate(fileno(f), 65536), 0);
	assert_int_equal(kvt_buffer_register(a, fileno(f), 65536, &idx), -EINVAL);
	fclose(f);
	int mfd = memfd_create("t", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(mfd, 65536), 0);
	assert_int_equal(kvt_buffer_register(a, mfd, 65537, &idx), -EINVAL);
	assert_int_equal(kvt_buffer_register(a, mfd, 65536, &idx), 0);
	/* Sealed now: the client cannot shrink it under the daemon. */
	assert_int_not_equal(ftruncate(mfd, 4096), 0);
	close(mfd);
	kvt_client_close(a);
	kvt_client_close(b);
	munmap(sa.p, sa.size);
	stop(d);
}

/* A /dev/shm file registered by path through the control plane. */
static void test_buffer_registered_by_path(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	const uint32_t block = 256 * KiB;
	char path[64];
	snprintf(path, sizeof(path), "/dev/shm/kvtier-test-%d", (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4 * block), 0);
	uint8_t *p = mmap(NULL, 4 * block, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	char body[256];
	int status;
	snprintf(body, sizeof(body), "{\"kind\":\"shm\",\"path\":\"%s\",\"size\":%u,\"pid\":%d}",
		 path, 4 * block, (int)getpid());
	json_t *j = daemon_request(d, "POST", "/v1/buffers", body, &status);
	assert_int_equal(status, 200);
	uint32_t index = (uint32_t)json_integer_value(json_object_get(j, "index"));
	json_decref(j);
	/* Owned by this process: its clients use it; the bytes go both ways. */
	struct kvt_client *c = client(d, "m", block, 1, 0, 0, 1);
	test_fill(p, block, 77);
	struct kvt_block b = {test_key(77), 0, block, 1};
	assert_int_equal(kvt_store(c, index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	b.offset = block;
	assert_int_equal(kvt_load(c, index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	assert_true(test_check(p + block, block, 77));
	/* Truncated under the daemon: the copy fails, the daemon lives on. */
	assert_int_equal(ftruncate(fd, 0), 0);
	struct kvt_block lost = {test_key(78), 0, block, 1};
	assert_int_equal(kvt_store(c, index, &lost, 1), 0);
	assert_int_equal(lost.status, -EFAULT);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.buffer_fault"), 1);
	assert_int_equal(lookup_range(c, 78, 1, 0, NULL), 0); /* nothing half-stored */
	assert_int_equal(kvt_ping(c), 0);
	/* Another process's index is refused; the control plane unregisters. */
	snprintf(body, sizeof(body), "{\"kind\":\"shm\",\"path\":\"%s\",\"size\":1,\"pid\":%d}",
		 path, (int)getpid() + 1);
	assert_int_equal(ftruncate(fd, 4096), 0);
	j = daemon_request(d, "POST", "/v1/buffers", body, &status);
	assert_int_equal(status, 200);
	uint32_t foreign = (uint32_t)json_integer_value(json_object_get(j, "index"));
	json_decref(j);
	/* The listing names the pid each path buffer was given to (it said 0: issue 37, item 9). */
	j = daemon_request(d, "GET", "/v1/buffers", NULL, &status);
	json_t *listed = json_object_get(j, "buffers");
	assert_int_equal(json_array_size(listed), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *e = json_array_get(listed, i);
		json_int_t want = json_integer_value(json_object_get(e, "index")) == foreign
					  ? getpid() + 1 : getpid();
		assert_int_equal(json_integer_value(json_object_get(e, "pid")), want);
	}
	json_decref(j);
	struct kvt_block f = {test_key(79), 0, 1, 1};
	assert_int_equal(kvt_store(c, foreign, &f, 1), -EPERM);
	char del[64];
	snprintf(del, sizeof(del), "/v1/buffers/%u", index);
	json_decref(daemon_request(d, "DELETE", del, NULL, &status));
	assert_int_equal(status, 200);
	json_decref(daemon_request(d, "DELETE", del, NULL, &status));
	assert_int_equal(status, 404);
	assert_int_equal(kvt_store(c, index, &b, 1), -ENOENT);
	kvt_client_close(c);
	munmap(p, 4 * block);
	close(fd);
	unlink(path);
	stop(d);
}

/* --- hostile frames on a raw socket --- */

/* 300 LOADs in one write: the first 256 go in flight, the rest get -EBUSY. */
static void test_inflight_limit(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	int fd = raw_connect(d);
	raw_hello(fd);
	uint32_t index = raw_register(fd, 1 << 20);
	enum { N = 300, FRAME = KVT_HDR_BYTES + 8 + KVT_BLOCK_ENTRY_BYTES };
	uint8_t *frames = calloc(N, FRAME);
	for (int i = 0; i < N; i++) {
		uint8_t *f = frames + (size_t)i * FRAME;
		struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = KVT_OP_LOAD,
				     .length = 8 + KVT_BLOCK_ENTRY_BYTES, .id = 42};
		wire_hdr_encode(f, &h);
		struct wire_wr w = {f + KVT_HDR_BYTES, 8 + KVT_BLOCK_ENTRY_BYTES, false};
		struct kvt_key k = test_key((uint64_t)i);
		wire_put_u32(&w, index);
		wire_put_u32(&w, 1);
		wire_put_bytes(&w, k.bytes, KVT_KEY_BYTES);
		wire_put_u64(&w, 0);
		wire_put_u32(&w, 4096);
		wire_put_u32(&w, 0);
	}
	assert_int_equal(send(fd, frames, (size_t)N * FRAME, 0), (ssize_t)N * FRAME);
	free(frames);
	int busy = 0, served = 0;
	for (int i = 0; i < N; i++) {
		int st = raw_status(fd);
		busy += st == -EBUSY;
		served += st == 0;
	}
	assert_int_equal(busy, N - 256);
	assert_int_equal(served, 256);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.inflight_limit"), N - 256);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_load_missing"), 256);
	close(fd);
	stop(d);
}

static void test_hostile_frames(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	struct kvt_client *good = client(d, "h", 4096, 1, 0, 0, 1);

	int fd = raw_connect(d);
	raw_send(fd, 0xdeadbeef, KVT_OP_PING, NULL, 0, 0);
	assert_int_equal(raw_status(fd), 1); /* wrong magic: closed */
	close(fd);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.bad_magic"), 1);

	fd = raw_connect(d);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_LOOKUP, NULL, 0, KVT_MAX_FRAME_BYTES + 1);
	assert_int_equal(raw_status(fd), 1); /* oversized: closed */
	close(fd);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.oversized"), 1);

	fd = raw_connect(d);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_PING, NULL, 0, 0);
	assert_int_equal(raw_status(fd), -ENOTCONN); /* before HELLO */
	raw_hello(fd);
	assert_int_equal(raw_hello_status(fd), -EALREADY); /* a second HELLO */
	close(fd);

	fd = raw_connect(d);
	raw_hello(fd);
	raw_send(fd, KVT_PROTO_MAGIC, 99, NULL, 0, 0);
	assert_int_equal(raw_status(fd), -EOPNOTSUPP);
	uint8_t lk[8 + 16];
	struct wire_wr w = {lk, sizeof(lk), false};
	wire_put_u32(&w, 5000); /* more keys than allowed */
	wire_put_u32(&w, 0);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_LOOKUP, lk, 8, 8);
	assert_int_equal(raw_status(fd), -E2BIG);
	w = (struct wire_wr){lk, sizeof(lk), false};
	wire_put_u32(&w, 3); /* three keys, one sent */
	wire_put_u32(&w, 0);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_LOOKUP, lk, sizeof(lk), sizeof(lk));
	assert_int_equal(raw_status(fd), -EBADMSG);
	uint8_t st[8];
	w = (struct wire_wr){st, sizeof(st), false};
	wire_put_u32(&w, 0);
	wire_put_u32(&w, 1000000); /* blocks */
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_STORE, st, 8, 8);
	assert_int_equal(raw_status(fd), -E2BIG);
	uint8_t reg[KVT_REGISTER_BYTES] = {0};
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_REGISTER, reg, sizeof(reg), sizeof(reg));
	assert_int_equal(raw_status(fd), -EBADF); /* no fd passed */
	/* GPU kinds: a short payload is malformed; a whole one, on a daemon without a GPU,
	 * is refused as CUDA unavailable, whatever the handle. */
	uint8_t ipc[KVT_REGISTER_IPC_BYTES] = {0};
	w = (struct wire_wr){ipc, sizeof(ipc), false};
	wire_put_u64(&w, 4096);
	wire_put_u32(&w, KVT_BUFFER_CUDA_IPC);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_REGISTER, ipc, KVT_REGISTER_VMM_BYTES,
		 KVT_REGISTER_VMM_BYTES);
	assert_int_equal(raw_status(fd), -EBADMSG);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_REGISTER, ipc, sizeof(ipc), sizeof(ipc));
	assert_int_equal(raw_status(fd), -KVT_ENOCUDA);
	w = (struct wire_wr){ipc, sizeof(ipc), false};
	wire_put_u64(&w, 4096);
	wire_put_u32(&w, KVT_BUFFER_CUDA_VMM);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_REGISTER, ipc, KVT_REGISTER_VMM_BYTES,
		 KVT_REGISTER_VMM_BYTES);
	assert_int_equal(raw_status(fd), -EBADF); /* cuda_vmm needs its fd */
	uint8_t rel[8] = {1};
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_RELEASE, rel, 8, 8);
	assert_int_equal(raw_status(fd), -ENOENT);
	/* A truncated frame, then the client goes away. */
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_LOOKUP, lk, 4, 100);
	close(fd);

	/* The daemon and the other client never noticed. */
	assert_int_equal(kvt_ping(good), 0);
	assert_int_equal(lookup_range(good, 1, 1, 0, NULL), 0);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.too_many"), 2);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.malformed"), 2);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.bad_buffer"), 3);
	assert_int_equal(daemon_stat(d, "gpu.mappings_opened"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.unknown_op"), 1);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.no_hello"), 1);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.bad_hello"), 1);
	kvt_client_close(good);
	stop(d);
}

/*
 * Every code docs/protocol.md promises, as an independent client would meet
 * them: the order of the first checks, trailing bytes, error replies without
 * payload, each REGISTER failure, the buffer limit, a foreign RELEASE, a lane
 * from another process, a scheduler's HELLO, a part shorter than the block.
 */
static void test_protocol_page_codes(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	int fd = raw_connect(d);
	raw_send(fd, KVT_PROTO_MAGIC, 99, NULL, 0, 0);
	assert_int_equal(raw_status(fd), -EOPNOTSUPP); /* the op is checked before HELLO */
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_PING, NULL, 0, 0);
	uint32_t len = 99;
	assert_int_equal(raw_reply(fd, NULL, 0, &len), -ENOTCONN);
	assert_int_equal(len, 0); /* error replies carry no payload */
	uint64_t session;
	assert_int_equal(raw_hello_as(fd, "p", 0, &session), 0);
	uint8_t junk[4] = {0};
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_PING, junk, sizeof(junk), sizeof(junk));
	assert_int_equal(raw_reply(fd, NULL, 0, &len), -EBADMSG); /* trailing bytes, every op */
	assert_int_equal(len, 0);

	/* REGISTER: each failure its code. */
	uint32_t idx;
	assert_int_equal(raw_register_fd(fd, -1, 4096, KVT_BUFFER_SHM, &idx), -EBADF);
	int mfd = memfd_create("p", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	assert_int_equal(raw_register_fd(fd, mfd, 0, KVT_BUFFER_SHM, &idx), -EINVAL);
	assert_int_equal(raw_register_fd(fd, mfd, 8192, KVT_BUFFER_SHM, &idx), -EINVAL);
	assert_int_equal(raw_register_fd(fd, mfd, 4096, 9, &idx), -EOPNOTSUPP);
	close(mfd);
	int plain = memfd_create("p", 0); /* no MFD_ALLOW_SEALING: not sealable */
	assert_int_equal(ftruncate(plain, 4096), 0);
	assert_int_equal(raw_register_fd(fd, plain, 4096, KVT_BUFFER_SHM, &idx), -EINVAL);
	close(plain);
	int sealed = memfd_create("p", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(sealed, 4096), 0);
	assert_int_equal(fcntl(sealed, F_ADD_SEALS, F_SEAL_WRITE), 0);
	assert_int_equal(raw_register_fd(fd, sealed, 4096, KVT_BUFFER_SHM, &idx), -EPERM);
	close(sealed);
	int pipes[2];
	assert_int_equal(pipe(pipes), 0);
	assert_int_equal(raw_register_fd(fd, pipes[0], 4096, KVT_BUFFER_SHM, &idx), -EINVAL);
	close(pipes[0]);
	close(pipes[1]);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.bad_buffer"), 7);
	/* The 257th buffer of a client: -ENOSPC. */
	for (int i = 0; i < KVT_MAX_BUFFERS; i++)
		raw_register(fd, 4096);
	mfd = memfd_create("p", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	assert_int_equal(raw_register_fd(fd, mfd, 4096, KVT_BUFFER_SHM, &idx), -ENOSPC);
	close(mfd);

	/* A lease of another client: -ENOENT, as one that never was. */
	struct kvt_client *other = client(d, "p", 4096, 1, 0, 0, 1);
	struct staging s = staging(other, 8192);
	store_range(other, &s, 0, 1, 4096);
	uint64_t lease;
	assert_int_equal(lookup_range(other, 0, 1, 10000, &lease), 1);
	uint8_t rel[8];
	struct wire_wr w = {rel, sizeof(rel), false};
	wire_put_u64(&w, lease);
	raw_send(fd, KVT_PROTO_MAGIC, KVT_OP_RELEASE, rel, 8, 8);
	assert_int_equal(raw_status(fd), -ENOENT);
	assert_int_equal(kvt_release(other, lease), 0);

	/* A part shorter than the block is stored and loaded at its length. */
	struct kvt_block b = {.key = test_key(7), .offset = 0, .length = 100};
	test_fill(s.p, 100, 7);
	assert_int_equal(kvt_store(other, s.index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	b.length = 4096;
	memset(s.p, 0, 4096);
	assert_int_equal(kvt_load(other, s.index, &b, 1), 0);
	assert_int_equal(b.status, 0);
	assert_int_equal(b.length, 100);
	assert_true(test_check(s.p, 100, 7));

	/* A lane of this session from another process is refused. */
	pid_t child = fork();
	if (child == 0) {
		int lane = raw_connect(d);
		_exit(raw_hello_as(lane, "p", session, NULL) == -EPERM ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* A scheduler names the namespace's block size and TP size; its rank is ignored. */
	struct kvt_client *sched = client(d, "p", 4096, 1, 0, 1, 1);
	assert_int_equal(lookup_range(sched, 0, 1, 0, NULL), 1);
	kvt_client_close(sched);
	struct kvt_client_options o = {.socket_path = d->socket, .model = "p", .block_bytes = 8192,
				       .scheduler = 1};
	struct kvt_client *wrong;
	assert_int_equal(kvt_client_open(&o, &wrong), -KVT_ENSCONFLICT);
	kvt_client_close(other);
	close(fd);
	stop(d);
}

static void test_client_killed_mid_load(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "256MiB", NULL});
	const uint32_t block = 4 * MiB;
	pid_t child = fork();
	if (child == 0) {
		struct kvt_client_options o = {.socket_path = d->socket, .model = "k",
					       .block_bytes = block, .lanes = 2};
		struct kvt_client *c;
		void *addr;
		uint32_t idx;
		if (kvt_client_open(&o, &c) || kvt_buffer_create(c, 16 * (uint64_t)block, &addr, &idx))
			_exit(1);
		struct kvt_block b[16];
		blocks_for(b, 0, 16, block);
		if (kvt_store(c, idx, b, 16))
			_exit(2);
		struct kvt_key keys[16];
		uint8_t tiers[16];
		for (int i = 0; i < 16; i++)
			keys[i] = test_key((uint64_t)i);
		struct kvt_lookup lk = {.keys = keys, .nkeys = 16, .lease_ms = 60000, .tiers = tiers};
		if (kvt_lookup(c, &lk) || lk.hits != 16)
			_exit(3);
		uint64_t id;
		for (unsigned lane = 0; lane < 2; lane++)
			for (int i = 0; i < 8; i++)
				kvt_submit_load(c, lane, idx, b, 16, &id);
		raise(SIGKILL);
	}
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	long long clients = -1;
	for (int i = 0; i < 400 && clients != 0; i++) {
		clients = daemon_stat(d, "dataplane.clients_active");
		if (clients)
			sleep_ms(25);
	}
	assert_int_equal(clients, 0);
	assert_int_equal(daemon_stat(d, "l1.pinned_items"), 0);
	assert_int_equal(daemon_stat(d, "l1.leases_active"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.buffers_registered"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.connections_active"), 0);
	assert_int_equal(daemon_stat(d, "l1.complete_items"), 16); /* the data stays */
	/* And the next client is served. */
	struct kvt_client *c = client(d, "k", block, 1, 0, 0, 1);
	assert_int_equal(lookup_range(c, 0, 16, 0, NULL), 16);
	kvt_client_close(c);
	stop(d);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_round_trip, teardown),
		cmocka_unit_test_teardown(test_lanes_and_clients, teardown),
		cmocka_unit_test_teardown(test_eviction_seen_by_lookup_and_load, teardown),
		cmocka_unit_test_teardown(test_leases, teardown),
		cmocka_unit_test_teardown(test_tensor_parallel, teardown),
		cmocka_unit_test_teardown(test_buffer_ownership_and_bounds, teardown),
		cmocka_unit_test_teardown(test_buffer_registered_by_path, teardown),
		cmocka_unit_test_teardown(test_hostile_frames, teardown),
		cmocka_unit_test_teardown(test_inflight_limit, teardown),
		cmocka_unit_test_teardown(test_protocol_page_codes, teardown),
		cmocka_unit_test_teardown(test_client_killed_mid_load, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
