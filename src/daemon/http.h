/*
 * http.h — the control plane: an embedded libmicrohttpd server with its own
 * polling thread. It routes requests, reads bodies (capped), checks the
 * admin token, and answers JSON or the Prometheus text; it reads counters
 * directly (they are atomic) and changes state only through loopcall, on the
 * event loop thread.
 */
#ifndef KVTD_HTTP_H
#define KVTD_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl_ctx.h"

/* Bytes of a request body the control plane reads; more is 413. */
#define HTTP_MAX_BODY (64 * 1024)

struct http_server;

/* Starts listening on "ADDR:PORT". NULL with the reason in why. */
struct http_server *http_start(const char *listen, struct http_ctx *ctx, char *why,
			       size_t whylen);
void http_stop(struct http_server *srv);
/* The port it listens on (the one chosen, when asked for port 0). */
uint16_t http_port(const struct http_server *srv);

/* Whether "ADDR:PORT" names a loopback address (127.0.0.0/8 or ::1). */
bool http_listen_is_loopback(const char *listen);

#endif
