/* l2svc.c — see l2svc.h. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "kvtier/kvtier.h"
#include "l2svc.h"
#include "log.h"

static const struct tier l2_tier;
static void close_tier(struct tier *t);

static struct l2svc *of(const struct tier *t)
{
	return (struct l2svc *)((char *)t - offsetof(struct l2svc, tier));
}

static void *recover_thread(void *arg)
{
	struct l2svc *s = arg;
	uint64_t start = kvt_now_ns();
	s->recover_err = l2_recover(&s->l2);
	s->recover_ms = (double)(kvt_now_ns() - start) / 1e6;
	handoff_post(&s->recovered, &s->recovered_item);
	return NULL;
}

static void on_ring(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct l2svc *s = (struct l2svc *)((char *)src - offsetof(struct l2svc, ring_src));
	l2_process(&s->l2);
}

/*
 * Once a second: while L2 is failed, a probe write every backoff seconds,
 * the wait doubling (to L2SVC_PROBE_MAX_S) after each probe that fails.
 */
static void probe_tick(struct loop_timer *t)
{
	struct l2svc *s = (struct l2svc *)((char *)t - offsetof(struct l2svc, probe_timer));
	uint64_t now = kvt_now_ms();
	if (!atomic_load(&s->l2.stats.failed)) {
		s->probe_backoff_s = L2SVC_PROBE_FIRST_S;
		s->next_probe_ms = 0;
		atomic_store(&s->next_probe_in_ms, 0);
		return;
	}
	if (!s->next_probe_ms) /* it failed since the last tick */
		s->next_probe_ms = now + s->probe_backoff_s * 1000u;
	if (now >= s->next_probe_ms && l2_probe(&s->l2) == 0) {
		log_info("l2: failed; probing with a write (next in %u s if it fails)",
			 s->probe_backoff_s);
		s->next_probe_ms = now + s->probe_backoff_s * 1000u;
		if ((s->probe_backoff_s *= 2) > L2SVC_PROBE_MAX_S)
			s->probe_backoff_s = L2SVC_PROBE_MAX_S;
	}
	atomic_store(&s->next_probe_in_ms, s->next_probe_ms > now ? s->next_probe_ms - now : 1);
}

static void start_probe_timer(struct l2svc *s)
{
	s->probe_backoff_s = L2SVC_PROBE_FIRST_S;
	int err = loop_add_timer(s->loop, &s->probe_timer, 1000, probe_tick);
	if (err)
		log_warn("l2: no probe timer (%s): a failed L2 stays failed until restart",
			 kvt_strerror(err));
}

/* On the loop thread: the index is rebuilt; L2 serves from now on. */
static void on_recovered(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct l2svc *s = (struct l2svc *)((char *)src - offsetof(struct l2svc, done_src));
	if (!handoff_take(&s->recovered))
		return; /* a wake-up left from a post already taken */
	pthread_join(s->thread, NULL);
	s->thread_running = false;
	loop_del(s->loop, &s->done_src);
	if (s->recover_err) {
		log_error("l2: cannot read the regions: %s; continuing with L1 only",
			  kvt_strerror(s->recover_err));
		atomic_store(&s->l2.stats.failed, 1);
	} else {
		struct l2_stats_snapshot st;
		l2_stats_read(&s->l2, &st);
		log_info("l2: index rebuilt in %.1f ms: %" PRIu64 " items, %" PRIu64
			 " records dropped", s->recover_ms, st.recovered_items, st.recovery_dropped);
		l2_start(&s->l2);
		int err = writer_open(&s->writer, s->l1, &s->l2, s->loop);
		if (err) /* the writer then copies, as at eviction */
			log_warn("l2: no checksum thread (%s): written behind from write buffers",
				 kvt_strerror(err));
		start_probe_timer(s);
		s->started = true;
		tiers_set_evict(s->stack, true);
	}
	s->on_ready(s->ready_ctx);
}

