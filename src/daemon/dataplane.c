/* dataplane.c — see dataplane.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "dataplane.h"
#include "log.h"
#include "ops.h"
#include "owner_stats.h"
#include "sessions.h"

/* --- loop sources and the after-batch hook --- */

/*
 * Out of fds, accept would fail and the listener stay readable: the loop
 * would spin. The spare fd, given up for a moment, takes the waiting
 * connection, which is closed at once (the client sees the close). True
 * when one was shed; false when there was no spare (another thread took the
 * fd it freed): then the listener rests until the next HELLO timer tick.
 */
static bool shed_at_fd_limit(struct dp *dp)
{
	if (dp->spare_fd >= 0)
		close(dp->spare_fd);
	int fd = dp->spare_fd >= 0 ? accept4(dp->listen_src.fd, NULL, NULL, SOCK_CLOEXEC) : -1;
	if (fd >= 0) {
		STAT_ADD(dp, rejected.fd_limit, 1);
		close(fd);
	}
	dp->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || dp->spare_fd < 0) {
		dp->listen_resting = true;
		loop_mod(dp->loop, &dp->listen_src, 0);
		return false;
	}
	return true;
}

static void on_accept(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, listen_src));
	for (;;) {
		int fd = accept4(src->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			if (shed_at_fd_limit(dp))
				continue;
			return;
		}
		if (fd < 0)
			return;
		if (dp->nconns >= dp->max_connections && !conn_shed_oldest_unbound(dp)) {
			STAT_ADD(dp, rejected.connection_limit, 1);
			close(fd);
			continue;
		}
		(void)conn_open(dp, fd); /* refused for its uid, or memory: the client sees a close */
	}
}

static void on_hello_timer(struct loop_timer *t)
{
	struct dp *dp = (struct dp *)((char *)t - offsetof(struct dp, hello_timer));
	conn_close_overdue(dp, kvt_now_ms());
	if (dp->listen_resting) { /* out of fds at the last accept: try again */
		dp->listen_resting = false;
		if (dp->spare_fd < 0)
			dp->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		loop_mod(dp->loop, &dp->listen_src, EPOLLIN);
	}
}

static void on_copies_done(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, copy_src));
	ops_transfers_done(dp, copy_engine_reap(dp->copy));
}

static void on_gpu_copies_done(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct dp *dp = (struct dp *)((char *)src - offsetof(struct dp, gpu_copy_src));
	ops_transfers_done(dp, copy_engine_reap(dp->gpu_copy));
}

/*
 * After each batch (loop.h): the replies the batch's completions queued are
 * sent, then the connections that died in it are freed.
 */
static void after_batch(struct loop_hook *hook)
{
	conn_after_batch((struct dp *)((char *)hook - offsetof(struct dp, batch_hook)));
}

/* --- for the control plane (loop thread) --- */

uint32_t dp_ns_connections(const struct dp *dp, const struct kvt_ns *ns)
{
	(void)dp;
	return ns->dp_conns;
}

int dp_register_buffer(struct dp *dp, uint64_t session_secret, pid_t pid,
		       const struct buffer_spec *spec, uint64_t *owner)
{
	struct buffer_user user = {0, pid, BUFFER_NO_UID};
	if (session_secret) {
		const struct dp_session *s = session_by_secret(dp, session_secret);
		if (!s)
			return -ESRCH;
		user = (struct buffer_user){s->id, 0, s->uid};
	}
	*owner = user.session;
	return buffers_register(&dp->buffers, &user, spec);
}

void dp_buffers_foreach(const struct dp *dp,
			void (*fn)(uint32_t index, const struct stbuf *b, pid_t pid, void *ctx),
			void *ctx)
{
	for (uint32_t i = 0; i < dp->buffers.cap; i++) {
		const struct stbuf *b = &dp->buffers.slots[i];
		if (!b->registered)
			continue;
		const struct dp_session *s = LIST_FIRST(&dp->sessions);
		while (s && s->id != b->session)
			s = LIST_NEXT(s, link);
		fn(i, b, s ? s->pid : b->pid, ctx); /* a path buffer: the pid it was given to */
	}
}

/* --- lifecycle --- */

static int bind_socket(const char *path, char *why, size_t whylen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (errno != EADDRINUSE)
			goto fail;
		/* Replace the socket file only when nobody answers on it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			snprintf(why, whylen, "another kvtierd is serving %s", path);
			close(fd);
			return -EADDRINUSE;
		}
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
			goto fail;
	}
	/*
	 * Read and write for the daemon's group as well as its user, whatever the
	 * umask: workers of another user connect when they are in that group
	 * (kvtier, under the systemd unit); the directory's mode says who gets in.
	 */
	if (chmod(path, 0660) || listen(fd, 256))
		goto fail;
	return fd;
fail: {
	int err = -errno;
	snprintf(why, whylen, "%s: %s", path, kvt_strerror(err));
	if (fd >= 0)
		close(fd);
	return err;
}
}

