/*
 * test_gpu.c — the GPU path end to end, on a machine with a GPU: this
 * process (the worker) allocates staging buffers of both kinds and a paged
 * KV cache, gathers and STOREs, LOADs and restores into other block ids,
 * and checks the bytes; kvtierd runs as its own process. Buffer ownership
 * across processes, mapping closes on unregister and on client exit, the
 * IPC mapping cache, blocks evicted between store and load, and the
 * pipeline (kvtier/pipeline.h) in GPU mode. Exits 77
 * (skipped) when no GPU is visible.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "dp_helpers.h"
#include "kvtier/pipeline.h"

/* A small model: 4 layers, K and V, 16 tokens x 2 heads x 64 dims of bf16. */
#define LAYERS 4
#define PLANES 2
#define CHUNK (16u * 2 * 64 * 2)
#define BLOCK (LAYERS * PLANES * CHUNK)
#define CACHE_BLOCKS 32
#define NB 8

#define CUDA_OK(call)                                                               \
	do {                                                                        \
		cudaError_t rc_ = (call);                                           \
		if (rc_ != cudaSuccess)                                             \
			fail_msg("%s: %s", #call, cudaGetErrorString(rc_));         \
	} while (0)

static const char *const gpu_flags[] = {"--l1-size", "64MiB", "--l1-region-size", "4MiB", NULL};

/* A KV cache in vLLM's per-layer layout, and its layout description. */
struct cache {
	uint8_t *layers[LAYERS];
	void **bases_dev;
	struct kvt_kv_layout layout;
};

static void cache_init(struct cache *k, uint64_t seed)
{
	const size_t layer_bytes = (size_t)PLANES * CACHE_BLOCKS * CHUNK;
	uint8_t *host = malloc(layer_bytes);
	for (int l = 0; l < LAYERS; l++) {
		CUDA_OK(cudaMalloc((void **)&k->layers[l], layer_bytes));
		if (seed)
			test_fill(host, layer_bytes, seed * 100 + (uint64_t)l);
		else
			memset(host, 0, layer_bytes);
		CUDA_OK(cudaMemcpy(k->layers[l], host, layer_bytes, cudaMemcpyHostToDevice));
	}
	free(host);
	CUDA_OK(cudaMalloc((void **)&k->bases_dev, sizeof(k->layers)));
	CUDA_OK(cudaMemcpy(k->bases_dev, k->layers, sizeof(k->layers), cudaMemcpyHostToDevice));
	k->layout = (struct kvt_kv_layout){.num_layers = LAYERS, .planes = PLANES,
					   .chunk_bytes = CHUNK,
					   .plane_stride = (uint64_t)CACHE_BLOCKS * CHUNK,
					   .block_stride = CHUNK, .layer_bases = k->bases_dev};
}

static void cache_free(struct cache *k)
{
	for (int l = 0; l < LAYERS; l++)
		cudaFree(k->layers[l]);
	cudaFree(k->bases_dev);
}

/* Chunk (layer, plane) of block id b, copied to the host. */
static void chunk_of(const struct cache *k, int l, int p, int b, uint8_t *out)
{
	CUDA_OK(cudaMemcpy(out, k->layers[l] + (size_t)p * CACHE_BLOCKS * CHUNK + (size_t)b * CHUNK,
			   CHUNK, cudaMemcpyDeviceToHost));
}

/* Block dst_ids[i] of dst holds block src_ids[i] of src, byte for byte. */
static void assert_restored(const struct cache *src, const int32_t *src_ids,
			    const struct cache *dst, const int32_t *dst_ids, int n)
{
	uint8_t a[CHUNK], b[CHUNK];
	for (int i = 0; i < n; i++)
		for (int l = 0; l < LAYERS; l++)
			for (int p = 0; p < PLANES; p++) {
				chunk_of(src, l, p, src_ids[i], a);
				chunk_of(dst, l, p, dst_ids[i], b);
				if (memcmp(a, b, CHUNK))
					fail_msg("block %d layer %d plane %d differs", i, l, p);
			}
}

static int32_t *device_ids(const int32_t *ids, int n)
{
	int32_t *d;
	CUDA_OK(cudaMalloc((void **)&d, (size_t)n * sizeof(*d)));
	CUDA_OK(cudaMemcpy(d, ids, (size_t)n * sizeof(*d), cudaMemcpyHostToDevice));
	return d;
}

static void blocks_at(struct kvt_block *b, uint64_t first_key, int n)
{
	blocks_for(b, first_key, (uint32_t)n, BLOCK);
}

/* Gathers src_ids of k into staging and STOREs them as keys first_key... */
static void gather_store(struct kvt_client *c, const struct kvt_gpu_buffer *buf,
			 const struct cache *k, const int32_t *src_ids, int n, uint64_t first_key)
{
	int32_t *ids = device_ids(src_ids, n);
	assert_int_equal(kvt_kv_gather(&k->layout, buf->ptr, ids, (uint32_t)n, NULL), 0);
	CUDA_OK(cudaDeviceSynchronize()); /* the daemon copies once STORE arrives */
	struct kvt_block b[NB];
	blocks_at(b, first_key, n);
	assert_int_equal(kvt_store(c, buf->index, b, (uint32_t)n), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(b[i].status, 0);
	cudaFree(ids);
}

/* LOADs keys first_key... into staging, restores them at dst_ids; statuses out. */
static void load_restore(struct kvt_client *c, const struct kvt_gpu_buffer *buf,
			 const struct cache *k, const int32_t *dst_ids, int n, uint64_t first_key,
			 int32_t *status)
{
	CUDA_OK(cudaMemset(buf->ptr, 0, buf->size));
	CUDA_OK(cudaDeviceSynchronize());
	struct kvt_block b[NB];
	blocks_at(b, first_key, n);
	assert_int_equal(kvt_load(c, buf->index, b, (uint32_t)n), 0);
	int32_t *ids = device_ids(dst_ids, n);
	assert_int_equal(kvt_kv_restore(&k->layout, buf->ptr, ids, (uint32_t)n, NULL), 0);
	CUDA_OK(cudaDeviceSynchronize());
	for (int i = 0; i < n; i++)
		status[i] = b[i].status;
	cudaFree(ids);
}

static const int32_t src_ids[NB] = {3, 7, 1, 30, 12, 13, 0, 21};
static const int32_t dst_ids[NB] = {20, 5, 11, 2, 31, 9, 17, 4};

/*
 * Gathers src_ids of a cache of seed into buf, STOREs them as keys
 * first_key.., LOADs them back and restores them into a zeroed cache at
 * dst_ids: every block arrives, byte for byte.
 */
static void exact_round_trip(struct kvt_client *c, const struct kvt_gpu_buffer *buf,
			     uint64_t seed, uint64_t first_key)
{
	struct cache src, dst;
	cache_init(&src, seed);
	cache_init(&dst, 0);
	gather_store(c, buf, &src, src_ids, NB, first_key);
	int32_t status[NB];
	load_restore(c, buf, &dst, dst_ids, NB, first_key, status);
	for (int i = 0; i < NB; i++)
		assert_int_equal(status[i], 0);
	assert_restored(&src, src_ids, &dst, dst_ids, NB);
	cache_free(&src);
	cache_free(&dst);
}

static void round_trip(int kind)
{
	struct daemon_fixture *d = start(gpu_flags);
	struct kvt_client *c = client(d, "gpu", BLOCK, 1, 0, 0, 1);
	struct kvt_gpu_buffer buf;
	int rc = kvt_gpu_buffer_create(c, 0, NB * BLOCK, kind, &buf);
	if (rc)
		fail_msg("kvt_gpu_buffer_create: %s", kvt_strerror(rc));
	assert_int_equal(daemon_stat(d, "gpu.mappings_open"), 1);
	exact_round_trip(c, &buf, 7, 1000);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_stored"), NB);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_loaded"), NB);
	assert_int_equal(daemon_stat(d, "dataplane.bytes_loaded"), (long long)NB * BLOCK);

	/* Unregistering closes the daemon's mapping. */
	assert_int_equal(kvt_gpu_buffer_destroy(c, &buf), 0);
	assert_int_equal(daemon_stat(d, "gpu.mappings_closed"), 1);
	assert_int_equal(daemon_stat(d, "gpu.mappings_open"), 0);
	kvt_client_close(c);
	stop(d);
}

