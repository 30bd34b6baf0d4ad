/*
 * http.c — see http.h. Serves the probes (/healthz, /readyz) and /metrics
 * itself and hands /v1/ to api.c. Every failure answers the one JSON error
 * shape {"error": {"code", "message"}}.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "dataplane.h"
#include "http.h"
#include "http_guard.h"
#include "http_origin.h"
#include "api.h"
#include "log.h"
#include "l1.h"
#include "metrics.h"
#include "settings.h"
#include "tiers.h"
#include "webui.h"

/* Above what http_guard lets wait (HTTP_MAX_WAITING) plus those served: never reached. */
#define HTTP_CONNECTION_LIMIT 1024
/* Idle time on a connection (http_guard also bounds each request's whole time). */
#define HTTP_IDLE_TIMEOUT_S 10
/* A thread per connection: a handler waiting for the loop holds no other request. */
#define HTTP_THREAD_STACK (512 * 1024)

struct http_server {
	struct MHD_Daemon *mhd;
	struct http_ctx *ctx;
	struct http_guard guard;
};

static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned status,
				    const char *body)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, unsigned status,
				     const char *code, const char *message)
{
	json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	enum MHD_Result r = respond_json(conn, status, text ? text : "{}");
	free(text);
	return r;
}

static enum MHD_Result respond_document(struct MHD_Connection *conn, json_t *doc)
{
	char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(6));
	json_decref(doc);
	if (!text)
		return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
				     "cannot encode the answer");
	enum MHD_Result r = respond_json(conn, MHD_HTTP_OK, text);
	free(text);
	return r;
}

/* A dashboard file from the web directory, with its type and validator. */
static enum MHD_Result respond_web(struct MHD_Connection *conn, const struct http_ctx *ctx,
				   const char *url)
{
	struct webui_file f;
	if (!ctx->web_dir)
		return respond_error(conn, MHD_HTTP_NOT_FOUND, "not_found",
				     "the dashboard's files were not found (see --web-dir)");
	if (webui_open(ctx->web_dir, url, &f))
		return respond_error(conn, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint");
	const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
	bool fresh = inm && strcmp(inm, f.etag) == 0;
	struct MHD_Response *r = fresh ? MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT)
				       : MHD_create_response_from_fd(f.size, f.fd);
	if (fresh)
		close(f.fd);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f.content_type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, f.etag);
	/* Revalidated on every load (a 304 costs nothing), so an upgrade shows at once. */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	enum MHD_Result ret = MHD_queue_response(conn, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* "application/json", any case, alone or with parameters ("; charset=utf-8"). */
static bool is_json_type(const char *ct)
{
	static const char json[] = "application/json";
	if (!ct || strncasecmp(ct, json, sizeof(json) - 1) != 0)
		return false;
	char next = ct[sizeof(json) - 1];
	return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

/* A lower tier's part of a probe's answer, from its summary. */
static json_t *tier_probe(const struct tier_summary *m)
{
	json_t *o = json_pack("{s:s}", "state", m->state);
	if (m->writes)
		json_object_set_new(o, "writes", json_string(m->writes));
	if (m->reads)
		json_object_set_new(o, "reads", json_string(m->reads));
	if (m->next_probe_in_ms)
		json_object_set_new(o, "next_probe_in_ms", json_integer((json_int_t)m->next_probe_in_ms));
	if (m->reason)
		json_object_set_new(o, "reason", json_string(m->reason));
	return o;
}

/*
 * {"status": ..., and each lower tier's part under its name}: health says
 * "degraded" while a tier is (L1 serves on), else "ok"; readiness "ready".
 */
static enum MHD_Result respond_probe(struct MHD_Connection *conn, const struct http_ctx *ctx,
				     bool health)
{
	json_t *o = json_object();
	bool degraded = false;
	for (unsigned i = 0; i < ctx->tiers->nlower; i++) {
		const struct tier *t = ctx->tiers->lower[i];
		struct tier_summary m;
		t->ops->summary(t, &m);
		degraded |= m.degraded;
		json_object_set_new(o, t->name, tier_probe(&m));
	}
	json_t *body = json_pack("{s:s}", "status",
				 !health ? "ready" : degraded ? "degraded" : "ok");
	json_object_update(body, o);
	json_decref(o);
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
				     "out of memory");
	size_t n = strlen(text);
	char *line = realloc(text, n + 2);
	if (!line) {
		free(text);
		return MHD_NO;
	}
	memcpy(line + n, "\n", 2);
	enum MHD_Result ret = respond_json(conn, MHD_HTTP_OK, line);
	free(line);
	return ret;
}

/* Alive: 200 always; "degraded" while a lower tier is (L2 failed or unavailable, L3 degraded). */
static enum MHD_Result respond_health(struct MHD_Connection *conn, const struct http_ctx *ctx)
{
	return respond_probe(conn, ctx, true);
}

/* Ready once the tiers are open and L2's index is rebuilt (or its rebuild failed). */
static enum MHD_Result respond_ready(struct MHD_Connection *conn, const struct http_ctx *ctx)
{
	if (!atomic_load(&ctx->ready))
		return respond_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
				     "a tier is still starting (L2 rebuilds its index)");
	return respond_probe(conn, ctx, false);
}

