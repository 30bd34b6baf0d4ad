/*
 * http.h — the control plane: an embedded libmicrohttpd server with its own
 * polling thread. It reads the daemon's state through struct http_ctx and
 * never touches the tiers' internals.
 */
#ifndef KVTD_HTTP_H
#define KVTD_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>

struct http_ctx {
	_Atomic bool ready;     /* tiers open, indexes rebuilt */
};

struct http_server;

/* Starts listening on "ADDR:PORT". NULL with the reason in why. */
struct http_server *http_start(const char *listen, struct http_ctx *ctx, char *why,
			       size_t whylen);
void http_stop(struct http_server *srv);

#endif