static int open_tier(struct l2svc *s, const struct kvtd_config *cfg, struct l1 *l1,
		     struct loop *loop)
{
	struct l2_config lc = {
		.path = cfg->l2_path, .size = cfg->l2_size, .region_size = cfg->l2_region_size,
		.queue_depth = (uint32_t)cfg->l2_queue_depth, .arena = l1->arena.base,
		.write_buffers = (uint32_t)cfg->l2_write_buffers,
		.arena_size = l1->arena.size,
	};
	char why[512];
	int err = l2_open(&s->l2, &lc, why, sizeof(why));
	if (err) {
		log_error("l2: %s", why);
		l2_close(&s->l2);
		return err;
	}
	s->open = true;
	if (s->l2.in_memory)
		log_warn("l2: %s is on tmpfs or ramfs: O_DIRECT works there, but this \"L2\" "
			 "is memory, not a disk, and is lost at reboot; give a path on NVMe",
			 cfg->l2_path);
	char size[64], region[64];
	kvt_format_size(s->l2.nregions * s->l2.region_size, size, sizeof(size));
	kvt_format_size(s->l2.region_size, region, sizeof(region));
	log_info("l2: %s: %s in %u regions of %s, queue depth %u, %s buffers", cfg->l2_path,
		 size, s->l2.nregions, region, s->l2.ring.depth,
		 s->l2.ring.nfixed ? "registered" : "unregistered");
	s->ring_src = (struct loop_source){l2_event_fd(&s->l2), on_ring};
	err = handoff_init(&s->recovered);
	s->done_src = (struct loop_source){s->recovered.eventfd, on_recovered};
	if (err || (err = loop_add(loop, &s->ring_src, EPOLLIN)) ||
	    (err = loop_add(loop, &s->done_src, EPOLLIN))) {
		log_error("l2: event loop: %s", kvt_strerror(err));
		return err;
	}
	if ((err = -pthread_create(&s->thread, NULL, recover_thread, s))) {
		log_error("l2: cannot start the index rebuild: %s", kvt_strerror(err));
		return err;
	}
	s->thread_running = true;
	return 0;
}

int l2svc_open(struct l2svc *s, const struct kvtd_config *cfg, struct l1 *l1,
	       struct tiers *stack, struct loop *loop, void (*on_ready)(void *ctx), void *ctx)
{
	*s = (struct l2svc){.tier = l2_tier, .loop = loop, .l1 = l1, .stack = stack,
			    .on_ready = on_ready, .ready_ctx = ctx, .recovered.eventfd = -1,
			    .probe_timer.src.fd = -1};
	int err = open_tier(s, cfg, l1, loop);
	if (!err && (err = tiers_add(stack, &s->tier)))
		log_error("l2: cannot join the tier stack: %s", kvt_strerror(err));
	if (err) {
		close_tier(&s->tier);
		return err;
	}
	log_info("l2: rebuilding the index; /readyz answers 503 until done");
	return 0;
}

/* What L1 holds that L2 does not, as the log says it. */
static void dirty_now(const struct l2svc *s, uint64_t *items, char *size, size_t len)
{
	struct l1_stats_snapshot st;
	l1_stats_read(s->l1, &st);
	*items = st.dirty_items;
	kvt_format_size(st.dirty_bytes, size, len);
}

static void flush(struct tier *t, uint32_t limit_ms)
{
	struct l2svc *s = of(t);
	if (!s->started || !s->stack->evict)
		return;
	uint64_t items;
	char size[32];
	dirty_now(s, &items, size, sizeof(size));
	if (!items)
		return;
	log_info("stop: writing %" PRIu64 " dirty items (%s) to L2, for at most %u ms", items, size,
		 limit_ms);
	uint64_t start = kvt_now_ms(), last_note = start;
	for (;;) {
		loop_run_once(s->loop, 10); /* the submit hook writes behind; the ring completes */
		dirty_now(s, &items, size, sizeof(size));
		uint64_t now = kvt_now_ms();
		if (!items && l2ring_idle(&s->l2.ring)) {
			log_info("stop: L2 holds what L1 held (%.1f s)", (double)(now - start) / 1e3);
			return;
		}
		if (now - start >= limit_ms) {
			log_warn("stop: %" PRIu64 " dirty items (%s) not written within stop-flush-ms: lost",
				 items, size);
			return;
		}
		if (now - last_note >= 1000) {
			log_info("stop: %" PRIu64 " dirty items (%s) left", items, size);
			last_note = now;
		}
	}
}

static void close_tier(struct tier *t)
{
	struct l2svc *s = of(t);
	if (s->thread_running)
		pthread_join(s->thread, NULL);
	if (s->started) {
		writer_close(&s->writer);
		loop_del_timer(s->loop, &s->probe_timer);
	}
	if (s->open) {
		loop_del(s->loop, &s->ring_src);
		l2_close(&s->l2);
		handoff_destroy(&s->recovered);
	}
	s->open = s->started = false;
}

/* --- the tier's ops (tier.h) --- */

static bool contains(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key)
{
	struct l2svc *s = of(t);
	return s->started && l2_contains(&s->l2, ns, key);
}

static bool readable(struct tier *t)
{
	struct l2svc *s = of(t);
	return s->started && l2_readable(&s->l2);
}

/* A read of the engine's, for a tier_read (freed when done). */
struct l2svc_read {
	struct l2_read rd;
	struct tier_read *up;
};

static void read_done(struct l2_read *rd, int status)
{
	struct l2svc_read *r = (struct l2svc_read *)((char *)rd - offsetof(struct l2svc_read, rd));
	struct tier_read *up = r->up;
	uint32_t length = rd->length;
	free(r);
	up->done(up, status ? -ENOENT : 0, length); /* an I/O error or a bad checksum: a miss, counted by L2 */
}

