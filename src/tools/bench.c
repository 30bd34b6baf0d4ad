/*
 * bench.c — kvtier-bench: stores then loads N blocks through a running
 * kvtierd over L lanes with C requests in flight per lane, verifies every
 * byte loaded (block content derives from its key, so a wrong block shows),
 * times 64-key prefix lookups, and measures a one-thread and an all-threads
 * memcpy of the same bytes in the same run as the ceiling. With --rounds R it
 * stores and loads R sets of new keys, samples the ceiling after every phase,
 * and reports medians: on a shared VM one sample of either swings by a third.
 *
 *   kvtier-bench [--socket PATH] [--block-size SIZE] [--blocks N] [--lanes L]
 *                [--inflight C] [--batch B] [--threads T] [--rounds R] [--json]
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "kvtier/kvtier.h"

struct opts {
	const char *socket;
	char default_socket[4096];
	uint64_t block;
	uint32_t blocks;
	unsigned lanes;
	unsigned inflight;
	unsigned batch;
	unsigned threads;
	unsigned rounds;
	int json;
	int no_warmup;
};

struct lane_run {
	struct kvt_client *c;
	unsigned lane;
	const struct opts *o;
	uint32_t buffer;          /* the lane's staging buffer index */
	uint8_t *staging;         /* blocks [first, first+count) at (i-first)*block */
	uint32_t first, count;
	const struct kvt_key *keys;
	int op;                   /* 0 store, 1 load */
	int failed;
	uint8_t *missing;         /* per block: the load answered -ENOENT (evicted) */
	uint32_t nmissing;
	double *lat;              /* per request, seconds */
	uint32_t nlat;
};

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Block content: a function of the key, word by word. */
static void fill(uint8_t *p, uint64_t len, const struct kvt_key *k)
{
	uint64_t seed;
	memcpy(&seed, k->bytes, 8);
	for (uint64_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = mix(seed + i);
		memcpy(p + i, &v, 8);
	}
}

static int check(const uint8_t *p, uint64_t len, const struct kvt_key *k)
{
	uint64_t seed;
	memcpy(&seed, k->bytes, 8);
	for (uint64_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = mix(seed + i);
		if (memcmp(p + i, &v, 8))
			return 0;
	}
	return 1;
}

struct inflight_req {
	uint64_t id;
	double start;
	struct kvt_block *blocks;
	uint32_t n;
};

/* A missing block on a load (a cache may have evicted it) is counted; any other error fails. */
static void note_block(struct lane_run *r, const struct kvt_block *b)
{
	if (b->status == -ENOENT && r->op == 1) {
		r->missing[b->offset / r->o->block] = 1;
		r->nmissing++;
	} else if (b->status) {
		r->failed = 1;
	}
}

static void *lane_main(void *arg)
{
	struct lane_run *r = arg;
	const struct opts *o = r->o;
	unsigned cap = o->inflight;
	struct inflight_req *reqs = calloc(cap, sizeof(*reqs));
	struct kvt_block *blocks = calloc((size_t)cap * o->batch, sizeof(*blocks));
	struct kvt_completion *comps = calloc(cap, sizeof(*comps));
	r->lat = calloc(r->count / o->batch + 2, sizeof(double));
	uint32_t next = 0, done = 0;
	unsigned active = 0;
	while (done < r->count && !r->failed) {
		for (unsigned s = 0; s < cap && next < r->count; s++) {
			if (reqs[s].blocks)
				continue;
			uint32_t n = r->count - next < o->batch ? r->count - next : o->batch;
			struct kvt_block *b = &blocks[(size_t)s * o->batch];
			for (uint32_t j = 0; j < n; j++) {
				b[j].key = r->keys[r->first + next + j];
				b[j].offset = (uint64_t)(next + j) * o->block;
				b[j].length = (uint32_t)o->block;
			}
			uint64_t id;
			int rc = r->op ? kvt_submit_load(r->c, r->lane, r->buffer, b, n, &id)
				       : kvt_submit_store(r->c, r->lane, r->buffer, b, n, &id);
			if (rc == -EBUSY)
				break;
			if (rc) {
				fprintf(stderr, "kvtier-bench: submit: %s\n", kvt_strerror(rc));
				r->failed = 1;
				break;
			}
			reqs[s] = (struct inflight_req){id, now_s(), b, n};
			next += n;
			active++;
		}
		if (!active)
			break;
		int got = kvt_poll(r->c, r->lane, comps, cap, -1);
		if (got < 0) {
			fprintf(stderr, "kvtier-bench: poll: %s\n", kvt_strerror(got));
			r->failed = 1;
			break;
		}
		double t = now_s();
		for (int i = 0; i < got; i++) {
			for (unsigned s = 0; s < cap; s++) {
				if (!reqs[s].blocks || reqs[s].id != comps[i].id)
					continue;
				if (comps[i].status)
					r->failed = 1;
				for (uint32_t j = 0; j < reqs[s].n; j++)
					note_block(r, &reqs[s].blocks[j]);
				r->lat[r->nlat++] = t - reqs[s].start;
				done += reqs[s].n;
				reqs[s].blocks = NULL;
				active--;
			}
		}
	}
	free(reqs);
	free(blocks);
	free(comps);
	return NULL;
}