static enum MHD_Result respond_metrics(struct MHD_Connection *conn, struct http_ctx *ctx)
{
	size_t len = 0;
	struct metrics_ns *ns = NULL;
	uint32_t nns = 0;
	struct api_error err;
	if (api_namespace_usage(ctx, &ns, &nns, &err))
		return respond_error(conn, err.status, err.code, err.message);
	char *text = metrics_render(ctx->l1, ctx->tiers, ctx->dp, &ctx->http_stats, ns, nns, &len);
	free(ns);
	if (!text)
		return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
				     "cannot render the metrics");
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, METRICS_CONTENT_TYPE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* Per request: the body read so far. */
struct request {
	char *body;
	size_t len;
	bool too_big;
};

/* The guard's record of conn (http_guard.h); NULL when it has none. */
static struct guarded_conn *guarded(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return info ? info->socket_context : NULL;
}

static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *srv = cls;
	(void)toe;
	http_guard_answered(&srv->guard, guarded(conn));
	struct request *req = *con_cls;
	if (req) {
		free(req->body);
		free(req);
		*con_cls = NULL;
	}
}

/* Constant-time: the time taken does not depend on where the strings differ. */
static bool token_matches(const char *given, const char *want)
{
	size_t lg = strlen(given), lw = strlen(want);
	unsigned char diff = (unsigned char)(lg != lw);
	for (size_t i = 0; i < lw; i++)
		diff |= (unsigned char)(want[i] ^ (i < lg ? given[i] : 0));
	return diff == 0;
}

static bool authorized(struct MHD_Connection *conn, const struct http_ctx *ctx)
{
	if (!ctx->admin_token)
		return true;
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);
	static const char bearer[] = "Bearer ";
	return h && strncmp(h, bearer, sizeof(bearer) - 1) == 0 &&
	       token_matches(h + sizeof(bearer) - 1, ctx->admin_token);
}

/* Appends an upload chunk; a body over HTTP_MAX_BODY is dropped and marked. */
static void take_body(struct request *req, const char *data, size_t n)
{
	if (req->too_big || req->len + n > HTTP_MAX_BODY) {
		req->too_big = true;
		return;
	}
	char *p = realloc(req->body, req->len + n + 1);
	if (!p) {
		req->too_big = true;
		return;
	}
	memcpy(p + req->len, data, n);
	req->len += n;
	p[req->len] = '\0';
	req->body = p;
}

