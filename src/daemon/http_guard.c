/* http_guard.c — see http_guard.h. */
#include "config.h"

#include <stdlib.h>
#include <sys/socket.h>

#include "clock.h"
#include "http_guard.h"

struct guarded_conn {
	int fd;
	uint64_t since_ms;       /* the connection's start, or its last answer */
	bool serving;
	bool shed;
	TAILQ_ENTRY(guarded_conn) link;
};

void http_stats_visit(const struct http_stats *s, stat_visit_fn fn, void *ctx)
{
#define STAT_LIVE struct http_stats
	static const struct stat_def defs[] = {HTTP_STATS(STAT_DEF)};
#undef STAT_LIVE
	stats_visit(defs, sizeof(defs) / sizeof(defs[0]), s, fn, ctx);
}

void http_guard_init(struct http_guard *g, struct http_stats *stats)
{
	pthread_mutex_init(&g->lock, NULL);
	TAILQ_INIT(&g->conns);
	g->waiting = 0;
	g->stats = stats;
	g->deadline_ms = HTTP_REQUEST_DEADLINE_MS;
	g->max_waiting = HTTP_MAX_WAITING;
}

void http_guard_destroy(struct http_guard *g)
{
	struct guarded_conn *c;
	while ((c = TAILQ_FIRST(&g->conns))) { /* none after libmicrohttpd stopped */
		TAILQ_REMOVE(&g->conns, c, link);
		free(c);
	}
	pthread_mutex_destroy(&g->lock);
}

static bool waits(const struct guarded_conn *c)
{
	return !c->serving && !c->shed;
}

/* Closes c's socket under libmicrohttpd: its thread sees the end and closes c. */
static void shed(struct http_guard *g, struct guarded_conn *c, _Atomic uint64_t *counter)
{
	shutdown(c->fd, SHUT_RDWR);
	c->shed = true;
	g->waiting--;
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void shed_overdue(struct http_guard *g, uint64_t now)
{
	struct guarded_conn *c;
	TAILQ_FOREACH(c, &g->conns, link)
		if (waits(c) && now - c->since_ms >= g->deadline_ms)
			shed(g, c, &g->stats->shed_overdue);
}

static void shed_oldest(struct http_guard *g)
{
	struct guarded_conn *c;
	TAILQ_FOREACH(c, &g->conns, link)
		if (g->waiting > g->max_waiting && waits(c))
			shed(g, c, &g->stats->shed_crowded);
}

struct guarded_conn *http_guard_started(struct http_guard *g, int fd)
{
	struct guarded_conn *c = calloc(1, sizeof(*c));
	uint64_t now = kvt_now_ms();
	pthread_mutex_lock(&g->lock);
	shed_overdue(g, now);
	if (c) {
		*c = (struct guarded_conn){.fd = fd, .since_ms = now};
		TAILQ_INSERT_TAIL(&g->conns, c, link);
		g->waiting++;
	}
	shed_oldest(g);
	pthread_mutex_unlock(&g->lock);
	atomic_fetch_add_explicit(&g->stats->connections, 1, memory_order_relaxed);
	return c;
}

void http_guard_serving(struct http_guard *g, struct guarded_conn *c, bool serving)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	if (!c->shed && c->serving != serving) {
		c->serving = serving;
		if (serving)
			g->waiting--;
		else
			g->waiting++;
	}
	pthread_mutex_unlock(&g->lock);
}

void http_guard_answered(struct http_guard *g, struct guarded_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	c->since_ms = kvt_now_ms();
	TAILQ_REMOVE(&g->conns, c, link); /* the list stays oldest first */
	TAILQ_INSERT_TAIL(&g->conns, c, link);
	pthread_mutex_unlock(&g->lock);
}

void http_guard_closed(struct http_guard *g, struct guarded_conn *c)
{
	atomic_fetch_sub_explicit(&g->stats->connections, 1, memory_order_relaxed);
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	if (waits(c))
		g->waiting--;
	TAILQ_REMOVE(&g->conns, c, link);
	pthread_mutex_unlock(&g->lock);
	free(c);
}