/* Runs op (0 store, 1 load) on every lane at once; returns seconds. */
static double run_phase(struct lane_run *runs, unsigned lanes, int op)
{
	pthread_t th[1024];
	double t = now_s();
	for (unsigned i = 0; i < lanes; i++) {
		runs[i].op = op;
		free(runs[i].lat);
		memset(runs[i].missing, 0, runs[i].count);
		runs[i].nmissing = 0;
		runs[i].lat = NULL;
		runs[i].nlat = 0;
		pthread_create(&th[i], NULL, lane_main, &runs[i]);
	}
	for (unsigned i = 0; i < lanes; i++)
		pthread_join(th[i], NULL);
	return now_s() - t;
}

struct copy_arg {
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
};

static void *copy_main(void *arg)
{
	struct copy_arg *a = arg;
	memcpy(a->dst, a->src, a->len);
	return NULL;
}

/* GB/s of copying len bytes with t threads (best of three). */
static double memcpy_gbps(uint8_t *dst, const uint8_t *src, size_t len, unsigned t)
{
	double best = 1e30;
	for (int rep = 0; rep < 3; rep++) {
		pthread_t th[256];
		struct copy_arg args[256];
		double s = now_s();
		size_t per = len / t;
		for (unsigned i = 0; i < t; i++) {
			args[i] = (struct copy_arg){dst + i * per, src + i * per,
						    i == t - 1 ? len - i * per : per};
			pthread_create(&th[i], NULL, copy_main, &args[i]);
		}
		for (unsigned i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		double e = now_s() - s;
		if (e < best)
			best = e;
	}
	return (double)len / best / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* 64-key chain lookups on lane 0, pipelined; returns keys/s. */
static double lookups(struct kvt_client *c, const struct kvt_key *keys, uint32_t nkeys,
		      double *p50_us, double *p99_us, int *all_hit)
{
	enum { CHAIN = 64, REQS = 2000, DEPTH = 16 };
	uint32_t chain = nkeys < CHAIN ? nkeys : CHAIN;
	uint8_t tiers[DEPTH][CHAIN];
	struct kvt_lookup lk[DEPTH];
	double start[DEPTH], *lat = calloc(REQS, sizeof(double));
	uint64_t ids[DEPTH];
	int busy[DEPTH] = {0};
	unsigned sent = 0, got = 0;
	*all_hit = 1;
	double t0 = now_s();
	while (got < REQS) {
		for (unsigned s = 0; s < DEPTH && sent < REQS; s++) {
			if (busy[s])
				continue;
			uint32_t off = (sent * 7919u) % (nkeys - chain + 1);
			lk[s] = (struct kvt_lookup){.keys = keys + off, .nkeys = chain,
						    .tiers = tiers[s]};
			if (kvt_submit_lookup(c, 0, &lk[s], &ids[s]))
				break;
			start[s] = now_s();
			busy[s] = 1;
			sent++;
		}
		struct kvt_completion comp[DEPTH];
		int n = kvt_poll(c, 0, comp, DEPTH, -1);
		if (n < 0)
			break;
		double t = now_s();
		for (int i = 0; i < n; i++)
			for (unsigned s = 0; s < DEPTH; s++)
				if (busy[s] && ids[s] == comp[i].id) {
					if (comp[i].status || lk[s].hits != chain)
						*all_hit = 0;
					lat[got++] = t - start[s];
					busy[s] = 0;
				}
	}
	double el = now_s() - t0;
	qsort(lat, got, sizeof(double), cmp_double);
	*p50_us = got ? lat[got / 2] * 1e6 : 0;
	*p99_us = got ? lat[(got * 99) / 100] * 1e6 : 0;
	free(lat);
	return (double)got * chain / el;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier-bench [--socket PATH] [--block-size SIZE] [--blocks N] [--lanes L]\n"
		   "                    [--inflight C] [--batch B] [--threads T] [--rounds R]\n"
		   "                    [--no-warmup] [--json]\n"
		   "  --socket PATH      kvtierd's socket (default: kvtierd's own default for this\n"
		   "                     user, kvt_default_socket: /run/kvtier/kvtierd.sock as root)\n"
		   "  --block-size SIZE  bytes per block (default 2MiB)\n"
		   "  --blocks N         blocks stored then loaded (default 256)\n"
		   "  --lanes L          connections, one thread each (default 2)\n"
		   "  --inflight C       requests in flight per lane (default 4)\n"
		   "  --batch B          blocks per request (default 1)\n"
		   "  --threads T        threads of the all-threads memcpy ceiling (default: CPUs)\n"
		   "  --rounds R         store and load R sets of new keys; medians (default 1)\n"
		   "  --no-warmup        skip the untimed store and load of other keys first\n"
		   "                     (keeps the working set exact, e.g. for evict mode)\n"
		   "  --json             end with one JSON line for scripts\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"socket", required_argument, NULL, 's'}, {"block-size", required_argument, NULL, 'b'},
		{"blocks", required_argument, NULL, 'n'}, {"lanes", required_argument, NULL, 'l'},
		{"inflight", required_argument, NULL, 'c'}, {"batch", required_argument, NULL, 'B'},
		{"threads", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
		{"no-warmup", no_argument, NULL, 'W'}, {"rounds", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'}, {0},
	};
	*o = (struct opts){.block = 2u << 20, .blocks = 256, .lanes = 2, .inflight = 4, .batch = 1,
			   .threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN), .rounds = 1};
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o->socket = optarg; break;
		case 'b':
			if (kvt_parse_size(optarg, &o->block))
				return -1;
			break;
		case 'n': o->blocks = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'l': o->lanes = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'c': o->inflight = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'B': o->batch = (unsigned)strtoul(optarg, NULL, 10); break;
		case 't': o->threads = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'j': o->json = 1; break;
		case 'W': o->no_warmup = 1; break;
		case 'r': o->rounds = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (!o->socket && kvt_default_socket(o->default_socket, sizeof(o->default_socket)) == 0)
		o->socket = o->default_socket;
	if (!o->socket || o->block < 8 || o->block > UINT32_MAX || o->blocks == 0 ||
	    o->lanes == 0 || o->lanes > 1024 || o->inflight == 0 || o->inflight > 4096 ||
	    o->batch == 0 || o->batch > 4096 || o->threads == 0 || o->threads > 256 ||
	    o->blocks < o->lanes || o->rounds == 0 || o->rounds > 1000)
		return -1;
	return 0;
}

/* A growing list of doubles: latencies, GB/s samples. */
struct samples {
	double *v;
	uint32_t n, cap;
};

static void samples_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = x;
}

/* Percentile p (0..100) of s (sorted in place). */
static double samples_pct(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(double), cmp_double);
	return s->v[(uint32_t)((p / 100.0) * (s->n - 1) + 0.5)];
}

