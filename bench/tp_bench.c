/*
 * tp_bench.c — kvtier-tp-bench: tensor-parallel ranks against one kvtierd,
 * as vLLM runs them: one worker process per rank, each with its own CUDA
 * context on its GPU (rank % devices) and its own GPU staging buffers, and
 * one scheduler connection that looks up prefixes for all ranks at once.
 *
 * Checks, then measures:
 *   - every rank but the last stores its parts of the prefixes: the
 *     scheduler's LOOKUP reports no hit; the last rank stores: all hit;
 *   - every rank loads its parts back (all ranks at once) and each gets
 *     exactly its own bytes (the content derives from key and rank);
 *   - aggregate load GB/s of all ranks at once, against the ceiling
 *     measured the same way in the same run: every rank at once doing
 *     cudaMemcpyAsync H2D from pinned memory (the sum of the per-GPU
 *     ceilings; on one GPU, the ranks share its one ceiling).
 * Exits non-zero when a check fails. The parent forks the ranks before it
 * touches CUDA; ranks and parent step together through pipes.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bench_clock.h"
#include "bench_keys.h"
#include "cuda_ceiling.h"
#include "kvtier/kvtier.h"

#define MAX_RANKS 16
#define LANES 2

struct opts {
	const char *socket;
	unsigned ranks, devices, requests, blocks_per_request, repeats;
	uint64_t block_bytes;         /* of the whole block; a rank holds 1/ranks of it */
	int kind;
};

struct rank_report {                  /* what a rank sends back after each phase */
	int ok;
	double ceiling_s, load_s;
	uint64_t bytes;
};

static struct kvt_key tp_key(unsigned req, uint32_t i)
{
	return key_of(((uint64_t)req << 32) | i);
}

/* The bytes of rank's part of block i of request req. */
static void part_fill(uint8_t *p, uint64_t len, unsigned req, uint32_t i, unsigned rank)
{
	uint64_t x = ((uint64_t)req << 40) ^ ((uint64_t)i << 20) ^ rank ^ 0x9e3779b97f4a7c15u;
	for (uint64_t o = 0; o < len; o += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + o, &x, len - o < 8 ? len - o : 8);
	}
}

/* --- pipes between parent and ranks --- */

struct channel {
	int to_rank[2], to_parent[2];
};

static void send_step(int fd, char step)
{
	if (write(fd, &step, 1) != 1)
		_exit(90);
}

static char recv_step(int fd)
{
	char c = 0;
	return read(fd, &c, 1) == 1 ? c : 0;
}

/* --- a rank --- */

struct rank {
	const struct opts *o;
	unsigned r;
	uint64_t part;                /* bytes of this rank's part of a block */
	struct kvt_client *c;
	struct kvt_gpu_buffer buf[LANES];
	uint32_t blocks_per_lane;
	struct kvt_block *blocks[LANES];
	uint8_t *host;                /* pinned: one lane's worth */
};

static void rank_set_blocks(struct rank *k, unsigned lane, unsigned req)
{
	for (uint32_t j = 0; j < k->blocks_per_lane; j++) {
		uint32_t i = lane * k->blocks_per_lane + j;
		k->blocks[lane][j] = (struct kvt_block){.key = tp_key(req, i),
							.offset = (uint64_t)j * k->part,
							.length = (uint32_t)k->part};
	}
}

static int rank_store(struct rank *k)
{
	for (unsigned req = 0; req < k->o->requests; req++)
		for (unsigned lane = 0; lane < LANES; lane++) {
			for (uint32_t j = 0; j < k->blocks_per_lane; j++)
				part_fill(k->host + j * k->part, k->part, req,
					  lane * k->blocks_per_lane + j, k->r);
			if (cudaMemcpy(k->buf[lane].ptr, k->host, k->part * k->blocks_per_lane,
				       cudaMemcpyHostToDevice) != cudaSuccess)
				return 0;
			rank_set_blocks(k, lane, req);
			if (kvt_store(k->c, k->buf[lane].index, k->blocks[lane], k->blocks_per_lane))
				return 0;
			for (uint32_t j = 0; j < k->blocks_per_lane; j++)
				if (k->blocks[lane][j].status)
					return 0;
		}
	return 1;
}

