/*
 * http_stats.h — the control plane's own counters (stat_table.h's shape):
 * requests it refused before serving them, connections it shed, loop calls
 * that waited past their deadline. Written by the HTTP threads with relaxed
 * atomics, read from any thread.
 */
#ifndef KVTD_HTTP_STATS_H
#define KVTD_HTTP_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "stat_table.h"

#define HTTP_STATS(X) \
	X(refused_host, COUNTER, "kvtier_http_refused_total", "reason=\"host\"", \
	  "Control-plane requests refused, by reason: a Host header that is not an IP address, localhost or a name of --http-hosts (403).") \
	X(refused_origin, COUNTER, "kvtier_http_refused_total", "reason=\"origin\"", \
	  "An Origin header that is not the request's own host (403).") \
	X(shed_overdue, COUNTER, "kvtier_http_refused_total", "reason=\"overdue\"", \
	  "Connections closed because their request was not read and answered within its deadline (10 s).") \
	X(shed_crowded, COUNTER, "kvtier_http_refused_total", "reason=\"crowded\"", \
	  "Connections closed, oldest first, to make room: more than 256 waited for a request to finish.") \
	X(loop_busy, COUNTER, "kvtier_http_refused_total", "reason=\"loop_busy\"", \
	  "Requests answered 503: the event loop did not take their call within its deadline (5 s).") \
	X(connections, GAUGE, "kvtier_http_connections", "", \
	  "Control-plane connections open.")

struct http_stats {
	HTTP_STATS(STAT_LIVE_FIELD)
};

/* Calls fn with each counter of HTTP_STATS and its value now (any thread). */
void http_stats_visit(const struct http_stats *s, stat_visit_fn fn, void *ctx);

#endif