/* Every lane's request latencies of the phase just run, in microseconds. */
static void collect_latencies(const struct lane_run *runs, unsigned lanes, struct samples *s)
{
	for (unsigned i = 0; i < lanes; i++)
		for (uint32_t j = 0; j < runs[i].nlat; j++)
			samples_add(s, runs[i].lat[j] * 1e6);
}

/* The run's lanes, their two staging buffers each (stored from, loaded into), its keys. */
struct bench {
	const struct opts *o;
	struct kvt_client *c;
	uint64_t run_id;
	struct lane_run *runs;
	uint8_t **store_bufs, **load_bufs;
	uint32_t *store_idx, *load_idx;
	struct kvt_key *keys;       /* the current round's */
};

/* A prefix chain over tokens unique to this run and round (round ~0: the warm-up's). */
static void make_keys(struct kvt_key *keys, uint32_t n, uint64_t run_id, unsigned round)
{
	int32_t tokens[16];
	uint64_t salt = mix(run_id ^ round);
	for (uint32_t i = 0; i < n; i++) {
		for (int t = 0; t < 16; t++)
			tokens[t] = (int32_t)(salt >> (t % 2 ? 32 : 0)) ^ (int32_t)(i * 16 + (uint32_t)t);
		kvt_key_chain_next(i ? &keys[i - 1] : NULL, tokens, 16, &keys[i]);
	}
}

