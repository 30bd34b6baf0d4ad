/*
 * http_guard.h — the control plane's connections, kept from starving it: a
 * request must be read and answered within HTTP_REQUEST_DEADLINE_MS of the
 * connection's start (or of its previous answer, on a kept-alive one), and
 * at most HTTP_MAX_WAITING connections may wait for that at once: a new one
 * past the limit closes the oldest waiting one. So slow clients (slowloris,
 * or a reader that never reads) cannot hold the server however many
 * connections one process opens, and a probe that sends its request at once
 * is answered. A connection whose request is being served (a handler runs)
 * is never closed under it.
 *
 * libmicrohttpd runs a thread per connection (http.c): every function here
 * is called from those threads and locks the guard. A connection is closed
 * with shutdown(2) of its socket; libmicrohttpd then ends it in its own
 * thread. The socket cannot be another's by then: libmicrohttpd tells
 * http_guard_closed (which forgets it under the same lock) before it closes
 * the fd.
 */
#ifndef KVTD_HTTP_GUARD_H
#define KVTD_HTTP_GUARD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "http_stats.h"

#define HTTP_REQUEST_DEADLINE_MS 10000
#define HTTP_MAX_WAITING 256

struct guarded_conn;

struct http_guard {
	pthread_mutex_t lock;
	TAILQ_HEAD(, guarded_conn) conns;  /* oldest wait first */
	unsigned waiting;                  /* not served now, not yet shed */
	struct http_stats *stats;
	uint64_t deadline_ms, max_waiting; /* HTTP_REQUEST_DEADLINE_MS, HTTP_MAX_WAITING (tests lower them) */
};

void http_guard_init(struct http_guard *g, struct http_stats *stats);
void http_guard_destroy(struct http_guard *g);

/*
 * A connection started on socket fd: tracked (NULL when out of memory: then
 * it is not, and libmicrohttpd's idle timeout alone ends it); first sheds
 * connections past their deadline, then the oldest waiting ones while more
 * than max_waiting wait.
 */
struct guarded_conn *http_guard_started(struct http_guard *g, int fd);
/* Its request is being served (a handler runs), or no longer. */
void http_guard_serving(struct http_guard *g, struct guarded_conn *c, bool serving);
/* Its request was answered: the next one's deadline starts now. */
void http_guard_answered(struct http_guard *g, struct guarded_conn *c);
/* libmicrohttpd closes it: forgotten (before its fd is closed). */
void http_guard_closed(struct http_guard *g, struct guarded_conn *c);

#endif