static void test_round_trip_vmm(void **state)
{
	(void)state;
	round_trip(KVT_GPU_VMM);
}

static void test_round_trip_ipc(void **state)
{
	(void)state;
	round_trip(KVT_GPU_IPC);
}

/* A child process (no CUDA of its own) names the parent's buffer: -EPERM. */
static int foreign_load_status(struct daemon_fixture *d, uint32_t index)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct kvt_client_options o = {.socket_path = d->socket, .model = "gpu",
					       .block_bytes = BLOCK, .tp_size = 1};
		struct kvt_client *c;
		if (kvt_client_open(&o, &c))
			_exit(100);
		struct kvt_block b[1];
		blocks_at(b, 1000, 1);
		int rc = kvt_load(c, index, b, 1);
		kvt_client_close(c);
		_exit(rc == -EPERM ? 0 : 101);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_ownership_and_close_on_exit(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(gpu_flags);
	struct kvt_client *c = client(d, "gpu", BLOCK, 1, 0, 0, 1);
	struct kvt_gpu_buffer vmm, ipc;
	assert_int_equal(kvt_gpu_buffer_create(c, 0, NB * BLOCK, KVT_GPU_VMM, &vmm), 0);
	assert_int_equal(kvt_gpu_buffer_create(c, 0, NB * BLOCK, KVT_GPU_IPC, &ipc), 0);
	assert_int_equal(foreign_load_status(d, vmm.index), 0);
	assert_int_equal(foreign_load_status(d, ipc.index), 0);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.foreign_buffer"), 2);

	/* Out of the buffer's bounds: -ERANGE, nothing copied. */
	struct kvt_block b[1];
	blocks_at(b, 1, 1);
	b[0].offset = vmm.size - BLOCK / 2;
	assert_int_equal(kvt_store(c, vmm.index, b, 1), 0);
	assert_int_equal(b[0].status, -ERANGE);

	/* The client goes away: the daemon closes both mappings. */
	assert_int_equal(daemon_stat(d, "gpu.mappings_open"), 2);
	kvt_client_close(c);
	for (int i = 0; i < 500 && daemon_stat(d, "gpu.mappings_open") != 0; i++)
		sleep_ms(10);
	assert_int_equal(daemon_stat(d, "gpu.mappings_open"), 0);
	assert_int_equal(daemon_stat(d, "gpu.mappings_closed"), 2);
	kvt_gpu_buffer_destroy(NULL, &vmm);
	kvt_gpu_buffer_destroy(NULL, &ipc);
	stop(d);
}

