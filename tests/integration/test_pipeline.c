/*
 * test_pipeline.c — libkvtier's request-level pipeline in host mode
 * (shared-memory staging, host KV caches) against a real kvtierd: dispatch
 * and buffer reuse order at depth two, split and grouped requests finishing
 * once after their last batch, requests kept apart while buffers are free,
 * independent completion and per-request failures, the max-inflight and
 * pool-depth bounds, drain, and a daemon that dies under the pipeline.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/wait.h>

#include "dp_helpers.h"
#include "kvtier/pipeline.h"

/* 2 layers, K and V, 16 KiB chunks: 64 KiB blocks; 64 blocks in each cache. */
#define LAYERS 2
#define CHUNK (16u * KiB)
#define BLOCK (LAYERS * 2 * CHUNK)
#define CACHE_BLOCKS 64
#define MAX_EVENTS 256

static const char *const flags[] = {"--l1-size", "64MiB", "--l1-region-size", "4MiB", NULL};

struct cache {
	uint8_t *layers[LAYERS];
	struct kvt_kv_layout layout;
};

/* A host KV cache filled with bytes derived from seed (0: zeros). */
static void cache_init(struct cache *k, uint64_t seed)
{
	for (int l = 0; l < LAYERS; l++) {
		k->layers[l] = malloc(2 * CACHE_BLOCKS * CHUNK);
		if (seed)
			test_fill(k->layers[l], 2 * CACHE_BLOCKS * CHUNK, seed * 10 + (uint64_t)l);
		else
			memset(k->layers[l], 0, 2 * CACHE_BLOCKS * CHUNK);
	}
	k->layout = (struct kvt_kv_layout){.num_layers = LAYERS, .planes = 2, .chunk_bytes = CHUNK,
					   .plane_stride = (uint64_t)CACHE_BLOCKS * CHUNK,
					   .block_stride = CHUNK,
					   .layer_bases = (void *const *)k->layers};
}

static void cache_free(struct cache *k)
{
	for (int l = 0; l < LAYERS; l++)
		free(k->layers[l]);
}

static const uint8_t *chunk_at(const struct cache *k, int l, int p, int32_t b)
{
	return k->layers[l] + (size_t)p * CACHE_BLOCKS * CHUNK + (size_t)b * CHUNK;
}

/* Block b of a equals block c of other, every chunk. */
static int same_block(const struct cache *a, int32_t b, const struct cache *other, int32_t c)
{
	for (int l = 0; l < LAYERS; l++)
		for (int p = 0; p < 2; p++)
			if (memcmp(chunk_at(a, l, p, b), chunk_at(other, l, p, c), CHUNK))
				return 0;
	return 1;
}

struct trace_log {
	struct kvt_pipeline_event ev[MAX_EVENTS];
	unsigned n;
};

static void record(void *ctx, const struct kvt_pipeline_event *ev)
{
	struct trace_log *t = ctx;
	if (t->n < MAX_EVENTS)
		t->ev[t->n++] = *ev;
}

/* SIGSTOP, waited for: the daemon answers nothing until daemon_resume. */
static void daemon_pause(struct daemon_fixture *d)
{
	int st;
	assert_int_equal(kill(d->pid, SIGSTOP), 0);
	assert_int_equal(waitpid(d->pid, &st, WUNTRACED), d->pid);
	assert_true(WIFSTOPPED(st));
}

static void daemon_resume(struct daemon_fixture *d)
{
	assert_int_equal(kill(d->pid, SIGCONT), 0);
}

static struct kvt_pipeline *open_pipeline(struct daemon_fixture *d, struct cache *k,
					  uint32_t depth, uint32_t buffer_blocks,
					  uint32_t max_inflight, struct trace_log *log)
{
	struct kvt_pipeline_options o = {
		.client = {.socket_path = d->socket, .model = "pl", .block_bytes = BLOCK,
			   .tp_size = 1},
		.depth = depth, .buffer_blocks = buffer_blocks, .max_inflight = max_inflight,
		.layout = k->layout, .trace = log ? record : NULL, .trace_ctx = log};
	struct kvt_pipeline *p = NULL;
	int rc = kvt_pipeline_open(&o, &p);
	if (rc)
		fail_msg("kvt_pipeline_open: %s", kvt_strerror(rc));
	return p;
}

