/*
 * gpu_bench.c — kvtier-gpu-bench: the GPU path end to end against a running
 * kvtierd, beside the PCIe ceiling measured in the same run.
 *
 * The worker side of vLLM in miniature: a paged KV cache of a model's
 * geometry (per layer [2][num_blocks][block_tokens][kv_heads][head_dim]),
 * GPU staging buffers registered once (one per lane), and requests of
 * --tokens tokens. STORE: gather into staging, then the daemon's D2H into
 * pinned L1. LOAD: the daemon's H2D into staging, then restore into the
 * cache. Lanes pipeline batches: the LOAD of one lane's batch overlaps the
 * restore of another's. The ceiling is cudaMemcpyAsync of the same bytes, in
 * block-sized copies, between pinned host memory and the device.
 *
 * Prints one line per phase and a JSON summary line.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "bench_clock.h"
#include "bench_keys.h"
#include "cuda_ceiling.h"
#include "kvtier/kvtier.h"
#include "model_geometry.h"

#define CUDA_CHECK(call)                                                            \
	do {                                                                        \
		cudaError_t rc_ = (call);                                           \
		if (rc_ != cudaSuccess) {                                           \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, \
				cudaGetErrorString(rc_));                           \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

struct opts {
	const char *socket;
	struct model_geometry m;
	unsigned requests, lanes, batch_blocks, repeats;
	int kind;
};

struct geometry {
	uint64_t chunk, block;        /* bytes of one (layer, plane) and of one block */
	uint32_t blocks_per_request;
	uint32_t cache_blocks;
};

/* --- the ceiling: cudaMemcpyAsync from pinned host memory --- */

struct ceiling {
	double h2d, d2h, duplex; /* GB/s */
};

/* GB/s of time_block_copies; a failed CUDA call ends the benchmark. */
static double timed_copies(void *dst, void *src, uint64_t block, uint32_t n, enum cudaMemcpyKind k,
			   cudaStream_t s, unsigned repeats)
{
	double t = time_block_copies(dst, src, block, n, k, s, repeats);
	if (t < 0) {
		fprintf(stderr, "ceiling: %s\n", cudaGetErrorString(cudaGetLastError()));
		exit(1);
	}
	return (double)block * n * repeats / t / 1e9;
}

static struct ceiling measure_ceiling(const struct geometry *g, unsigned repeats)
{
	uint64_t bytes = g->block * g->blocks_per_request;
	void *host[2], *dev[2];
	cudaStream_t s[2];
	for (int i = 0; i < 2; i++) {
		CUDA_CHECK(cudaHostAlloc(&host[i], bytes, cudaHostAllocPortable));
		memset(host[i], i + 1, bytes);
		CUDA_CHECK(cudaMalloc(&dev[i], bytes));
		CUDA_CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
	}
	struct ceiling c;
	timed_copies(dev[0], host[0], g->block, g->blocks_per_request, cudaMemcpyHostToDevice, s[0], 1);
	c.h2d = timed_copies(dev[0], host[0], g->block, g->blocks_per_request,
			     cudaMemcpyHostToDevice, s[0], repeats);
	c.d2h = timed_copies(host[1], dev[1], g->block, g->blocks_per_request,
			     cudaMemcpyDeviceToHost, s[1], repeats);
	/* Both directions at once, on two streams. */
	double t0 = now_s();
	for (unsigned r = 0; r < repeats; r++)
		for (uint32_t i = 0; i < g->blocks_per_request; i++) {
			CUDA_CHECK(cudaMemcpyAsync((char *)dev[0] + i * g->block,
						   (char *)host[0] + i * g->block, g->block,
						   cudaMemcpyHostToDevice, s[0]));
			CUDA_CHECK(cudaMemcpyAsync((char *)host[1] + i * g->block,
						   (char *)dev[1] + i * g->block, g->block,
						   cudaMemcpyDeviceToHost, s[1]));
		}
	CUDA_CHECK(cudaStreamSynchronize(s[0]));
	CUDA_CHECK(cudaStreamSynchronize(s[1]));
	c.duplex = 2.0 * (double)bytes * repeats / (now_s() - t0) / 1e9;
	for (int i = 0; i < 2; i++) {
		cudaFreeHost(host[i]);
		cudaFree(dev[i]);
		cudaStreamDestroy(s[i]);
	}
	return c;
}