/* Two registrations of one allocation share a mapping; one close keeps the other's. */
static void test_ipc_mapping_shared(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(gpu_flags);
	struct kvt_client *c = client(d, "gpu", BLOCK, 1, 0, 0, 1);
	uint8_t *mem;
	CUDA_OK(cudaMalloc((void **)&mem, 2 * NB * BLOCK));
	uint32_t first, second;
	assert_int_equal(kvt_buffer_register_cuda_ipc(c, mem, NB * BLOCK, &first), 0);
	assert_int_equal(kvt_buffer_register_cuda_ipc(c, mem + NB * BLOCK, NB * BLOCK, &second), 0);
	assert_int_equal(daemon_stat(d, "gpu.ipc_cache_hits"), 1);
	assert_int_equal(kvt_buffer_unregister(c, first), 0);

	/* The second registration (at an offset) still works, byte for byte. */
	struct kvt_gpu_buffer view = {.ptr = mem + NB * BLOCK, .size = NB * BLOCK, .index = second};
	exact_round_trip(c, &view, 9, 2000);
	assert_int_equal(kvt_buffer_unregister(c, second), 0);
	assert_int_equal(daemon_stat(d, "gpu.mappings_open"), 0);
	cudaFree(mem);
	kvt_client_close(c);
	stop(d);
}