/* Loads every request (both lanes at once); verify: compare each part. */
static int rank_load(struct rank *k, int verify, uint64_t *bytes)
{
	uint8_t *want = verify ? malloc(k->part) : NULL;
	int ok = 1;
	for (unsigned req = 0; req < k->o->requests && ok; req++) {
		uint64_t id[LANES];
		for (unsigned lane = 0; lane < LANES; lane++) {
			rank_set_blocks(k, lane, req);
			if (kvt_submit_load(k->c, lane, k->buf[lane].index, k->blocks[lane],
					    k->blocks_per_lane, &id[lane]))
				ok = 0;
		}
		for (unsigned lane = 0; lane < LANES && ok; lane++) {
			if (kvt_wait(k->c, lane, id[lane], -1))
				ok = 0;
			for (uint32_t j = 0; ok && j < k->blocks_per_lane; j++)
				if (k->blocks[lane][j].status || k->blocks[lane][j].length != k->part)
					ok = 0;
			*bytes += (uint64_t)k->part * k->blocks_per_lane;
			if (!verify || !ok)
				continue;
			cudaMemcpy(k->host, k->buf[lane].ptr, k->part * k->blocks_per_lane,
				   cudaMemcpyDeviceToHost);
			for (uint32_t j = 0; j < k->blocks_per_lane && ok; j++) {
				part_fill(want, k->part, req, lane * k->blocks_per_lane + j, k->r);
				ok = memcmp(want, k->host + j * k->part, k->part) == 0;
			}
		}
	}
	free(want);
	return ok;
}

/* This rank's share of the ceiling: block-sized H2D copies from pinned memory. */
static double rank_ceiling(struct rank *k)
{
	void *dev;
	if (cudaMalloc(&dev, k->part * k->blocks_per_lane) != cudaSuccess)
		return -1;
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	double t = time_block_copies(dev, k->host, k->part, k->blocks_per_lane,
				     cudaMemcpyHostToDevice, s, k->o->repeats * k->o->requests * LANES);
	cudaStreamDestroy(s);
	cudaFree(dev);
	return t;
}

static int rank_open(struct rank *k)
{
	const struct opts *o = k->o;
	if (cudaSetDevice((int)(k->r % o->devices)) != cudaSuccess)
		return 0;
	struct kvt_client_options co = {.socket_path = o->socket, .model = "tp-bench",
					.block_bytes = k->part, .tp_size = (uint16_t)o->ranks,
					.rank = (uint16_t)k->r, .lanes = LANES};
	if (kvt_client_open(&co, &k->c))
		return 0;
	k->blocks_per_lane = o->blocks_per_request / LANES;
	for (unsigned lane = 0; lane < LANES; lane++) {
		k->blocks[lane] = calloc(k->blocks_per_lane, sizeof(struct kvt_block));
		if (kvt_gpu_buffer_create(k->c, (int)(k->r % o->devices),
					  k->part * k->blocks_per_lane, o->kind, &k->buf[lane]))
			return 0;
	}
	return cudaHostAlloc((void **)&k->host, k->part * k->blocks_per_lane,
			     cudaHostAllocPortable) == cudaSuccess;
}

/* The rank's life: steps on the parent's word, a report after each. */
static int rank_main(const struct opts *o, unsigned r, struct channel *ch)
{
	struct rank k = {.o = o, .r = r, .part = o->block_bytes / o->ranks};
	struct rank_report rep = {.ok = rank_open(&k)};
	char step;
	while ((step = recv_step(ch->to_rank[0])) != 'q') {
		double t0 = now_s();
		rep.bytes = 0;
		if (step == 's')
			rep.ok = rep.ok && rank_store(&k);
		else if (step == 'c')
			rep.ceiling_s = rank_ceiling(&k);
		else if (step == 'l' || step == 'v')
			rep.ok = rep.ok && rank_load(&k, step == 'v', &rep.bytes);
		rep.load_s = now_s() - t0;
		if (write(ch->to_parent[1], &rep, sizeof(rep)) != sizeof(rep))
			return 91;
	}
	for (unsigned lane = 0; lane < LANES; lane++) {
		kvt_gpu_buffer_destroy(k.c, &k.buf[lane]);
		free(k.blocks[lane]);
	}
	cudaFreeHost(k.host);
	kvt_client_close(k.c);
	return rep.ok ? 0 : 1;
}