/* Points every lane at its store (load: 0) or load (1) buffer and the round's keys. */
static void use_buffers(struct bench *b, int load)
{
	for (unsigned i = 0; i < b->o->lanes; i++) {
		b->runs[i].buffer = load ? b->load_idx[i] : b->store_idx[i];
		b->runs[i].staging = load ? b->load_bufs[i] : b->store_bufs[i];
		b->runs[i].keys = b->keys;
		b->runs[i].failed = 0;
	}
}

/* Fills the store buffers with the content of the current keys. */
static void fill_store_buffers(struct bench *b)
{
	for (unsigned i = 0; i < b->o->lanes; i++)
		for (uint32_t j = 0; j < b->runs[i].count; j++)
			fill(b->store_bufs[i] + (uint64_t)j * b->o->block, b->o->block,
			     &b->keys[b->runs[i].first + j]);
}

static int bench_setup(struct bench *b)
{
	const struct opts *o = b->o;
	unsigned lanes = o->lanes;
	b->keys = calloc(o->blocks, sizeof(*b->keys));
	b->runs = calloc(lanes, sizeof(*b->runs));
	b->store_bufs = calloc(lanes, sizeof(*b->store_bufs));
	b->load_bufs = calloc(lanes, sizeof(*b->load_bufs));
	b->store_idx = calloc(lanes, sizeof(*b->store_idx));
	b->load_idx = calloc(lanes, sizeof(*b->load_idx));
	uint32_t per = o->blocks / lanes;
	for (unsigned i = 0; i < lanes; i++) {
		b->runs[i] = (struct lane_run){.c = b->c, .lane = i, .o = o, .first = i * per,
					       .count = i == lanes - 1 ? o->blocks - i * per : per};
		b->runs[i].missing = calloc(b->runs[i].count, 1);
		uint64_t size = (uint64_t)b->runs[i].count * o->block;
		int rc;
		if ((rc = kvt_buffer_create(b->c, size, (void **)&b->store_bufs[i], &b->store_idx[i])) ||
		    (rc = kvt_buffer_create(b->c, size, (void **)&b->load_bufs[i], &b->load_idx[i]))) {
			fprintf(stderr, "kvtier-bench: staging buffer of %" PRIu64 " bytes: %s\n",
				size, kvt_strerror(rc));
			return -1;
		}
		memset(b->load_bufs[i], 0, size); /* fault in */
	}
	return 0;
}

/*
 * Staging buffers are registered once and reused for ever, so one untimed
 * store and load of other keys puts them in that state.
 */
static void bench_warmup(struct bench *b)
{
	if (b->o->no_warmup)
		return;
	make_keys(b->keys, b->o->blocks, b->run_id, ~0u);
	fill_store_buffers(b);
	use_buffers(b, 0);
	run_phase(b->runs, b->o->lanes, 0);
	use_buffers(b, 1);
	run_phase(b->runs, b->o->lanes, 1);
}

/* The all-threads (and one-thread) memcpy of the run's bytes, store buffers to load buffers. */
static void ceiling(const struct bench *b, double *all, double *one)
{
	double bytes = (double)b->o->blocks * (double)b->o->block;
	*all = 0;
	if (one)
		*one = 0;
	for (unsigned i = 0; i < b->o->lanes; i++) {
		size_t len = (size_t)b->runs[i].count * b->o->block;
		*all += memcpy_gbps(b->load_bufs[i], b->store_bufs[i], len, b->o->threads) *
			(double)len / bytes;
		if (one)
			*one += memcpy_gbps(b->load_bufs[i], b->store_bufs[i], len, 1) *
				(double)len / bytes;
	}
}

struct round_result {
	double store_gbps, load_gbps;
	double ceiling_after_store, ceiling_after_load, one_thread;
	uint32_t missing;
	int exact;
};