/* A request of n blocks: keys first_key.., cache ids from ids. */
struct req {
	struct kvt_key keys[64];
	int32_t ids[64];
	struct kvt_transfer t;
};

static void req_init(struct req *r, uint64_t id, uint64_t first_key, uint32_t n,
		     const int32_t *ids)
{
	for (uint32_t i = 0; i < n; i++) {
		r->keys[i] = test_key(first_key + i);
		r->ids[i] = ids ? ids[i] : (int32_t)((first_key + i * 5) % CACHE_BLOCKS);
	}
	r->t = (struct kvt_transfer){.req_id = id, .keys = r->keys, .block_ids = r->ids,
				     .nblocks = n};
}

/* The finished requests of a direction, in one call (their failed lists stay valid). */
static unsigned collect(struct kvt_pipeline *p, int load, struct kvt_pipeline_result *out,
			unsigned max)
{
	int n = kvt_pipeline_finished(p, load, out, max);
	assert_true(n >= 0);
	return (unsigned)n;
}

static void test_depth_two_order_and_reuse(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache src, dst;
	cache_init(&src, 3);
	cache_init(&dst, 0);
	struct trace_log log = {0};
	struct kvt_pipeline *p = open_pipeline(d, &src, 2, 4, 0, &log);
	struct req a, b;
	req_init(&a, 1, 0, 10, NULL);   /* batches of 4, 4, then 2 shared with b */
	req_init(&b, 2, 100, 3, NULL);
	/* The daemon stopped while both are submitted: no batch can finish (and
	 * free a buffer for a's last blocks alone) before b is queued. */
	daemon_pause(d);
	assert_int_equal(kvt_pipeline_submit_store(p, &a.t), 0);
	assert_int_equal(kvt_pipeline_submit_store(p, &b.t), 0);
	assert_int_equal(kvt_pipeline_submit_store(p, &a.t), -EEXIST);
	daemon_resume(d);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);

	/* Dispatch is FIFO: batch numbers rise, requests in submission order. The
	 * first two batches take buffers 0 and 1; every later one takes the
	 * buffer that came free first. */
	uint32_t dispatched[MAX_EVENTS] = {0}, completed[MAX_EVENTS] = {0};
	unsigned nd = 0, nc = 0;
	for (unsigned i = 0; i < log.n; i++) {
		const struct kvt_pipeline_event *ev = &log.ev[i];
		assert_true(ev->busy_buffers <= 2);
		if (ev->type == KVT_PL_DISPATCH) {
			assert_int_equal(ev->batch, nd);
			dispatched[nd++] = ev->buffer;
		} else {
			completed[nc++] = ev->buffer;
		}
	}
	assert_int_equal(nd, 4);
	assert_int_equal(nc, 4);
	assert_int_equal(dispatched[0], 0);
	assert_int_equal(dispatched[1], 1);
	for (unsigned i = 2; i < nd; i++)
		assert_int_equal(dispatched[i], completed[i - 2]);
	/* The third batch carries a's last two blocks. Sent with the pool full
	 * (the other buffer still out), it groups them with b's first two; sent
	 * while the other buffer was free too (both answers taken at once), it
	 * leaves with a's alone and b goes whole in the fourth. */
	int grouped = -1;
	unsigned done_at[4] = {0};   /* a batch's place among the completions */
	for (unsigned i = 0, c = 0; i < log.n; i++) {
		const struct kvt_pipeline_event *ev = &log.ev[i];
		if (ev->type == KVT_PL_COMPLETE) {
			done_at[ev->batch] = c++;
		} else if (ev->batch == 2) {
			grouped = ev->busy_buffers == 2;
			assert_int_equal(ev->nrequests, grouped ? 2 : 1);
			assert_int_equal(ev->first_req, 1);
			assert_int_equal(ev->nblocks, grouped ? 4 : 2);
		}
	}
	assert_true(grouped >= 0);
	/* Results come in finishing order: a's with batch 2's completion, b's
	 * with its last batch's (batch 3, and batch 2 too when grouped); the two
	 * buffers' batches may complete in either order. */
	unsigned a_done = done_at[2];
	unsigned b_done = grouped && done_at[2] > done_at[3] ? done_at[2] : done_at[3];
	uint64_t first = b_done < a_done ? 2 : 1;
	struct kvt_pipeline_result res[8];
	assert_int_equal(collect(p, 0, res, 8), 2);
	assert_int_equal(res[0].req_id, first);
	assert_int_equal(res[1].req_id, 3 - first);
	assert_int_equal(res[0].nfailed + res[1].nfailed, 0);
	kvt_pipeline_close(p);

	/* Load both into another cache at other block ids: byte for byte. */
	p = open_pipeline(d, &dst, 2, 4, 0, NULL);
	struct req la, lb;
	int32_t ids_a[10], ids_b[3];
	for (int i = 0; i < 10; i++)
		ids_a[i] = 63 - 3 * i;
	for (int i = 0; i < 3; i++)
		ids_b[i] = 2 * i;
	req_init(&la, 7, 0, 10, ids_a);
	req_init(&lb, 8, 100, 3, ids_b);
	assert_int_equal(kvt_pipeline_submit_load(p, &la.t), 0);
	assert_int_equal(kvt_pipeline_submit_load(p, &lb.t), 0);
	/* Lane 0 is the caller's: lookups while the pool's batches are in flight. */
	for (int i = 0; i < 20; i++)
		assert_int_equal(lookup_range(kvt_pipeline_client(p), 0, 10, 0, NULL), 10);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	assert_int_equal(collect(p, 1, res, 8), 2);
	assert_int_equal(res[0].status, 0);
	assert_int_equal(res[1].status, 0);
	for (int i = 0; i < 10; i++)
		assert_true(same_block(&dst, ids_a[i], &src, a.ids[i]));
	for (int i = 0; i < 3; i++)
		assert_true(same_block(&dst, ids_b[i], &src, b.ids[i]));
	kvt_pipeline_close(p);
	cache_free(&src);
	cache_free(&dst);
	stop(d);
}

