/* l2svc.c — see l2svc.h. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvtier/kvtier.h"
#include "l2svc.h"
#include "log.h"

static void *recover_thread(void *arg)
{
	struct l2svc *s = arg;
	uint64_t start = kvt_now_ns();
	s->recover_err = l2_recover(&s->l2);
	s->recover_ms = (double)(kvt_now_ns() - start) / 1e6;
	uint64_t one = 1;
	if (write(s->done_src.fd, &one, sizeof(one)) != sizeof(one))
		log_error("l2: cannot wake the event loop: %s", strerror(errno));
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

const char *l2svc_state(const struct l2svc *s)
{
	bool ready = atomic_load(&s->l2.stats.ready), failed = atomic_load(&s->l2.stats.failed);
	if (failed)
		return ready ? "failed" : "unavailable";
	return ready ? "ready" : "recovering";
}

/*
 * Before the loop waits: completions are taken, the writer hands dirty L1
 * items down and waiting STOREs are retried (tiering_background), and what
 * this round queued goes to the kernel; while I/O is out the loop looks
 * again within L2SVC_POLL_MS even without a wake-up from the ring's eventfd.
 */
static void submit_queued(struct loop_hook *hook)
{
	struct l2svc *s = (struct l2svc *)((char *)hook - offsetof(struct l2svc, submit_hook));
	l2_poll(&s->l2); /* completions first: they give the writer room */
	int wait_ms = tiering_background(&s->dp->tiering, kvt_now_ms());
	if (l2_poll(&s->l2))
		loop_wake_within(s->loop, L2SVC_POLL_MS);
	if (wait_ms >= 0) /* a waiting STORE's bound */
		loop_wake_within(s->loop, wait_ms);
}

void l2svc_set_evict(struct l2svc *s, bool evict)
{
	struct l1_lower_tier lower = writer_lower_tier(&s->writer);
	s->dp->tiering.evict = evict;
	l1_set_lower_tier(s->l1, evict ? &lower : NULL);
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
		loop_add_hook(s->loop, &s->submit_hook);
		start_probe_timer(s);
		s->dp->tiering.l2 = &s->l2;
		l2svc_set_evict(s, true);
		s->started = true;
	}
	s->on_ready(s->ready_ctx);
}

int l2svc_open(struct l2svc *s, const struct kvtd_config *cfg, struct l1 *l1, struct dp *dp,
	       struct loop *loop, void (*on_ready)(void *ctx), void *ctx)
{
	*s = (struct l2svc){.loop = loop, .submit_hook.run = submit_queued, .l1 = l1, .dp = dp,
			    .on_ready = on_ready, .ready_ctx = ctx, .done_src.fd = -1,
			    .probe_timer.src.fd = -1};
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
	s->done_src = (struct loop_source){eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), on_recovered};
	if (s->done_src.fd < 0 || (err = loop_add(loop, &s->ring_src, EPOLLIN)) ||
	    (err = loop_add(loop, &s->done_src, EPOLLIN))) {
		err = err ? err : -errno;
		log_error("l2: event loop: %s", kvt_strerror(err));
		return err;
	}
	if ((err = -pthread_create(&s->thread, NULL, recover_thread, s))) {
		log_error("l2: cannot start the index rebuild: %s", kvt_strerror(err));
		return err;
	}
	s->thread_running = true;
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

void l2svc_flush(struct l2svc *s, uint32_t limit_ms)
{
	if (!s->started || !s->dp->tiering.evict)
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

void l2svc_close(struct l2svc *s)
{
	if (s->thread_running)
		pthread_join(s->thread, NULL);
	if (s->started) {
		l1_set_lower_tier(s->l1, NULL);
		writer_close(&s->writer);
		loop_remove_hook(s->loop, &s->submit_hook);
		loop_del_timer(s->loop, &s->probe_timer);
	}
	if (s->open) {
		loop_del(s->loop, &s->ring_src);
		l2_close(&s->l2);
		if (s->done_src.fd >= 0)
			close(s->done_src.fd);
	}
	s->open = s->started = false;
}
