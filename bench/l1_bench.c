/*
 * l1_bench.c — kvtier-l1-bench: nanoseconds per L1 engine operation at a
 * million items: insert, prefix lookup (per key, in 64-key chains), load
 * (pin and unpin), insert that evicts, and eviction alone. The first fill
 * of each slot is timed apart from inserts into slots used before. The arena is
 * touched before timing so page faults are not counted. For scale, the same
 * run times a memcpy of one block: the copy a real store adds to an insert.
 *
 *   kvtier-l1-bench [--items N] [--block-size SIZE] [--json]
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "bench_keys.h"
#include "l1.h"

static void die(const char *what, int err)
{
	fprintf(stderr, "kvtier-l1-bench: %s: %s\n", what, kvt_strerror(err));
	exit(1);
}

static void insert(struct l1 *l1, const struct kvt_ns *ns, uint64_t n, uint32_t len)
{
	struct kvt_key k = key_of(n);
	struct l1_ref ref;
	int rc = l1_store_begin(l1, ns, &k, 0, len, 0, &ref);
	if (rc)
		die("store", rc);
	memcpy(ref.data, &n, sizeof(n));
	l1_store_commit(l1, &ref);
}

static double memcpy_ns(uint32_t len)
{
	uint8_t *src = malloc(len), *dst = malloc(len);
	memset(src, 1, len);
	memset(dst, 2, len);
	unsigned reps = 200000;
	double t = now_s();
	for (unsigned i = 0; i < reps; i++) {
		src[0] = (uint8_t)i;
		memcpy(dst, src, len);
		__asm__ volatile("" ::"r"(dst) : "memory");
	}
	t = (now_s() - t) / reps * 1e9;
	free(src);
	free(dst);
	return t;
}

int main(int argc, char **argv)
{
	uint64_t items = 1000000, block = 4096;
	int json = 0;
	static const struct option lo[] = {
		{"items", required_argument, NULL, 'n'},
		{"block-size", required_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'n')
			items = strtoull(optarg, NULL, 10);
		else if (c == 'b' && kvt_parse_size(optarg, &block) == 0)
			;
		else if (c == 'j')
			json = 1;
		else {
			fprintf(c == 'h' ? stdout : stderr,
				"usage: kvtier-l1-bench [--items N] [--block-size SIZE] [--json]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (items < 1000 || block == 0 || block > (UINT64_C(64) << 20)) {
		fprintf(stderr, "kvtier-l1-bench: --items must be >= 1000, --block-size 1..64MiB\n");
		return 2;
	}
	uint64_t slot = arena_slot_size(block), region = UINT64_C(64) << 20;
	uint64_t per_region = region / slot;
	uint64_t size = (items + per_region - 1) / per_region * region;
	struct l1 l1;
	struct l1_config cfg = {.size = size, .region_size = region, .high_watermark = 1.0,
				.low_watermark = 0.99, .max_leases = 1024, .max_lease_ms = 1000};
	int rc = l1_init(&l1, &cfg);
	if (rc)
		die("l1_init", rc);
	memset(l1.arena.base, 0, l1.arena.size); /* fault the arena in before timing */
	struct ns_registry reg;
	struct kvt_ns *ns;
	ns_registry_init(&reg);
	if ((rc = ns_get(&reg, "bench", NULL, block, 1, &ns)) < 0 || (rc = l1_ns_open(&l1, ns)))
		die("namespace", rc);
	uint64_t capacity = size / slot;

	/* The first fill of each slot carries one-time costs; time it apart. */
	double t = now_s();
	for (uint64_t i = 0; i < capacity; i++)
		insert(&l1, ns, i, (uint32_t)block);
	double first_fill_ns = (now_s() - t) / (double)capacity * 1e9;

	t = now_s();
	uint64_t freed = l1_evict(&l1, UINT64_MAX, L1_EVICT_ADMIN);
	double evict_ns = (now_s() - t) / (double)(freed / slot) * 1e9;

	t = now_s();
	for (uint64_t i = 0; i < capacity; i++)
		insert(&l1, ns, i, (uint32_t)block);
	double insert_ns = (now_s() - t) / (double)capacity * 1e9;

	/* Lookups: 64-key chains at random offsets, all hits. */
	enum { CHAIN = 64 };
	struct kvt_key keys[CHAIN];
	uint8_t tiers[CHAIN];
	uint64_t chains = capacity / CHAIN * 2, rng = 1;
	t = now_s();
	for (uint64_t i = 0; i < chains; i++) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		uint64_t start = (rng >> 20) % (capacity - CHAIN);
		for (int j = 0; j < CHAIN; j++)
			keys[j] = key_of(start + (uint64_t)j);
		uint32_t hits;
		uint64_t lease;
		l1_lookup(&l1, ns, keys, CHAIN, tiers, 0, 0, NULL, &hits, &lease);
		if (hits != CHAIN)
			die("lookup missed", -ENOENT);
	}
	double lookup_key_ns = (now_s() - t) / (double)(chains * CHAIN) * 1e9;

	t = now_s();
	for (uint64_t i = 0; i < capacity; i++) {
		struct kvt_key k = key_of((i * 7919) % capacity);
		struct l1_ref ref;
		if ((rc = l1_load_begin(&l1, ns, &k, 0, &ref)))
			die("load", rc);
		l1_load_end(&l1, &ref);
	}
	double load_ns = (now_s() - t) / (double)capacity * 1e9;

	/* At capacity, each insert evicts the LRU item first. */
	t = now_s();
	for (uint64_t i = capacity; i < 2 * capacity; i++)
		insert(&l1, ns, i, (uint32_t)block);
	double insert_evict_ns = (now_s() - t) / (double)capacity * 1e9;

	struct l1_stats_snapshot s;
	l1_stats_read(&l1, &s);
	double copy_ns = memcpy_ns((uint32_t)block);

	if (json) {
		printf("{\"items\": %" PRIu64 ", \"block_bytes\": %" PRIu64
		       ", \"first_fill_ns\": %.1f, \"insert_ns\": %.1f, \"lookup_key_ns\": %.1f, \"lookup_keys_per_s\": %.0f"
		       ", \"load_ns\": %.1f, \"insert_evict_ns\": %.1f, \"evict_ns\": %.1f"
		       ", \"memcpy_block_ns\": %.1f, \"evictions_capacity\": %" PRIu64 "}\n",
		       capacity, block, first_fill_ns, insert_ns, lookup_key_ns, 1e9 / lookup_key_ns, load_ns,
		       insert_evict_ns, evict_ns, copy_ns, s.evictions_capacity);
	} else {
		printf("L1 engine, %" PRIu64 " items of %" PRIu64 " bytes\n", capacity, block);
		printf("  first fill of a slot  %8.1f ns\n", first_fill_ns);
		printf("  insert (no copy)      %8.1f ns\n", insert_ns);
		printf("  lookup, per key       %8.1f ns  (%.2f M keys/s, 64-key chains)\n",
		       lookup_key_ns, 1e3 / lookup_key_ns);
		printf("  load pin+unpin        %8.1f ns\n", load_ns);
		printf("  insert that evicts    %8.1f ns\n", insert_evict_ns);
		printf("  evict alone           %8.1f ns\n", evict_ns);
		printf("  memcpy of one block   %8.1f ns  (ceiling reference: a store's copy)\n",
		       copy_ns);
	}
	l1_destroy(&l1);
	ns_registry_destroy(&reg);
	return 0;
}