/*
 * With buffers free, a request's tail leaves alone: the next request takes
 * a buffer of its own instead of sharing (and delaying) the tail's batch,
 * however the submissions and the progress thread interleave.
 */
static void test_free_buffers_keep_requests_apart(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache k;
	cache_init(&k, 4);
	struct trace_log log = {0};
	struct kvt_pipeline *p = open_pipeline(d, &k, 4, 4, 0, &log);
	struct req a, b;
	req_init(&a, 1, 0, 6, NULL);    /* 4 + 2 */
	req_init(&b, 2, 100, 3, NULL);
	daemon_pause(d);                /* no buffer comes back while both queue */
	assert_int_equal(kvt_pipeline_submit_store(p, &a.t), 0);
	assert_int_equal(kvt_pipeline_submit_store(p, &b.t), 0);
	daemon_resume(d);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	const uint32_t want_blocks[] = {4, 2, 3};
	const uint64_t want_req[] = {1, 1, 2};
	unsigned nd = 0;
	for (unsigned i = 0; i < log.n; i++) {
		const struct kvt_pipeline_event *ev = &log.ev[i];
		if (ev->type != KVT_PL_DISPATCH)
			continue;
		assert_true(nd < 3);
		assert_int_equal(ev->batch, nd);
		assert_int_equal(ev->buffer, nd);
		assert_int_equal(ev->nrequests, 1);
		assert_int_equal(ev->first_req, want_req[nd]);
		assert_int_equal(ev->nblocks, want_blocks[nd]);
		nd++;
	}
	assert_int_equal(nd, 3);
	struct kvt_pipeline_result res[4];
	assert_int_equal(collect(p, 0, res, 4), 2);
	assert_int_equal(res[0].nfailed + res[1].nfailed, 0);
	kvt_pipeline_close(p);
	cache_free(&k);
	stop(d);
}