/* Whether every block loaded in this round is byte-exact; counts the missing ones. */
static int check_round(struct bench *b, uint32_t *missing)
{
	int exact = 1;
	*missing = 0;
	for (unsigned i = 0; i < b->o->lanes; i++) {
		struct lane_run *r = &b->runs[i];
		exact &= !r->failed;
		*missing += r->nmissing;
		for (uint32_t j = 0; j < r->count && exact; j++)
			exact = r->missing[j] || check(b->load_bufs[i] + (uint64_t)j * b->o->block,
						       b->o->block, &b->keys[r->first + j]);
	}
	return exact;
}

/* One round: new keys stored (timed), the ceiling, loaded back (timed), checked, the ceiling. */
static void bench_round(struct bench *b, unsigned round, struct round_result *res,
			struct samples *store_lat, struct samples *load_lat)
{
	double bytes = (double)b->o->blocks * (double)b->o->block;
	make_keys(b->keys, b->o->blocks, b->run_id, round);
	fill_store_buffers(b);
	use_buffers(b, 0);
	res->store_gbps = bytes / run_phase(b->runs, b->o->lanes, 0) / 1e9;
	collect_latencies(b->runs, b->o->lanes, store_lat);
	int store_failed = 0;
	for (unsigned i = 0; i < b->o->lanes; i++)
		store_failed |= b->runs[i].failed;
	ceiling(b, &res->ceiling_after_store, NULL);
	use_buffers(b, 1);
	res->load_gbps = bytes / run_phase(b->runs, b->o->lanes, 1) / 1e9;
	collect_latencies(b->runs, b->o->lanes, load_lat);
	res->exact = !store_failed && check_round(b, &res->missing);
	ceiling(b, &res->ceiling_after_load, &res->one_thread);
}

static void bench_free(struct bench *b)
{
	for (unsigned i = 0; i < b->o->lanes; i++) {
		munmap(b->store_bufs[i], (size_t)b->runs[i].count * b->o->block);
		munmap(b->load_bufs[i], (size_t)b->runs[i].count * b->o->block);
		free(b->runs[i].lat);
		free(b->runs[i].missing);
	}
	free(b->keys);
	free(b->runs);
	free(b->store_bufs);
	free(b->load_bufs);
	free(b->store_idx);
	free(b->load_idx);
}