/*
 * The part's length first, then its target: taking an L1 slot may evict L1
 * items whose victims reclaim an L2 region, so the engine is asked for the
 * part again when the read begins, and may miss it then.
 */
static int read_begin(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		      uint16_t rank, struct tier_read *up)
{
	struct l2svc *s = of(t);
	int64_t len = l2_part_length(&s->l2, ns, key, rank);
	struct l2svc_read *r = len < 0 ? NULL : malloc(sizeof(*r));
	if (!r)
		return -ENOENT;
	*r = (struct l2svc_read){.rd.done = read_done, .up = up};
	uint8_t *dst = up->target(up, (uint32_t)len);
	int rc = dst ? l2_read_begin(&s->l2, ns, key, rank, dst, up->cap, &r->rd) : -ENOENT;
	if (rc < 0) {
		free(r);
		up->done(up, -ENOENT, 0);
	} else if (rc == 1) { /* from a write buffer, copied already */
		read_done(&r->rd, 0);
	}
	return 0;
}

static struct l1_lower_tier victims(struct tier *t)
{
	return writer_lower_tier(&of(t)->writer);
}

static bool writable(struct tier *t)
{
	struct l2svc *s = of(t);
	return s->started && l2_writable(&s->l2);
}

static void victim_counts(const struct tier *t, uint64_t *taken, uint64_t *dropped)
{
	struct l2_stats_snapshot st;
	l2_stats_read(&of(t)->l2, &st);
	*taken = st.victims_written + st.victims_present;
	*dropped = st.victims_dropped_behind + st.victims_dropped_unfit + st.victims_dropped_off +
		   st.victims_dropped_quota;
}

static void ns_usage(struct tier *t, const struct kvt_ns *ns, struct tier_usage *out)
{
	struct l2svc *s = of(t);
	*out = (struct tier_usage){.quota = ns->l2_quota};
	if (s->started)
		l2_ns_usage(&s->l2, ns, &out->items, &out->bytes);
}

static uint64_t ns_drop(struct tier *t, const struct kvt_ns *ns)
{
	struct l2svc *s = of(t);
	return s->started ? l2_ns_drop(&s->l2, ns) : 0;
}

static void ns_trim(struct tier *t, const struct kvt_ns *ns)
{
	struct l2svc *s = of(t);
	if (s->started)
		l2_ns_trim(&s->l2, ns);
}

static int64_t evict(struct tier *t, uint64_t bytes)
{
	struct l2svc *s = of(t);
	return s->started ? (int64_t)l2_evict(&s->l2, bytes) : -EAGAIN;
}

/* Completions first: they give the writer room. */
static void reap(struct tier *t)
{
	struct l2svc *s = of(t);
	if (s->started)
		l2_poll(&s->l2);
}

/* What the round queued goes to the kernel; while I/O is out, the loop looks again soon. */
static int submit(struct tier *t)
{
	struct l2svc *s = of(t);
	return s->started && l2_poll(&s->l2) ? L2SVC_POLL_MS : -1;
}

static void summary(const struct tier *t, struct tier_summary *out)
{
	const struct l2svc *s = of(t);
	struct l2_stats_snapshot st;
	l2_stats_read(&s->l2, &st);
	bool failed = st.failed, ready = st.ready;
	const char *state = failed ? (ready ? "failed" : "unavailable") : (ready ? "ready" : "recovering");
	*out = (struct tier_summary){
		.state = state, .degraded = failed,
		.writes = ready && !failed ? "on" : "stopped",
		.reads = ready ? "served" : "stopped",
		.next_probe_in_ms = ready && failed ? atomic_load(&s->next_probe_in_ms) : 0,
		.capacity_bytes = st.capacity_bytes, .used_bytes = st.used_bytes, .items = st.items,
		.hits = atomic_load(&t->counters.lookup_hits), .misses = st.read_misses,
		.evictions = st.items_reclaimed + st.items_dropped_admin + st.items_dropped_quota};
}

static void stats_visit_tier(const struct tier *t, stat_visit_fn fn, void *ctx)
{
	l2_stats_visit(&of(t)->l2, fn, ctx);
}

static const struct tier_ops l2_ops = {
	.contains = contains, .readable = readable, .read_begin = read_begin,
	.victims = victims, .writable = writable, .victim_counts = victim_counts,
	.ns_usage = ns_usage, .ns_drop = ns_drop, .ns_trim = ns_trim, .evict = evict,
	.reap = reap, .submit = submit, .summary = summary, .stats_visit = stats_visit_tier,
	.flush = flush, .close = close_tier,
};

static const struct tier l2_tier = {
	.ops = &l2_ops, .name = "l2", .wire = KVT_TIER_L2, .unit = "items",
	.usage_help = "L2 bytes a namespace holds (records, headers included).",
	.quota_help = "A namespace's L2 quota (0: none).",
};
