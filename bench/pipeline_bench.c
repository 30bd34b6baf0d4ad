/*
 * pipeline_bench.c — kvtier-pipeline-bench: the reference PR's workload at
 * the KV-transfer level, through libkvtier's pipeline against a running
 * kvtierd.
 *
 * N requests of --tokens tokens (a paged KV cache of the model's geometry,
 * per layer [2][num_blocks][block_tokens][kv_heads][head_dim]); a cold pass
 * stores every request, then a warm pass loads every request, both with
 * --concurrency requests outstanding (a new one starts when one finishes),
 * then a warm pass at concurrency 1. --store-gbs paces the cold pass like
 * a prefill would (so that in evict mode L2 can take the victims);
 * --after-cold runs a shell command between the passes (pipeline.sh waits
 * there for the daemon's writer to drain). Each in-flight request slot owns
 * its own range of cache blocks. Reports per-request warm load time (mean, p50,
 * p99), aggregate GB/s of the bytes moved (failed blocks do not count)
 * and the ratio to the ceiling measured in the same
 * run: cudaMemcpyAsync H2D from pinned memory (--gpu) or one-thread memcpy
 * (host mode), both in block-sized copies. Ends with a JSON line.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "bench_keys.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_ceiling.h"
#endif
#include "kvtier/pipeline.h"
#include "model_geometry.h"

struct opts {
	const char *socket;
	int gpu;
	struct model_geometry m;
	unsigned requests, concurrency, depth, buffer_blocks, max_inflight;
	double store_gbs;             /* > 0: the cold pass submits no faster (a prefill's pace) */
	const char *after_cold;       /* a shell command run between the cold and warm passes */
};

static void die(const char *what, int err)
{
	fprintf(stderr, "kvtier-pipeline-bench: %s: %s\n", what, kvt_strerror(err));
	exit(1);
}

/* --- memory, host or device --- */

static void *mem_alloc(int gpu, size_t n)
{
	void *p = NULL;
#ifdef HAVE_CUDA
	if (gpu) {
		if (cudaMalloc(&p, n) != cudaSuccess)
			die("cudaMalloc", -ENOMEM);
		cudaMemset(p, 0x5a, n);
		return p;
	}
#endif
	(void)gpu;
	p = malloc(n);
	if (!p)
		die("malloc", -ENOMEM);
	memset(p, 0x5a, n);
	return p;
}

static void *copy_to(int gpu, const void *src, size_t n)
{
	void *p = mem_alloc(gpu, n);
#ifdef HAVE_CUDA
	if (gpu) {
		cudaMemcpy(p, src, n, cudaMemcpyHostToDevice);
		return p;
	}
#endif
	memcpy(p, src, n);
	return p;
}

static void mem_free(int gpu, void *p)
{
#ifdef HAVE_CUDA
	if (gpu) {
		cudaFree(p);
		return;
	}
#endif
	(void)gpu;
	free(p);
}