/* --- the worker --- */

struct lane {
	struct kvt_gpu_buffer buf;
	cudaStream_t stream;
	int32_t *ids_dev;           /* batch_blocks block ids */
	struct kvt_block *blocks;
	uint64_t req_id;
	uint32_t n;                 /* blocks of the batch in flight */
	int busy;
};

struct worker {
	const struct opts *o;
	const struct geometry *g;
	struct kvt_client *c;
	struct kvt_kv_layout layout;
	struct lane *lanes;
	uint64_t key_base;          /* requests use keys key_base + r * blocks_per_request + i */
	uint64_t failed_blocks;
	double seconds;
};

static void worker_open(struct worker *w, const struct opts *o, const struct geometry *g,
			void *const *layer_bases_dev)
{
	struct kvt_client_options co = {.socket_path = o->socket, .model = "bench-gpu",
					.block_bytes = g->block, .tp_size = 1, .lanes = o->lanes};
	int rc = kvt_client_open(&co, &w->c);
	if (rc) {
		fprintf(stderr, "kvt_client_open %s: %s\n", o->socket, kvt_strerror(rc));
		exit(1);
	}
	w->o = o;
	w->g = g;
	w->layout = (struct kvt_kv_layout){.num_layers = o->m.layers, .planes = 2,
					   .chunk_bytes = g->chunk,
					   .plane_stride = (uint64_t)g->cache_blocks * g->chunk,
					   .block_stride = g->chunk, .layer_bases = layer_bases_dev};
	w->lanes = calloc(o->lanes, sizeof(*w->lanes));
	for (unsigned i = 0; i < o->lanes; i++) {
		struct lane *l = &w->lanes[i];
		rc = kvt_gpu_buffer_create(w->c, 0, g->block * o->batch_blocks, o->kind, &l->buf);
		if (rc) {
			fprintf(stderr, "kvt_gpu_buffer_create: %s\n", kvt_strerror(rc));
			exit(1);
		}
		CUDA_CHECK(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
		CUDA_CHECK(cudaMalloc((void **)&l->ids_dev, o->batch_blocks * sizeof(int32_t)));
		l->blocks = calloc(o->batch_blocks, sizeof(*l->blocks));
	}
}

static void worker_close(struct worker *w)
{
	for (unsigned i = 0; i < w->o->lanes; i++) {
		kvt_gpu_buffer_destroy(w->c, &w->lanes[i].buf);
		cudaStreamDestroy(w->lanes[i].stream);
		cudaFree(w->lanes[i].ids_dev);
		free(w->lanes[i].blocks);
	}
	free(w->lanes);
	kvt_client_close(w->c);
}

/* Block ids of batch blocks: spread over the cache, not contiguous. */
static void set_ids(struct worker *w, struct lane *l, uint32_t first, uint32_t n)
{
	int32_t ids[4096];
	for (uint32_t i = 0; i < n; i++)
		ids[i] = (int32_t)(((first + i) * 7u) % w->g->cache_blocks);
	CUDA_CHECK(cudaMemcpyAsync(l->ids_dev, ids, n * sizeof(int32_t), cudaMemcpyHostToDevice,
				   l->stream));
}

static void set_blocks(struct worker *w, struct lane *l, uint64_t first_key, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		l->blocks[i] = (struct kvt_block){.key = key_of(first_key + i),
						  .offset = (uint64_t)i * w->g->block,
						  .length = (uint32_t)w->g->block};
	l->n = n;
}

/* Waits for the lane's request; a LOAD's batch is then restored into the cache. */
static void lane_finish(struct worker *w, unsigned li, int load)
{
	struct lane *l = &w->lanes[li];
	if (!l->busy)
		return;
	int rc = kvt_wait(w->c, li, l->req_id, -1);
	if (rc) {
		fprintf(stderr, "request failed: %s\n", kvt_strerror(rc));
		exit(1);
	}
	for (uint32_t i = 0; i < l->n; i++)
		if (l->blocks[i].status)
			w->failed_blocks++;
	if (load) {
		if (kvt_kv_restore(&w->layout, l->buf.ptr, l->ids_dev, l->n, l->stream)) {
			fprintf(stderr, "restore failed\n");
			exit(1);
		}
	}
	l->busy = 0;
}

/* Runs every request's batches through the lanes; load or store. */
static void run_pass(struct worker *w, int load)
{
	const struct opts *o = w->o;
	const struct geometry *g = w->g;
	unsigned next = 0;
	double t0 = now_s();
	for (unsigned r = 0; r < o->requests; r++) {
		for (uint32_t b = 0; b < g->blocks_per_request; b += o->batch_blocks) {
			uint32_t n = g->blocks_per_request - b < o->batch_blocks
					     ? g->blocks_per_request - b
					     : o->batch_blocks;
			unsigned li = next++ % o->lanes;
			struct lane *l = &w->lanes[li];
			lane_finish(w, li, load);
			/* The lane's staging is free once its restore (or gather) ran. */
			set_ids(w, l, b, n);
			if (!load)
				kvt_kv_gather(&w->layout, l->buf.ptr, l->ids_dev, n, l->stream);
			CUDA_CHECK(cudaStreamSynchronize(l->stream));
			set_blocks(w, l, w->key_base + (uint64_t)r * g->blocks_per_request + b, n);
			int rc = load ? kvt_submit_load(w->c, li, l->buf.index, l->blocks, n, &l->req_id)
				      : kvt_submit_store(w->c, li, l->buf.index, l->blocks, n,
							 &l->req_id);
			if (rc) {
				fprintf(stderr, "submit: %s\n", kvt_strerror(rc));
				exit(1);
			}
			l->busy = 1;
		}
	}
	for (unsigned li = 0; li < o->lanes; li++) {
		lane_finish(w, li, load);
		CUDA_CHECK(cudaStreamSynchronize(w->lanes[li].stream));
	}
	w->seconds = now_s() - t0;
}

struct duplex_arg {
	struct worker *w;
	int load;
};

static void *duplex_thread(void *arg)
{
	struct duplex_arg *a = arg;
	CUDA_CHECK(cudaSetDevice(0));
	run_pass(a->w, a->load);
	return NULL;
}

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: kvtier-gpu-bench --socket PATH " MODEL_GEOMETRY_USAGE "\n"
		"       [--requests 8] [--lanes 4] [--batch-blocks 16] [--kind vmm|ipc] [--repeats 3]\n");
	exit(rc);
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.m = MODEL_GEOMETRY_DEFAULTS, .requests = 8, .lanes = 4,
			   .batch_blocks = 16, .repeats = 3, .kind = KVT_GPU_VMM};
	static const struct option lo[] = {
		{"socket", 1, 0, 's'}, MODEL_GEOMETRY_OPTIONS, {"requests", 1, 0, 'r'},
		{"lanes", 1, 0, 'l'}, {"batch-blocks", 1, 0, 'n'}, {"kind", 1, 0, 'k'},
		{"repeats", 1, 0, 'R'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned v = optarg ? (unsigned)strtoul(optarg, NULL, 10) : 0;
		if (model_geometry_option(&o->m, c, optarg))
			continue;
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'r': o->requests = v; break;
		case 'l': o->lanes = v; break;
		case 'n': o->batch_blocks = v; break;
		case 'R': o->repeats = v; break;
		case 'k': o->kind = strcmp(optarg, "ipc") == 0 ? KVT_GPU_IPC : KVT_GPU_VMM; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (!o->socket || !model_geometry_valid(&o->m) || !o->requests || !o->lanes || o->lanes > 64 || !o->batch_blocks ||
	    o->batch_blocks > 4096 || !o->repeats)
		usage(2);
}

static void report(const char *phase, double seconds, uint64_t bytes, unsigned requests,
		   double ceiling)
{
	double gbs = (double)bytes / seconds / 1e9;
	printf("%-14s %8.2f GB/s  %8.2f ms/request  ratio %.3f of %.2f GB/s\n", phase, gbs,
	       seconds * 1e3 / requests, gbs / ceiling, ceiling);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	CUDA_CHECK(cudaSetDevice(0));
	struct geometry g;
	g.chunk = model_chunk_bytes(&o.m);
	g.block = model_block_bytes(&o.m);
	g.blocks_per_request = model_blocks_per_request(&o.m);
	g.cache_blocks = g.blocks_per_request + 1;
	uint64_t request_bytes = g.block * g.blocks_per_request;
	printf("geometry: %u layers, block %u tokens = %llu B, %u blocks per request = %llu B, "
	       "%u requests, %u lanes x %u blocks of staging, kind %s\n",
	       o.m.layers, o.m.block_tokens, (unsigned long long)g.block, g.blocks_per_request,
	       (unsigned long long)request_bytes, o.requests, o.lanes, o.batch_blocks,
	       o.kind == KVT_GPU_VMM ? "cuda_vmm" : "cuda_ipc");

	struct ceiling ceil = measure_ceiling(&g, o.repeats);
	printf("ceiling: cudaMemcpyAsync pinned H2D %.2f GB/s, D2H %.2f GB/s, both at once %.2f GB/s\n",
	       ceil.h2d, ceil.d2h, ceil.duplex);

	/* The KV cache: random-ish bytes, one tensor per layer. */
	void **bases = calloc(o.m.layers, sizeof(*bases));
	uint64_t layer_bytes = 2 * (uint64_t)g.cache_blocks * g.chunk;
	for (unsigned l = 0; l < o.m.layers; l++) {
		CUDA_CHECK(cudaMalloc(&bases[l], layer_bytes));
		CUDA_CHECK(cudaMemset(bases[l], (int)(l * 37 + 1), layer_bytes));
	}
	void **bases_dev;
	CUDA_CHECK(cudaMalloc((void **)&bases_dev, o.m.layers * sizeof(void *)));
	CUDA_CHECK(cudaMemcpy(bases_dev, bases, o.m.layers * sizeof(void *), cudaMemcpyHostToDevice));

	struct worker w = {0}, w2 = {0};
	worker_open(&w, &o, &g, bases_dev);
	uint64_t total = request_bytes * o.requests;

	run_pass(&w, 0);
	report("store", w.seconds, total, o.requests, ceil.d2h);
	double store_s = w.seconds;
	run_pass(&w, 1);
	report("load", w.seconds, total, o.requests, ceil.h2d);
	double load_s = w.seconds;

	/* Both at once: one worker loads what was stored while another stores new keys. */
	worker_open(&w2, &o, &g, bases_dev);
	w2.key_base = (uint64_t)o.requests * g.blocks_per_request;
	struct duplex_arg la = {&w, 1}, sa = {&w2, 0};
	pthread_t lt, st;
	double t0 = now_s();
	pthread_create(&lt, NULL, duplex_thread, &la);
	pthread_create(&st, NULL, duplex_thread, &sa);
	pthread_join(lt, NULL);
	pthread_join(st, NULL);
	double both_s = now_s() - t0;
	report("load+store", both_s, 2 * total, o.requests, ceil.duplex);
	uint64_t failed = w.failed_blocks + w2.failed_blocks;

	printf("{\"block_bytes\":%llu,\"blocks_per_request\":%u,\"requests\":%u,\"lanes\":%u,"
	       "\"batch_blocks\":%u,\"kind\":\"%s\",\"ceiling_h2d_gbs\":%.2f,\"ceiling_d2h_gbs\":%.2f,"
	       "\"ceiling_duplex_gbs\":%.2f,\"store_gbs\":%.2f,\"load_gbs\":%.2f,\"both_gbs\":%.2f,"
	       "\"store_ms_per_request\":%.2f,\"load_ms_per_request\":%.2f,\"store_ratio\":%.3f,"
	       "\"load_ratio\":%.3f,\"both_ratio\":%.3f,\"failed_blocks\":%llu}\n",
	       (unsigned long long)g.block, g.blocks_per_request, o.requests, o.lanes,
	       o.batch_blocks, o.kind == KVT_GPU_VMM ? "cuda_vmm" : "cuda_ipc", ceil.h2d, ceil.d2h,
	       ceil.duplex, total / store_s / 1e9, total / load_s / 1e9, 2 * total / both_s / 1e9,
	       store_s * 1e3 / o.requests, load_s * 1e3 / o.requests,
	       total / store_s / 1e9 / ceil.d2h, total / load_s / 1e9 / ceil.h2d,
	       2 * total / both_s / 1e9 / ceil.duplex, (unsigned long long)failed);
	worker_close(&w2);
	worker_close(&w);
	for (unsigned l = 0; l < o.m.layers; l++)
		cudaFree(bases[l]);
	cudaFree(bases_dev);
	free(bases);
	return failed ? 1 : 0;
}