static enum MHD_Result handle_v1(struct MHD_Connection *conn, struct http_server *srv,
				 const char *url, const char *method, struct request *req)
{
	json_t *body = NULL;
	if (api_method_mutates(method)) {
		if (!authorized(conn, srv->ctx))
			return respond_error(conn, MHD_HTTP_UNAUTHORIZED, "unauthorized",
					     "this endpoint needs Authorization: Bearer <admin token>");
		if (req->too_big)
			return respond_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
					     "the body is over 64 KiB");
		if (req->len) {
			const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
								     MHD_HTTP_HEADER_CONTENT_TYPE);
			if (!is_json_type(ct))
				return respond_error(conn, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
						     "unsupported_media_type",
						     "send the body as application/json");
			json_error_t jerr;
			body = json_loadb(req->body, req->len, JSON_REJECT_DUPLICATES, &jerr);
			if (!body) {
				char msg[256];
				snprintf(msg, sizeof(msg), "invalid JSON at line %d column %d: %s",
					 jerr.line, jerr.column, jerr.text);
				return respond_error(conn, MHD_HTTP_BAD_REQUEST, "invalid_json", msg);
			}
		}
	}
	json_t *out = NULL;
	struct api_error err;
	int rc = api_route(srv->ctx, method, url, body, &out, &err);
	json_decref(body);
	if (rc)
		return respond_error(conn, err.status, err.code, err.message);
	return respond_document(conn, out);
}

/*
 * A request that names a host this server does not answer to (DNS
 * rebinding), or comes from another site's page, is refused before its body
 * is read (http_origin.h). True when refused; *ret is the answer.
 */
static bool refuse_foreign(struct MHD_Connection *conn, struct http_server *srv,
			   enum MHD_Result *ret)
{
	const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
	if (!http_host_allowed(host, srv->ctx->hosts)) {
		atomic_fetch_add_explicit(&srv->ctx->http_stats.refused_host, 1, memory_order_relaxed);
		*ret = respond_error(conn, MHD_HTTP_FORBIDDEN, "forbidden_host",
				     "this Host is not an address, localhost or a name of --http-hosts");
		return true;
	}
	if (!http_origin_allowed(origin, host)) {
		atomic_fetch_add_explicit(&srv->ctx->http_stats.refused_origin, 1, memory_order_relaxed);
		*ret = respond_error(conn, MHD_HTTP_FORBIDDEN, "forbidden_origin",
				     "a page of another origin may not use the control plane");
		return true;
	}
	return false;
}

static enum MHD_Result serve(struct MHD_Connection *conn, struct http_server *srv,
			     const char *url, const char *method, struct request *req)
{
	bool get = !api_method_mutates(method);
	if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0 ||
	    strcmp(url, "/metrics") == 0) {
		if (!get)
			return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
					     "method_not_allowed", "use GET");
		if (strcmp(url, "/metrics") == 0)
			return respond_metrics(conn, srv->ctx);
		if (strcmp(url, "/healthz") == 0)
			return respond_health(conn, srv->ctx);
		return respond_ready(conn, srv->ctx);
	}
	if (strncmp(url, "/v1/", 4) == 0)
		return handle_v1(conn, srv, url, method, req);
	if (!get)
		return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
				     "use GET");
	return respond_web(conn, srv->ctx, url);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version,
			      const char *upload_data, size_t *upload_data_size,
			      void **con_cls)
{
	struct http_server *srv = cls;
	(void)version;
	/* First call per request: headers only; answer once the body is read. */
	if (!*con_cls) {
		enum MHD_Result refused;
		if (refuse_foreign(conn, srv, &refused))
			return refused;
		struct request *req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		*con_cls = req;
		return MHD_YES;
	}
	struct request *req = *con_cls;
	if (*upload_data_size) {
		take_body(req, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	struct guarded_conn *gc = guarded(conn);
	http_guard_serving(&srv->guard, gc, true);
	enum MHD_Result ret = serve(conn, srv, url, method, req);
	http_guard_serving(&srv->guard, gc, false);
	return ret;
}

/* Connections start and end: the guard tracks them (http_guard.h). */
static void connection_event(void *cls, struct MHD_Connection *conn, void **socket_context,
			     enum MHD_ConnectionNotificationCode code)
{
	struct http_server *srv = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *info =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = info ? http_guard_started(&srv->guard, info->connect_fd) : NULL;
	} else {
		http_guard_closed(&srv->guard, *socket_context);
		*socket_context = NULL;
	}
}

/*
 * libmicrohttpd's messages, at most one a second: a failing accept (at the
 * fd limit) repeats its message as fast as it retries. The rest are counted.
 */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	static _Atomic uint64_t last_ms, dropped;
	uint64_t now = kvt_now_ms(), then = atomic_load(&last_ms);
	if (now - then < 1000 || !atomic_compare_exchange_strong(&last_ms, &then, now)) {
		atomic_fetch_add(&dropped, 1);
		return;
	}
	char msg[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	log_warn("http: %s (%llu like it dropped since the last)", msg,
		 (unsigned long long)atomic_exchange(&dropped, 0));
}

static int listen_addr(const char *listen, struct sockaddr_storage *ss, char *why,
		       size_t whylen)
{
	char host[256];
	uint16_t port;
	memset(ss, 0, sizeof(*ss));
	if (kvtd_parse_listen(listen, host, sizeof(host), &port)) {
		snprintf(why, whylen, "bad address '%s'", listen);
		return -EINVAL;
	}
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		return 0;
	}
	snprintf(why, whylen, "'%s' is not a numeric IPv4 or IPv6 address", host);
	return -EINVAL;
}

