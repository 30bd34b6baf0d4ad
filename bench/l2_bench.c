/*
 * l2_bench.c — kvtier-l2-bench: the L2 engine's own throughput on a real
 * file, for bench/l2.sh to set beside fio on the same file system with the
 * same block size and queue depth.
 *
 * Write: victims of one block each are handed to the engine as fast as it
 * takes them (when both write buffers are busy the bench waits for a
 * completion and offers the same victim again, so nothing is dropped); GB/s
 * counts data bytes over the time until the last write completes. The
 * engine's memcpy into its write buffer and its XXH3 checksum are included,
 * as in the daemon. Read: every item once, in random order, with the queue
 * depth's worth of reads in flight, each checked against its checksum by the
 * engine, after the engine is closed and reopened (so every read goes to the
 * disk, and the index rebuild is timed); GB/s and per-read latency percentiles.
 *
 *   kvtier-l2-bench --path FILE --size SIZE [--block-size SIZE] [--queue-depth N]
 *                   [--region-size SIZE] [--json]
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_keys.h"
#include "l2.h"
#include "l2fmt.h"

struct opts {
	const char *path;
	uint64_t size, block, region;
	uint32_t qd;
	int json;
};

struct slot {
	struct l2_read rd;       /* first: the completion hands this pointer back */
	double start;
	int status;
	int busy;
};

static void die(const char *what, const char *why)
{
	fprintf(stderr, "kvtier-l2-bench: %s: %s\n", what, why);
	exit(1);
}

/* Waits for completions and handles them. */
static void wait_some(struct l2 *l2)
{
	l2_submit(l2);
	struct pollfd p = {l2_event_fd(l2), POLLIN, 0};
	if (poll(&p, 1, 10000) != 1)
		die("wait", "no completion in 10 s");
	l2_process(l2);
}