/* --- the parent: the scheduler --- */

static unsigned lookup_hits(struct kvt_client *sched, const struct opts *o)
{
	unsigned hits = 0;
	struct kvt_key *keys = calloc(o->blocks_per_request, sizeof(*keys));
	uint8_t *tiers = calloc(o->blocks_per_request, 1);
	for (unsigned req = 0; req < o->requests; req++) {
		for (uint32_t i = 0; i < o->blocks_per_request; i++)
			keys[i] = tp_key(req, i);
		struct kvt_lookup lk = {.keys = keys, .nkeys = o->blocks_per_request, .tiers = tiers};
		if (kvt_lookup(sched, &lk) == 0)
			hits += lk.hits;
	}
	free(keys);
	free(tiers);
	return hits;
}

/* Tells ranks [first, last) to do step; collects their reports. */
static int step_ranks(struct channel *ch, unsigned first, unsigned last, char step,
		      struct rank_report *rep)
{
	for (unsigned r = first; r < last; r++)
		send_step(ch[r].to_rank[1], step);
	int ok = 1;
	for (unsigned r = first; r < last; r++) {
		if (read(ch[r].to_parent[0], &rep[r], sizeof(rep[r])) != sizeof(rep[r]))
			rep[r].ok = 0;
		ok = ok && rep[r].ok;
	}
	return ok;
}