/* A request split over three batches finishes once, after the last of them. */
static void test_split_request_finishes_after_last_batch(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache k;
	cache_init(&k, 5);
	struct trace_log log = {0};
	struct kvt_pipeline *p = open_pipeline(d, &k, 2, 4, 0, &log);
	struct req r;
	req_init(&r, 42, 0, 10, NULL);
	assert_int_equal(kvt_pipeline_submit_store(p, &r.t), 0);
	assert_int_equal(kvt_pipeline_wait_finished(p, 0, 60000), 0);
	unsigned completes = 0;
	for (unsigned i = 0; i < log.n; i++) {
		if (log.ev[i].type != KVT_PL_COMPLETE)
			continue;
		completes++;
		/* Active until its third batch is back. */
		assert_int_equal(log.ev[i].active_requests, completes < 3 ? 1 : 0);
	}
	assert_int_equal(completes, 3);
	struct kvt_pipeline_result res[4];
	assert_int_equal(collect(p, 0, res, 4), 1);
	assert_int_equal(res[0].req_id, 42);
	assert_int_equal(collect(p, 0, res, 4), 0);
	kvt_pipeline_close(p);
	cache_free(&k);
	stop(d);
}

/* Missing blocks fail only their own request, reported block by block. */
static void test_failures_are_per_request(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache src, dst;
	cache_init(&src, 8);
	cache_init(&dst, 9); /* not zeros: a skipped block must keep these bytes */
	struct kvt_pipeline *p = open_pipeline(d, &src, 3, 4, 0, NULL);
	struct req s;
	req_init(&s, 1, 0, 6, NULL);
	assert_int_equal(kvt_pipeline_submit_store(p, &s.t), 0);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	kvt_pipeline_close(p);

	p = open_pipeline(d, &dst, 3, 4, 0, NULL);
	struct req ok, missing, partly;
	int32_t ok_ids[6] = {10, 11, 12, 13, 14, 15}, missing_ids[4] = {20, 21, 22, 23};
	int32_t partly_ids[3] = {30, 31, 32};
	req_init(&ok, 1, 0, 6, ok_ids);
	req_init(&missing, 2, 500, 4, missing_ids);
	req_init(&partly, 3, 0, 3, partly_ids);
	partly.keys[1] = test_key(777); /* never stored */
	uint8_t before[CHUNK];
	memcpy(before, chunk_at(&dst, 1, 1, 31), CHUNK);
	assert_int_equal(kvt_pipeline_submit_load(p, &ok.t), 0);
	assert_int_equal(kvt_pipeline_submit_load(p, &missing.t), 0);
	assert_int_equal(kvt_pipeline_submit_load(p, &partly.t), 0);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	struct kvt_pipeline_result res[4];
	assert_int_equal(collect(p, 1, res, 4), 3);
	for (int i = 0; i < 3; i++) {
		if (res[i].req_id == 1) {
			assert_int_equal(res[i].status, 0);
			assert_int_equal(res[i].nfailed, 0);
		} else if (res[i].req_id == 2) {
			assert_int_equal(res[i].status, -ENOENT);
			assert_int_equal(res[i].nfailed, 4);
			for (uint32_t f = 0; f < 4; f++)
				assert_int_equal(res[i].failed[f], f);
		} else {
			assert_int_equal(res[i].req_id, 3);
			assert_int_equal(res[i].status, -ENOENT);
			assert_int_equal(res[i].nfailed, 1);
			assert_int_equal(res[i].failed[0], 1);
		}
	}
	for (int i = 0; i < 6; i++)
		assert_true(same_block(&dst, ok_ids[i], &src, s.ids[i]));
	assert_true(same_block(&dst, 30, &src, s.ids[0]));
	assert_true(same_block(&dst, 32, &src, s.ids[2]));
	assert_memory_equal(chunk_at(&dst, 1, 1, 31), before, CHUNK); /* left alone */
	struct kvt_pipeline_stats st;
	kvt_pipeline_stats(p, &st);
	assert_int_equal(st.requests_failed, 2);
	assert_int_equal(st.blocks_failed, 5);
	assert_int_equal(st.bytes_loaded, (uint64_t)8 * BLOCK);
	kvt_pipeline_close(p);
	cache_free(&src);
	cache_free(&dst);
	stop(d);
}