/* The medians of every round, the text lines and the JSON line. */
static void report(const struct opts *o, const struct round_result *res, struct samples *store_lat,
		   struct samples *load_lat, double keys_per_s, double lk_p50, double lk_p99,
		   uint32_t missing, int exact, int verified)
{
	struct samples st = {0}, ld = {0}, all = {0}, one = {0}, pair = {0}, sr = {0}, lr = {0};
	for (unsigned r = 0; r < o->rounds; r++) {
		samples_add(&pair, res[r].store_gbps / res[r].load_gbps);
		/* Each phase against the ceiling sampled right after it: the machine of that moment. */
		samples_add(&sr, res[r].store_gbps / res[r].ceiling_after_store);
		samples_add(&lr, res[r].load_gbps / res[r].ceiling_after_load);
		samples_add(&st, res[r].store_gbps);
		samples_add(&ld, res[r].load_gbps);
		samples_add(&all, res[r].ceiling_after_store);
		samples_add(&all, res[r].ceiling_after_load);
		samples_add(&one, res[r].one_thread);
	}
	double store_gbps = samples_pct(&st, 50), load_gbps = samples_pct(&ld, 50);
	double ceil_all = samples_pct(&all, 50), ceil_one = samples_pct(&one, 50);
	double store_over_load = samples_pct(&pair, 50);
	double store_ratio = samples_pct(&sr, 50), load_ratio = samples_pct(&lr, 50);
	double store_p50 = samples_pct(store_lat, 50), store_p99 = samples_pct(store_lat, 99);
	double load_p50 = samples_pct(load_lat, 50), load_p99 = samples_pct(load_lat, 99);
	printf("kvtier-bench: %u blocks of %" PRIu64 " bytes, %u lanes, %u in flight per lane, %u per request, %u rounds (medians)\n",
	       o->blocks, o->block, o->lanes, o->inflight, o->batch, o->rounds);
	printf("  store   %7.2f GB/s  (%.2f of all-threads memcpy)  p50 %.0f us  p99 %.0f us\n",
	       store_gbps, store_ratio, store_p50, store_p99);
	printf("  load    %7.2f GB/s  (%.2f of all-threads memcpy)  p50 %.0f us  p99 %.0f us\n",
	       load_gbps, load_ratio, load_p50, load_p99);
	printf("  store/load %.2f (median of the rounds' pairs)\n", store_over_load);
	printf("  lookup  %7.2f M keys/s (64-key chains)  p50 %.0f us  p99 %.0f us\n",
	       keys_per_s / 1e6, lk_p50, lk_p99);
	printf("  memcpy  %7.2f GB/s one thread, %.2f GB/s %u threads (ceiling; %u samples, %.2f..%.2f)\n",
	       ceil_one, ceil_all, o->threads, all.n, all.v[0], all.v[all.n - 1]);
	if (missing)
		printf("  missing: %u blocks the daemon no longer held (evicted or dropped)\n", missing);
	printf("  verified: %s\n", verified ? "every byte"
				       : exact ? "NO: missing data (what loaded is byte-exact)"
					       : "NO: wrong data");
	if (o->json)
		printf("{\"block_bytes\": %" PRIu64 ", \"blocks\": %u, \"lanes\": %u, \"inflight\": %u, "
		       "\"batch\": %u, \"rounds\": %u, \"store_gbps\": %.3f, \"load_gbps\": %.3f, "
		       "\"store_ratio\": %.3f, \"load_ratio\": %.3f, \"store_over_load\": %.3f, "
		       "\"memcpy_1t_gbps\": %.3f, "
		       "\"memcpy_all_gbps\": %.3f, \"memcpy_threads\": %u, \"store_p50_us\": %.1f, "
		       "\"store_p99_us\": %.1f, \"load_p50_us\": %.1f, \"load_p99_us\": %.1f, "
		       "\"lookup_keys_per_s\": %.0f, \"lookup_p50_us\": %.1f, \"lookup_p99_us\": %.1f, "
		       "\"missing\": %u, \"exact\": %s, \"verified\": %s}\n",
		       o->block, o->blocks, o->lanes, o->inflight, o->batch, o->rounds, store_gbps,
		       load_gbps, store_ratio, load_ratio, store_over_load, ceil_one,
		       ceil_all,
		       o->threads, store_p50, store_p99, load_p50, load_p99, keys_per_s, lk_p50,
		       lk_p99, missing, exact ? "true" : "false", verified ? "true" : "false");
	free(st.v);
	free(ld.v);
	free(all.v);
	free(one.v);
	free(pair.v);
	free(sr.v);
	free(lr.v);
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o)) {
		usage(stderr);
		return 2;
	}
	o.block &= ~(uint64_t)7;
	uint64_t run_id;
	if (getrandom(&run_id, sizeof(run_id), 0) != sizeof(run_id))
		run_id = (uint64_t)time(NULL);
	/* One namespace per block size: a namespace's block size is fixed. */
	char model[64];
	snprintf(model, sizeof(model), "kvtier-bench-%" PRIu64, o.block);
	struct kvt_client_options co = {.socket_path = o.socket, .model = model,
					.block_bytes = o.block, .tp_size = 1, .lanes = o.lanes,
					.max_inflight = o.inflight};
	struct kvt_client *c;
	int rc = kvt_client_open(&co, &c);
	if (rc) {
		fprintf(stderr, "kvtier-bench: connect %s: %s\n", o.socket, kvt_strerror(rc));
		return 1;
	}
	struct bench b = {.o = &o, .c = c, .run_id = run_id};
	if (bench_setup(&b))
		return 1;
	bench_warmup(&b);
	struct round_result *res = calloc(o.rounds, sizeof(*res));
	struct samples store_lat = {0}, load_lat = {0};
	int exact = 1;
	uint32_t missing = 0;
	for (unsigned r = 0; r < o.rounds; r++) {
		bench_round(&b, r, &res[r], &store_lat, &load_lat);
		exact &= res[r].exact;
		missing += res[r].missing;
	}
	double lk_p50, lk_p99;
	int all_hit;
	double keys_per_s = lookups(c, b.keys, o.blocks, &lk_p50, &lk_p99, &all_hit);
	int verified = exact && !missing && all_hit;
	report(&o, res, &store_lat, &load_lat, keys_per_s, lk_p50, lk_p99, missing, exact, verified);
	free(res);
	free(store_lat.v);
	free(load_lat.v);
	bench_free(&b);
	kvt_client_close(c);
	return verified ? 0 : 1;
}