/* Blocks evicted between STORE and LOAD come back missing; the rest exact. */
static void test_evicted_blocks_missing(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(gpu_flags);
	struct kvt_client *c = client(d, "gpu", BLOCK, 1, 0, 0, 1);
	struct kvt_gpu_buffer buf;
	assert_int_equal(kvt_gpu_buffer_create(c, 0, NB * BLOCK, KVT_GPU_VMM, &buf), 0);
	struct cache src, dst;
	cache_init(&src, 11);
	cache_init(&dst, 0);
	gather_store(c, &buf, &src, src_ids, NB, 3000);
	int status_code;
	json_t *r = daemon_request(d, "POST", "/v1/tiers/l1/evict", "{\"all\": true}", &status_code);
	assert_int_equal(status_code, 200);
	json_decref(r);
	gather_store(c, &buf, &src, src_ids, NB / 2, 3000); /* the first half again */
	int32_t status[NB];
	load_restore(c, &buf, &dst, dst_ids, NB, 3000, status);
	for (int i = 0; i < NB; i++)
		assert_int_equal(status[i], i < NB / 2 ? 0 : -ENOENT);
	assert_restored(&src, src_ids, &dst, dst_ids, NB / 2);
	assert_int_equal(daemon_stat(d, "dataplane.blocks_load_missing"), NB / 2);
	kvt_gpu_buffer_destroy(c, &buf);
	cache_free(&src);
	cache_free(&dst);
	kvt_client_close(c);
	stop(d);
}

/* The pipeline in GPU mode: split and grouped batches, restores at other ids, a failure kept to its request. */
static void test_pipeline_gpu(void **state)
{
	(void)state;
	struct daemon_fixture *d = start(gpu_flags);
	struct cache src, dst;
	cache_init(&src, 13);
	cache_init(&dst, 0);
	struct kvt_pipeline_options o = {
		.client = {.socket_path = d->socket, .model = "gpu-pl", .block_bytes = BLOCK,
			   .tp_size = 1},
		.gpu = 1, .depth = 2, .buffer_blocks = 3, .layout = src.layout};
	struct kvt_pipeline *p;
	assert_int_equal(kvt_pipeline_open(&o, &p), 0);
	struct kvt_key keys[NB + 1];
	for (int i = 0; i <= NB; i++)
		keys[i] = test_key(4000 + (uint64_t)i);
	struct kvt_transfer a = {.req_id = 1, .keys = keys, .block_ids = src_ids, .nblocks = NB};
	assert_int_equal(kvt_pipeline_submit_store(p, &a), 0);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	struct kvt_pipeline_result res[4];
	assert_int_equal(kvt_pipeline_finished(p, 0, res, 4), 1);
	assert_int_equal(res[0].status, 0);
	kvt_pipeline_close(p);

	o.layout = dst.layout;
	assert_int_equal(kvt_pipeline_open(&o, &p), 0);
	struct kvt_transfer la = {.req_id = 5, .keys = keys, .block_ids = dst_ids, .nblocks = NB};
	int32_t lost_id = 25;
	struct kvt_transfer lost = {.req_id = 6, .keys = &keys[NB], .block_ids = &lost_id,
				    .nblocks = 1};
	assert_int_equal(kvt_pipeline_submit_load(p, &la), 0);
	assert_int_equal(kvt_pipeline_submit_load(p, &lost), 0);
	assert_int_equal(kvt_pipeline_drain(p, 60000), 0);
	assert_int_equal(kvt_pipeline_finished(p, 1, res, 4), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(res[i].status, res[i].req_id == 5 ? 0 : -ENOENT);
		assert_int_equal(res[i].nfailed, res[i].req_id == 5 ? 0 : 1);
	}
	assert_restored(&src, src_ids, &dst, dst_ids, NB);
	uint8_t zero[CHUNK] = {0}, got[CHUNK];
	chunk_of(&dst, 0, 0, lost_id, got);
	assert_memory_equal(got, zero, CHUNK); /* the missing block left its cache block alone */
	kvt_pipeline_close(p);
	cache_free(&src);
	cache_free(&dst);
	stop(d);
}

int main(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("test_gpu: no GPU visible; skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_round_trip_vmm, teardown),
		cmocka_unit_test_teardown(test_round_trip_ipc, teardown),
		cmocka_unit_test_teardown(test_ownership_and_close_on_exit, teardown),
		cmocka_unit_test_teardown(test_ipc_mapping_shared, teardown),
		cmocka_unit_test_teardown(test_evicted_blocks_missing, teardown),
		cmocka_unit_test_teardown(test_pipeline_gpu, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