static int check(int cond, const char *what)
{
	printf("%s - %s\n", cond ? "ok" : "not ok", what);
	return cond;
}

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout, "usage: kvtier-tp-bench --socket PATH [--ranks 2] [--devices N]\n"
			"       [--requests 4] [--blocks 64] [--block-bytes 18874368] [--repeats 3]\n"
			"       [--kind ipc|vmm]\n");
	exit(rc);
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.ranks = 2, .requests = 4, .blocks_per_request = 64,
			   .block_bytes = 18874368, .repeats = 3, .kind = KVT_GPU_IPC};
	static const struct option lo[] = {
		{"socket", 1, 0, 's'}, {"ranks", 1, 0, 'r'}, {"devices", 1, 0, 'd'},
		{"requests", 1, 0, 'q'}, {"blocks", 1, 0, 'b'}, {"block-bytes", 1, 0, 'B'},
		{"repeats", 1, 0, 'R'}, {"kind", 1, 0, 'k'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned long long v = optarg ? strtoull(optarg, NULL, 10) : 0;
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'r': o->ranks = (unsigned)v; break;
		case 'd': o->devices = (unsigned)v; break;
		case 'q': o->requests = (unsigned)v; break;
		case 'b': o->blocks_per_request = (unsigned)v; break;
		case 'B': o->block_bytes = v; break;
		case 'R': o->repeats = (unsigned)v; break;
		case 'k': o->kind = strcmp(optarg, "vmm") == 0 ? KVT_GPU_VMM : KVT_GPU_IPC; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (!o->socket || o->ranks < 2 || o->ranks > MAX_RANKS || !o->requests ||
	    o->blocks_per_request < LANES || o->blocks_per_request % LANES ||
	    o->block_bytes % (o->ranks * 4096u) || !o->repeats)
		usage(2);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	struct channel ch[MAX_RANKS];
	pid_t pids[MAX_RANKS];
	for (unsigned r = 0; r < o.ranks; r++) {
		if (pipe(ch[r].to_rank) || pipe(ch[r].to_parent))
			return 1;
		if ((pids[r] = fork()) == 0) {
			if (!o.devices) /* the child asks; the parent never touches CUDA */
				cudaGetDeviceCount((int *)&o.devices);
			if (!o.devices)
				_exit(92);
			_exit(rank_main(&o, r, &ch[r]));
		}
	}
	struct kvt_client_options so = {.socket_path = o.socket, .model = "tp-bench",
					.block_bytes = o.block_bytes / o.ranks,
					.tp_size = (uint16_t)o.ranks, .scheduler = 1};
	struct kvt_client *sched;
	int rc = kvt_client_open(&so, &sched);
	if (rc) {
		fprintf(stderr, "scheduler: %s\n", kvt_strerror(rc));
		return 1;
	}
	struct rank_report rep[MAX_RANKS];
	unsigned total = o.requests * o.blocks_per_request;
	int ok = 1;
	printf("# %u ranks, %u requests of %u blocks, %llu B per rank's part, %s staging\n",
	       o.ranks, o.requests, o.blocks_per_request,
	       (unsigned long long)(o.block_bytes / o.ranks),
	       o.kind == KVT_GPU_IPC ? "cuda_ipc" : "cuda_vmm");
	ok &= check(step_ranks(ch, 0, o.ranks - 1, 's', rep), "ranks 0..n-2 stored their parts");
	ok &= check(lookup_hits(sched, &o) == 0, "a LOOKUP sees no block before the last rank stored");
	ok &= check(step_ranks(ch, o.ranks - 1, o.ranks, 's', rep), "the last rank stored its parts");
	ok &= check(lookup_hits(sched, &o) == total, "a LOOKUP sees every block once all ranks stored");
	ok &= check(step_ranks(ch, 0, o.ranks, 'v', rep),
		    "every rank loaded exactly its own parts, byte for byte");
	/* Measure: all ranks at once, the ceiling then the load, best of repeats. */
	double ceiling_s = 1e30, load_s = 1e30;
	uint64_t load_bytes = 0;
	for (unsigned i = 0; i < o.repeats; i++) {
		ok &= step_ranks(ch, 0, o.ranks, 'c', rep);
		double worst = 0;
		for (unsigned r = 0; r < o.ranks; r++)
			worst = rep[r].ceiling_s > worst ? rep[r].ceiling_s : worst;
		ceiling_s = worst < ceiling_s ? worst : ceiling_s;
		ok &= step_ranks(ch, 0, o.ranks, 'l', rep);
		worst = 0;
		load_bytes = 0;
		for (unsigned r = 0; r < o.ranks; r++) {
			worst = rep[r].load_s > worst ? rep[r].load_s : worst;
			load_bytes += rep[r].bytes;
		}
		load_s = worst < load_s ? worst : load_s;
	}
	uint64_t ceiling_bytes = (uint64_t)o.requests * o.blocks_per_request * o.block_bytes * o.repeats;
	double ceil_gbs = (double)ceiling_bytes / ceiling_s / 1e9, load_gbs = load_bytes / load_s / 1e9;
	printf("aggregate load %.2f GB/s, ceiling (all ranks' cudaMemcpyAsync H2D at once) %.2f GB/s, "
	       "ratio %.3f\n", load_gbs, ceil_gbs, load_gbs / ceil_gbs);
	printf("{\"ranks\":%u,\"part_bytes\":%llu,\"blocks\":%u,\"load_gbs\":%.2f,\"ceiling_gbs\":%.2f,"
	       "\"ratio\":%.3f,\"checks_passed\":%s}\n",
	       o.ranks, (unsigned long long)(o.block_bytes / o.ranks), total, load_gbs, ceil_gbs,
	       load_gbs / ceil_gbs, ok ? "true" : "false");
	for (unsigned r = 0; r < o.ranks; r++)
		send_step(ch[r].to_rank[1], 'q');
	for (unsigned r = 0; r < o.ranks; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		ok &= check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank exited cleanly");
	}
	kvt_client_close(sched);
	return ok ? 0 : 1;
}
