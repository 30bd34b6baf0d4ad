/*
 * http_origin.h — whom the control plane answers: the Host a request names
 * and the Origin a browser adds. A web page on the operator's machine can
 * reach the control plane (DNS rebinding gives it a name of its own that
 * resolves to 127.0.0.1, so the browser treats kvtierd as the page's own
 * origin); the Host it sends is then that foreign name. Only IP literals,
 * localhost and the names the operator lists (--http-hosts) are accepted as
 * Host, and a browser's Origin must be the request's own host: a page of
 * another site cannot post to it either.
 *
 * Pure functions of their arguments; any thread.
 */
#ifndef KVTD_HTTP_ORIGIN_H
#define KVTD_HTTP_ORIGIN_H

#include <stdbool.h>

/*
 * True when host (the Host header: NULL when absent, as from an HTTP/1.0
 * client) is an IPv4 or bracketed IPv6 literal, localhost, or one of names
 * (comma-separated, NULL: none), with or without a port; names compare
 * without case and a trailing dot.
 */
bool http_host_allowed(const char *host, const char *names);

/*
 * True when origin (the Origin header: NULL when absent) is absent, or is
 * http:// or https:// followed by exactly host (the request's Host).
 */
bool http_origin_allowed(const char *origin, const char *host);

#endif
