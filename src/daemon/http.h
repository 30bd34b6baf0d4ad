/*
 * http.h — the control plane: an embedded libmicrohttpd server with its own
 * polling thread. It reads the daemon's state through struct http_ctx and
 * never touches the tiers' internals.
 */
#ifndef KVTD_HTTP_H
#define KVTD_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct l1;
struct dp;

/* What the control plane reads; every field it reads is atomic. */
struct http_ctx {
	_Atomic bool ready;     /* tiers open, indexes rebuilt */
	const struct l1 *l1;
	const struct dp *dp;
};

struct http_server;

/* Starts listening on "ADDR:PORT". NULL with the reason in why. */
struct http_server *http_start(const char *listen, struct http_ctx *ctx, char *why,
			       size_t whylen);
void http_stop(struct http_server *srv);
/* The port it listens on (the one chosen, when asked for port 0). */
uint16_t http_port(const struct http_server *srv);

#endif