int dp_open(struct dp *dp, const struct dp_config *cfg, struct loop *loop, struct l1 *l1,
	    struct tiers *stack, struct ns_registry *namespaces, struct copy_engine *copy,
	    struct copy_engine *gpu_copy, char *why, size_t whylen)
{
	memset(dp, 0, sizeof(*dp));
	dp->loop = loop;
	dp->batch_hook.run = after_batch;
	dp->dispatch = ops_dispatch;
	dp->l1 = l1;
	dp->tiering = (struct tiering){.l1 = l1, .stack = stack, .stats = &dp->stats,
				       .store_wait_ms = cfg->store_wait_ms};
	STAILQ_INIT(&dp->tiering.waiting);
	stack->between = tiering_background;
	stack->between_ctx = &dp->tiering;
	dp->namespaces = namespaces;
	dp->copy = copy;
	dp->gpu_copy = gpu_copy;
	dp->max_connections = cfg->max_connections;
	dp->max_leases_per_client = cfg->max_leases_per_client;
	dp->lease_default_ms = cfg->lease_default_ms;
	dp->max_namespaces_per_client = cfg->max_namespaces_per_client;
	dp->peer = cfg->peer;
	dp->namespace_l1_quota = cfg->namespace_l1_quota;
	dp->namespace_l2_quota = cfg->namespace_l2_quota;
	snprintf(dp->socket_path, sizeof(dp->socket_path), "%s", cfg->socket_path);
	int err = buffers_init(&dp->buffers, 4096);
	if (err) {
		snprintf(why, whylen, "out of memory");
		return err;
	}
	dp->buffers.limits = cfg->buffers;
	int fd = bind_socket(cfg->socket_path, why, whylen);
	if (fd < 0) {
		buffers_destroy(&dp->buffers);
		return fd;
	}
	dp->listen_src = (struct loop_source){.fd = fd, .on_event = on_accept};
	dp->copy_src = (struct loop_source){.fd = copy->done.eventfd, .on_event = on_copies_done};
	dp->gpu_copy_src = (struct loop_source){.fd = gpu_copy ? gpu_copy->done.eventfd : -1,
						.on_event = on_gpu_copies_done};
	unsigned hello_period = cfg->peer.hello_timeout_ms / 2 < 1000 ? cfg->peer.hello_timeout_ms / 2
								       : 1000;
	dp->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if ((err = loop_add(loop, &dp->listen_src, EPOLLIN)) ||
	    (err = loop_add(loop, &dp->copy_src, EPOLLIN)) ||
	    (gpu_copy && (err = loop_add(loop, &dp->gpu_copy_src, EPOLLIN))) ||
	    (err = loop_add_timer(loop, &dp->hello_timer, hello_period, on_hello_timer))) {
		snprintf(why, whylen, "epoll: %s", kvt_strerror(err));
		close(fd);
		if (dp->spare_fd >= 0)
			close(dp->spare_fd);
		unlink(cfg->socket_path);
		buffers_destroy(&dp->buffers);
		return err;
	}
	loop_add_hook(loop, &dp->batch_hook);
	return 0;
}

void dp_close(struct dp *dp)
{
	loop_del_timer(dp->loop, &dp->hello_timer);
	loop_del(dp->loop, &dp->listen_src);
	close(dp->listen_src.fd);
	if (dp->spare_fd >= 0)
		close(dp->spare_fd);
	unlink(dp->socket_path);
	conn_close_all(dp);
	/* Copies and L2 reads in flight finish through the loop, which still has their sources. */
	while (!LIST_EMPTY(&dp->conns))
		loop_run_once(dp->loop, 100);
	loop_del(dp->loop, &dp->copy_src);
	if (dp->gpu_copy)
		loop_del(dp->loop, &dp->gpu_copy_src);
	after_batch(&dp->batch_hook); /* those retired without a round after */
	loop_remove_hook(dp->loop, &dp->batch_hook);
	buffers_destroy(&dp->buffers);
}

/* --- counters --- */

#define STAT_LIVE struct dp_stats
static const struct stat_def total_defs[] = {DP_TOTALS(STAT_DEF)};
#undef STAT_LIVE
#define STAT_LIVE struct dp_rejects
static const struct stat_def reject_defs[] = {DP_REJECTS(STAT_DEF)};
#undef STAT_LIVE

void dp_totals_visit(const struct dp *dp, stat_visit_fn fn, void *ctx)
{
	stats_visit(total_defs, sizeof(total_defs) / sizeof(total_defs[0]), &dp->stats, fn, ctx);
}

void dp_rejects_visit(const struct dp *dp, stat_visit_fn fn, void *ctx)
{
	stats_visit(reject_defs, sizeof(reject_defs) / sizeof(reject_defs[0]),
		    &dp->stats.rejected, fn, ctx);
}

static void op_snapshot(const char *name, const struct dp_op_stats *o, struct dp_op_snapshot *s)
{
	s->name = name;
	s->requests = atomic_load_explicit(&o->requests, memory_order_relaxed);
	s->errors = atomic_load_explicit(&o->errors, memory_order_relaxed);
	s->sum_ns = atomic_load_explicit(&o->sum_ns, memory_order_relaxed);
	for (unsigned b = 0; b < DP_HIST_BUCKETS; b++)
		s->buckets[b] = atomic_load_explicit(&o->buckets[b], memory_order_relaxed);
}

void dp_ops_visit(const struct dp *dp, void (*fn)(void *ctx, const struct dp_op_snapshot *op),
		  void *ctx)
{
	struct dp_op_snapshot s;
#define DP_OP_VISIT(name, opcode) \
	op_snapshot(#name, &dp->stats.op_##name, &s); \
	fn(ctx, &s);
	DP_OPS(DP_OP_VISIT)
#undef DP_OP_VISIT
}

void dp_buffer_kinds_visit(const struct dp *dp,
			   void (*fn)(void *ctx, const char *kind, uint64_t count, uint64_t bytes),
			   void *ctx)
{
	for (uint32_t k = KVT_BUFFER_SHM; k < BUFFER_KINDS; k++)
		fn(ctx, buffers_kind_name(k),
		   atomic_load_explicit(&dp->buffers.kind_registered[k], memory_order_relaxed),
		   atomic_load_explicit(&dp->buffers.kind_bytes[k], memory_order_relaxed));
}