/* The ceiling, in block-sized copies of one request's bytes. */
static double ceiling_gbs(int gpu, uint64_t block, uint32_t nblocks)
{
	uint64_t bytes = block * nblocks;
	const int repeats = 3;
	double t0 = now_s(), t;
#ifdef HAVE_CUDA
	if (gpu) {
		void *host, *dev;
		cudaStream_t s;
		if (cudaHostAlloc(&host, bytes, cudaHostAllocPortable) != cudaSuccess ||
		    cudaMalloc(&dev, bytes) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
			die("ceiling buffers", -ENOMEM);
		memset(host, 1, bytes);
		time_block_copies(dev, host, block, nblocks, cudaMemcpyHostToDevice, s, 1); /* warm */
		t = time_block_copies(dev, host, block, nblocks, cudaMemcpyHostToDevice, s, repeats);
		if (t < 0)
			die("ceiling copies", -EIO);
		cudaFreeHost(host);
		cudaFree(dev);
		cudaStreamDestroy(s);
		return (double)bytes * repeats / t / 1e9;
	}
#endif
	(void)gpu;
	char *a = mem_alloc(0, bytes), *b = mem_alloc(0, bytes);
	for (int r = -1; r < repeats; r++) {
		if (r == 0)
			t0 = now_s();
		for (uint32_t i = 0; i < nblocks; i++)
			memcpy(b + i * block, a + i * block, block);
	}
	t = now_s() - t0;
	free(a);
	free(b);
	return (double)bytes * repeats / t / 1e9;
}

/* --- the workload --- */

struct workload {
	const struct opts *o;
	struct kvt_pipeline *p;
	uint32_t bpr;                /* blocks per request */
	uint64_t request_bytes;
	struct kvt_key *keys;        /* requests x bpr */
	int32_t *ids;                /* concurrency x bpr: each slot's cache blocks */
	double *latency_ms;
	uint64_t failed_blocks;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct pass_result {
	double seconds, mean_ms, p50_ms, p99_ms;
	uint64_t bytes;              /* moved: blocks that failed are not counted */
};

static uint64_t bytes_moved(struct kvt_pipeline *p, int load)
{
	struct kvt_pipeline_stats st;
	kvt_pipeline_stats(p, &st);
	return load ? st.bytes_loaded : st.bytes_stored;
}

/* Runs every request once (load or store), concurrency outstanding at a time. */
static void wait_until(double t)
{
	double d = t - now_s();
	if (d <= 0)
		return;
	struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
	nanosleep(&ts, NULL);
}

static struct pass_result run_pass(struct workload *w, int load, unsigned concurrency)
{
	const struct opts *o = w->o;
	double *started = calloc(o->requests, sizeof(*started));
	unsigned *slot_of = calloc(o->requests, sizeof(*slot_of));
	unsigned *free_slots = calloc(concurrency, sizeof(*free_slots));
	unsigned nfree = concurrency, next = 0, done = 0;
	uint64_t bytes0 = bytes_moved(w->p, load);
	for (unsigned s = 0; s < concurrency; s++)
		free_slots[s] = concurrency - 1 - s;
	double t0 = now_s();
	while (done < o->requests) {
		while (nfree && next < o->requests) {
			unsigned slot = free_slots[--nfree];
			struct kvt_transfer t = {.req_id = next, .keys = w->keys + (size_t)next * w->bpr,
						 .block_ids = w->ids + (size_t)slot * w->bpr,
						 .nblocks = w->bpr};
			slot_of[next] = slot;
			if (!load && o->store_gbs > 0)
				wait_until(t0 + (double)next * w->request_bytes / (o->store_gbs * 1e9));
			started[next] = now_s();
			int err = load ? kvt_pipeline_submit_load(w->p, &t)
				       : kvt_pipeline_submit_store(w->p, &t);
			if (err)
				die("submit", err);
			next++;
		}
		if (kvt_pipeline_wait_finished(w->p, load, 600000))
			die("waiting for requests", -ETIMEDOUT);
		struct kvt_pipeline_result res[64];
		int n = kvt_pipeline_finished(w->p, load, res, 64);
		double t = now_s();
		for (int i = 0; i < n; i++) {
			w->latency_ms[done++] = (t - started[res[i].req_id]) * 1e3;
			w->failed_blocks += res[i].nfailed;
			free_slots[nfree++] = slot_of[res[i].req_id];
		}
	}
	struct pass_result r = {.seconds = now_s() - t0, .bytes = bytes_moved(w->p, load) - bytes0};
	qsort(w->latency_ms, o->requests, sizeof(double), cmp_double);
	for (unsigned i = 0; i < o->requests; i++)
		r.mean_ms += w->latency_ms[i] / o->requests;
	r.p50_ms = w->latency_ms[o->requests / 2];
	r.p99_ms = w->latency_ms[(o->requests * 99) / 100 < o->requests ? (o->requests * 99) / 100
									  : o->requests - 1];
	free(started);
	free(slot_of);
	free(free_slots);
	return r;
}

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: kvtier-pipeline-bench --socket PATH [--gpu] " MODEL_GEOMETRY_USAGE "\n"
		"       [--requests 200] [--concurrency 8] [--depth 4] [--buffer-blocks 16]\n"
		"       [--max-inflight CONCURRENCY] [--store-gbs GB/S] [--after-cold CMD]\n");
	exit(rc);
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.m = MODEL_GEOMETRY_DEFAULTS, .requests = 200, .concurrency = 8,
			   .depth = 4, .buffer_blocks = 16};
	static const struct option lo[] = {
		{"socket", 1, 0, 's'}, {"gpu", 0, 0, 'g'}, MODEL_GEOMETRY_OPTIONS,
		{"requests", 1, 0, 'r'}, {"concurrency", 1, 0, 'c'}, {"depth", 1, 0, 'd'},
		{"buffer-blocks", 1, 0, 'n'}, {"max-inflight", 1, 0, 'm'},
		{"store-gbs", 1, 0, 'S'}, {"after-cold", 1, 0, 'A'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned v = optarg ? (unsigned)strtoul(optarg, NULL, 10) : 0;
		if (model_geometry_option(&o->m, c, optarg))
			continue;
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'g': o->gpu = 1; break;
		case 'r': o->requests = v; break;
		case 'c': o->concurrency = v; break;
		case 'd': o->depth = v; break;
		case 'n': o->buffer_blocks = v; break;
		case 'm': o->max_inflight = v; break;
		case 'S': o->store_gbs = strtod(optarg, NULL); break;
		case 'A': o->after_cold = optarg; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (!o->socket || !model_geometry_valid(&o->m) || !o->requests || !o->concurrency || o->concurrency > o->requests || o->depth < 2)
		usage(2);
	if (!o->max_inflight)
		o->max_inflight = o->concurrency;
}

static double gbs(const struct pass_result *r)
{
	return (double)r->bytes / r->seconds / 1e9;
}

static void report(const char *name, const struct pass_result *r, double ceiling)
{
	double gbs_ = gbs(r);
	printf("%-22s %7.2f GB/s (%.3f of ceiling)  per request: mean %.2f ms, p50 %.2f ms, "
	       "p99 %.2f ms\n", name, gbs_, gbs_ / ceiling, r->mean_ms, r->p50_ms, r->p99_ms);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
#ifdef HAVE_CUDA
	if (o.gpu && cudaSetDevice(0) != cudaSuccess)
		die("cudaSetDevice", -KVT_ENOCUDA);
#else
	if (o.gpu)
		die("--gpu", -KVT_ENOCUDA);
#endif
	uint64_t chunk = model_chunk_bytes(&o.m);
	struct workload w = {.o = &o, .bpr = model_blocks_per_request(&o.m)};
	uint64_t block = model_block_bytes(&o.m), request_bytes = block * w.bpr;
	w.request_bytes = request_bytes;
	uint32_t cache_blocks = w.bpr * o.concurrency;
	double ceiling = ceiling_gbs(o.gpu, block, w.bpr);
	printf("geometry: %u layers, %u-token blocks of %llu B, %u blocks (%llu B) per request, "
	       "%u requests, concurrency %u, %s staging %u x %u blocks; ceiling %.2f GB/s (%s)\n",
	       o.m.layers, o.m.block_tokens, (unsigned long long)block, w.bpr,
	       (unsigned long long)request_bytes, o.requests, o.concurrency, o.gpu ? "GPU" : "shm",
	       o.depth, o.buffer_blocks, ceiling,
	       o.gpu ? "cudaMemcpyAsync H2D from pinned memory" : "one-thread memcpy");

	void **layers = calloc(o.m.layers, sizeof(*layers));
	for (unsigned l = 0; l < o.m.layers; l++)
		layers[l] = mem_alloc(o.gpu, 2 * (size_t)cache_blocks * chunk);
	void **bases = copy_to(o.gpu, layers, o.m.layers * sizeof(void *));
	struct kvt_pipeline_options po = {
		.client = {.socket_path = o.socket, .model = "pipeline-bench", .block_bytes = block,
			   .tp_size = 1},
		.gpu = o.gpu, .depth = o.depth, .buffer_blocks = o.buffer_blocks,
		.max_inflight = o.max_inflight,
		.layout = {.num_layers = o.m.layers, .planes = 2, .chunk_bytes = chunk,
			   .plane_stride = (uint64_t)cache_blocks * chunk, .block_stride = chunk,
			   .layer_bases = bases}};
	int err = kvt_pipeline_open(&po, &w.p);
	if (err)
		die("kvt_pipeline_open", err);
	w.keys = calloc((size_t)o.requests * w.bpr, sizeof(*w.keys));
	w.ids = calloc((size_t)cache_blocks, sizeof(*w.ids));
	w.latency_ms = calloc(o.requests, sizeof(double));
	for (unsigned r = 0; r < o.requests; r++)
		for (uint32_t i = 0; i < w.bpr; i++)
			w.keys[(size_t)r * w.bpr + i] = key_of(((uint64_t)r << 32) | i);
	for (uint32_t i = 0; i < cache_blocks; i++)
		w.ids[i] = (int32_t)((i * 7u) % cache_blocks); /* scattered, not contiguous */

	struct pass_result cold = run_pass(&w, 0, o.concurrency);
	report("cold store", &cold, ceiling);
	uint64_t store_failed = w.failed_blocks;
	w.failed_blocks = 0;
	fflush(stdout);
	if (o.after_cold && system(o.after_cold) != 0)
		die("--after-cold", -ECANCELED);
	struct pass_result warm = run_pass(&w, 1, o.concurrency);
	char name[64];
	snprintf(name, sizeof(name), "warm load, c%u", o.concurrency);
	report(name, &warm, ceiling);
	struct pass_result one = run_pass(&w, 1, 1);
	report("warm load, c1", &one, ceiling);
	double ideal_ms = (double)request_bytes / ceiling / 1e6;
	printf("one request at the ceiling: %.2f ms; c1 p50 is %.3f of it (goal: <= 1.15)\n",
	       ideal_ms, one.p50_ms / ideal_ms);
	printf("{\"block_bytes\":%llu,\"blocks_per_request\":%u,\"requests\":%u,\"concurrency\":%u,"
	       "\"mode\":\"%s\",\"ceiling_gbs\":%.2f,\"store_gbs\":%.2f,\"load_gbs\":%.2f,"
	       "\"load_ratio\":%.3f,\"load_mean_ms\":%.2f,\"load_p50_ms\":%.2f,\"load_p99_ms\":%.2f,"
	       "\"c1_gbs\":%.2f,\"c1_mean_ms\":%.2f,\"c1_p50_ms\":%.2f,\"c1_p99_ms\":%.2f,"
	       "\"ideal_ms\":%.2f,\"c1_p50_over_ideal\":%.3f,\"store_failed_blocks\":%llu,"
	       "\"load_failed_blocks\":%llu}\n",
	       (unsigned long long)block, w.bpr, o.requests, o.concurrency, o.gpu ? "gpu" : "host",
	       ceiling, gbs(&cold), gbs(&warm), gbs(&warm) / ceiling, warm.mean_ms, warm.p50_ms,
	       warm.p99_ms, gbs(&one), one.mean_ms, one.p50_ms, one.p99_ms, ideal_ms,
	       one.p50_ms / ideal_ms, (unsigned long long)store_failed,
	       (unsigned long long)w.failed_blocks);
	kvt_pipeline_close(w.p);
	for (unsigned l = 0; l < o.m.layers; l++)
		mem_free(o.gpu, layers[l]);
	mem_free(o.gpu, bases);
	free(layers);
	free(w.keys);
	free(w.ids);
	free(w.latency_ms);
	return 0;
}