/* Never more than max_inflight requests or depth buffers at once. */
static void test_inflight_and_depth_bounds(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache k;
	cache_init(&k, 4);
	struct trace_log log = {0};
	struct kvt_pipeline *p = open_pipeline(d, &k, 3, 4, 2, &log);
	struct req r[30];
	for (int i = 0; i < 30; i++) {
		req_init(&r[i], (uint64_t)i, (uint64_t)i * 2, 2, NULL);
		assert_int_equal(kvt_pipeline_submit_store(p, &r[i].t), 0);
	}
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	for (unsigned i = 0; i < log.n; i++) {
		assert_true(log.ev[i].active_requests <= 2);
		assert_true(log.ev[i].busy_buffers <= 3);
		assert_true(log.ev[i].nrequests <= 2);
	}
	struct kvt_pipeline_stats st;
	kvt_pipeline_stats(p, &st);
	assert_true(st.max_active_requests <= 2);
	assert_true(st.max_busy_buffers <= 3);
	assert_int_equal(st.requests_finished, 30);
	struct kvt_pipeline_result res[32];
	assert_int_equal(collect(p, 0, res, 32), 30);
	for (int i = 0; i < 30; i++)
		assert_int_equal(res[i].status, 0);
	kvt_pipeline_close(p);
	cache_free(&k);
	stop(d);
}

/* The daemon dies: every request finishes failed, none waits forever. */
static void test_daemon_death_fails_requests(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(flags);
	struct cache k;
	cache_init(&k, 6);
	struct kvt_pipeline *p = open_pipeline(d, &k, 2, 4, 0, NULL);
	struct req s;
	req_init(&s, 1, 0, 8, NULL);
	assert_int_equal(kvt_pipeline_submit_store(p, &s.t), 0);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	kill(d->pid, SIGKILL); /* its sockets close now; the fixture reaps it at the end */
	struct req l[4];
	for (int i = 0; i < 4; i++) {
		req_init(&l[i], (uint64_t)(10 + i), 0, 8, NULL);
		assert_int_equal(kvt_pipeline_submit_load(p, &l[i].t), 0);
	}
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	struct kvt_pipeline_result res[8];
	assert_int_equal(collect(p, 1, res, 8), 4);
	for (int i = 0; i < 4; i++) {
		assert_true(res[i].status < 0);
		assert_int_equal(res[i].nfailed, 8);
	}
	kvt_pipeline_close(p);
	cache_free(&k);
	current = NULL;
	assert_int_equal(daemon_stop(d), 128 + SIGKILL);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	assert_int_equal(system(cmd), 0);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_depth_two_order_and_reuse, teardown),
		cmocka_unit_test_teardown(test_free_buffers_keep_requests_apart, teardown),
		cmocka_unit_test_teardown(test_split_request_finishes_after_last_batch, teardown),
		cmocka_unit_test_teardown(test_failures_are_per_request, teardown),
		cmocka_unit_test_teardown(test_inflight_and_depth_bounds, teardown),
		cmocka_unit_test_teardown(test_daemon_death_fails_requests, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