static double write_phase(struct l2 *l2, const struct kvt_ns *ns, uint64_t items,
			  const uint8_t *data, uint32_t len)
{
	struct l2_stats_snapshot s;
	double t = now_s();
	for (uint64_t n = 0; n < items; n++) {
		struct kvt_key k = key_of(n);
		const uint8_t *parts[1] = {data};
		uint32_t lengths[1] = {len};
		struct l1_victim v = {ns, &k, 1, parts, lengths, L1_EVICT_CAPACITY, true, NULL};
		for (;;) {
			l2_stats_read(l2, &s);
			uint64_t dropped = s.victims_dropped_behind;
			l2_write_victim(l2, &v);
			l2_submit(l2);
			l2_stats_read(l2, &s);
			if (s.victims_dropped_behind == dropped)
				break;
			wait_some(l2); /* the disk is behind: let a write finish, offer again */
		}
	}
	while (!l2ring_idle(&l2->ring))
		wait_some(l2);
	return now_s() - t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void read_done(struct l2_read *rd, int status)
{
	struct slot *s = (struct slot *)rd;
	s->status = status;
	s->busy = 0;
}

static double read_phase(struct l2 *l2, const struct kvt_ns *ns, uint64_t items,
			 uint8_t *arena, uint64_t slot_bytes, uint32_t qd, double *lat)
{
	uint64_t *order = malloc(items * sizeof(*order));
	for (uint64_t i = 0; i < items; i++)
		order[i] = i;
	srand(42);
	for (uint64_t i = items - 1; i > 0; i--) {
		uint64_t j = (uint64_t)rand() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	struct slot *slots = calloc(qd, sizeof(*slots));
	uint64_t next = 0, done = 0;
	double t = now_s();
	while (done < items) {
		for (uint32_t q = 0; q < qd && next < items; q++) {
			if (slots[q].busy)
				continue;
			struct kvt_key k = key_of(order[next]);
			slots[q].rd.done = read_done;
			slots[q].busy = 1;
			slots[q].start = now_s();
			int rc = l2_read_begin(l2, ns, &k, 0, arena + q * slot_bytes, slot_bytes,
					       &slots[q].rd);
			if (rc < 0)
				die("read", kvt_strerror(rc));
			if (rc == 1)
				slots[q].busy = 0, slots[q].status = 0;
			next++;
		}
		if (!l2ring_idle(&l2->ring))
			wait_some(l2);
		for (uint32_t q = 0; q < qd; q++) {
			if (slots[q].busy || slots[q].start == 0)
				continue;
			if (slots[q].status)
				die("read", kvt_strerror(slots[q].status));
			lat[done++] = now_s() - slots[q].start;
			slots[q].start = 0;
		}
	}
	double secs = now_s() - t;
	free(slots);
	free(order);
	return secs;
}

#define USAGE \
	"--path FILE --size SIZE [--block-size SIZE (4 KiB multiple)] [--queue-depth N] " \
	"[--region-size SIZE] [--json]"

static struct opts parse(int argc, char **argv)
{
	struct opts o = {.block = 2u << 20, .qd = 32};
	static const struct option lo[] = {
		{"path", 1, 0, 'p'}, {"size", 1, 0, 's'}, {"block-size", 1, 0, 'b'},
		{"queue-depth", 1, 0, 'q'}, {"region-size", 1, 0, 'r'}, {"json", 0, 0, 'j'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int err = 0;
		switch (c) {
		case 'p': o.path = optarg; break;
		case 's': err = kvt_parse_size(optarg, &o.size); break;
		case 'b': err = kvt_parse_size(optarg, &o.block); break;
		case 'r': err = kvt_parse_size(optarg, &o.region); break;
		case 'q': o.qd = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'j': o.json = 1; break;
		case 'h': printf("usage: kvtier-l2-bench %s\n", USAGE); exit(0);
		default: exit(2);
		}
		if (err)
			die(argv[optind - 1], optarg);
	}
	if (!o.path || !o.size || !o.qd || o.block % L2FMT_BLOCK)
		die("usage", USAGE);
	return o;
}

int main(int argc, char **argv)
{
	struct opts o = parse(argc, argv);
	struct ns_registry reg;
	ns_registry_init(&reg);
	struct kvt_ns *ns;
	if (ns_get(&reg, "kvtier-l2-bench", NULL, o.block, 1, &ns) < 0)
		die("namespace", "refused");
	uint8_t *arena = mmap(NULL, o.qd * o.block, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint8_t *data = malloc(o.block);
	if (arena == MAP_FAILED || !data)
		die("memory", strerror(ENOMEM));
	for (uint64_t i = 0; i < o.block; i++)
		data[i] = (uint8_t)(i * 131 + 17);
	memset(arena, 0, o.qd * o.block);
	unlink(o.path); /* a fresh file: nothing to recover */
	struct l2 l2;
	char why[512];
	struct l2_config cfg = {.path = o.path, .size = o.size, .region_size = o.region,
				.queue_depth = o.qd, .arena = arena, .arena_size = o.qd * o.block};
	if (l2_open(&l2, &cfg, why, sizeof(why)))
		die("open", why);
	if (l2_recover(&l2))
		die("recover", "failed");
	l2_start(&l2);
	/* Fill 90% of the regions: no reclaim during the write phase. */
	uint64_t per_region = (l2.region_size - L2FMT_BLOCK) / l2fmt_record_bytes((uint32_t)o.block);
	uint64_t items = per_region * (l2.nregions * 9 / 10);
	if (!items)
		die("size", "no block fits: make --size or --region-size larger");
	double wsec = write_phase(&l2, ns, items, data, (uint32_t)o.block);
	/* Close and reopen: every read then goes to the disk, and the scan is timed. */
	l2_close(&l2);
	if (l2_open(&l2, &cfg, why, sizeof(why)))
		die("reopen", why);
	double t = now_s();
	if (l2_recover(&l2))
		die("recover", "failed");
	double scan_ms = (now_s() - t) * 1e3;
	l2_start(&l2);
	if (l2.index.count != items)
		die("recover", "did not find every block written");
	double *lat = malloc(items * sizeof(*lat));
	double rsec = read_phase(&l2, ns, items, arena, o.block, o.qd, lat);
	qsort(lat, items, sizeof(*lat), cmp_double);
	double bytes = (double)items * (double)o.block;
	double wgbs = bytes / wsec / 1e9, rgbs = bytes / rsec / 1e9;
	double p50 = lat[items / 2] * 1e6, p99 = lat[items * 99 / 100] * 1e6;
	struct l2_stats_snapshot s;
	l2_stats_read(&l2, &s);
	printf("kvtier-l2-bench: %" PRIu64 " blocks of %" PRIu64 " bytes, queue depth %u, "
	       "regions of %" PRIu64 " bytes, %s buffers\n",
	       items, o.block, o.qd, l2.region_size, l2.ring.nfixed ? "registered" : "unregistered");
	printf("  write  %.2f GB/s (data bytes, until the last write completed)\n", wgbs);
	printf("  read   %.2f GB/s random order, latency p50 %.0f us p99 %.0f us\n", rgbs, p50, p99);
	printf("  scan   %.1f ms to rebuild the index of %" PRIu64 " blocks after a reopen\n",
	       scan_ms, items);
	if (o.json)
		printf("{\"block\": %" PRIu64 ", \"items\": %" PRIu64 ", \"queue_depth\": %u, "
		       "\"write_gbs\": %.3f, \"read_gbs\": %.3f, \"read_p50_us\": %.1f, "
		       "\"read_p99_us\": %.1f, \"scan_ms\": %.1f, \"checksum_failures\": %" PRIu64 "}\n",
		       o.block, items, o.qd, wgbs, rgbs, p50, p99, scan_ms, s.checksum_failures);
	l2_close(&l2);
	unlink(o.path);
	ns_registry_destroy(&reg);
	free(lat);
	free(data);
	munmap(arena, o.qd * o.block);
	return 0;
}