/*
 * The control plane's listening socket, bound here rather than by
 * libmicrohttpd so that a failure says why: the address in use, not one of
 * this host, or not allowed. -errno with why.
 */
static int listen_socket(const char *addr, const struct sockaddr_storage *ss, char *why,
			 size_t whylen)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (const struct sockaddr *)ss, len) || listen(fd, 128)) {
		int err = errno;
		snprintf(why, whylen, "cannot listen on %s: %s%s", addr, strerror(err),
			 err == EADDRINUSE ? " (another process listens there)"
			 : err == EADDRNOTAVAIL ? " (not an address of this host)" : "");
		if (fd >= 0)
			close(fd);
		return -err;
	}
	return fd;
}

struct http_server *http_start(const char *listen, struct http_ctx *ctx, char *why,
			       size_t whylen)
{
	struct sockaddr_storage ss;
	if (listen_addr(listen, &ss, why, whylen))
		return NULL;
	int fd = listen_socket(listen, &ss, why, whylen);
	if (fd < 0)
		return NULL;
	struct http_server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(why, whylen, "out of memory");
		close(fd);
		return NULL;
	}
	srv->ctx = ctx;
	http_guard_init(&srv->guard, &ctx->http_stats);
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_USE_POLL | MHD_USE_ERROR_LOG;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, srv,
				    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first: for every message */
				    MHD_OPTION_LISTEN_SOCKET, fd,
				    MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTION_LIMIT,
				    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
				    MHD_OPTION_THREAD_STACK_SIZE, (size_t)HTTP_THREAD_STACK,
				    MHD_OPTION_NOTIFY_COMPLETED, request_done, srv,
				    MHD_OPTION_NOTIFY_CONNECTION, connection_event, srv,
				    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
				    MHD_OPTION_END);
	if (!srv->mhd) {
		http_guard_destroy(&srv->guard);
		snprintf(why, whylen, "cannot serve on %s: libmicrohttpd did not start (threads?)",
			 listen);
		close(fd);
		free(srv);
		return NULL;
	}
	return srv;
}

bool http_listen_is_loopback(const char *listen)
{
	struct sockaddr_storage ss;
	char why[128];
	if (listen_addr(listen, &ss, why, sizeof(why)))
		return false;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
}

uint16_t http_port(const struct http_server *srv)
{
	const union MHD_DaemonInfo *info =
		MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
	return info ? info->port : 0;
}

void http_stop(struct http_server *srv)
{
	if (!srv)
		return;
	MHD_stop_daemon(srv->mhd);
	http_guard_destroy(&srv->guard);
	free(srv);
}
