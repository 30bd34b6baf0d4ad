/*
 * http.c — see http.h. Endpoints: the probes Kubernetes needs (/healthz,
 * /readyz) and /v1/stats, the counters of the tiers and the data plane as
 * JSON. Every failure answers the one JSON error shape
 * {"error": {"code", "message"}}.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dataplane.h"
#include "http.h"
#include "l1.h"
#include "metrics.h"
#include "settings.h"

#define HTTP_CONNECTION_LIMIT 256
#define HTTP_PER_IP_LIMIT 64
#define HTTP_TIMEOUT_S 30

struct http_server {
	struct MHD_Daemon *mhd;
	struct http_ctx *ctx;
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
	char body[512];
	snprintf(body, sizeof(body), "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n",
		 code, message);
	return respond_json(conn, status, body);
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static json_t *stats_l1(const struct l1 *l1)
{
	struct l1_stats_snapshot s;
	l1_stats_read(l1, &s);
	json_t *o = json_object();
#define L1_JSON(name, help) json_object_set_new(o, #name, json_integer((json_int_t)s.name));
	L1_COUNTERS(L1_JSON)
	L1_GAUGES(L1_JSON)
#undef L1_JSON
	return o;
}

static json_t *stats_dp(const struct dp *dp)
{
	const struct dp_stats *st = &dp->stats;
	json_t *o = json_object(), *ops = json_object(), *rejected = json_object();
#define DP_OP_JSON(name, op)                                                            \
	json_object_set_new(ops, #name,                                                  \
			    json_pack("{s:I,s:I,s:I}", "requests",                       \
				      (json_int_t)LOAD(st->op_##name.requests), "errors", \
				      (json_int_t)LOAD(st->op_##name.errors), "sum_ns",   \
				      (json_int_t)LOAD(st->op_##name.sum_ns)));
	DP_OPS(DP_OP_JSON)
#undef DP_OP_JSON
#define DP_REJECT_JSON(name, help) \
	json_object_set_new(rejected, #name, json_integer((json_int_t)LOAD(st->rejected_##name)));
	DP_REJECTS(DP_REJECT_JSON)
#undef DP_REJECT_JSON
	json_object_set_new(o, "ops", ops);
	json_object_set_new(o, "rejected", rejected);
#define DP_FIELD_JSON(f) json_object_set_new(o, #f, json_integer((json_int_t)LOAD(st->f)));
	DP_FIELD_JSON(connections_total)
	DP_FIELD_JSON(connections_active)
	DP_FIELD_JSON(clients_active)
	DP_FIELD_JSON(blocks_stored)
	DP_FIELD_JSON(blocks_loaded)
	DP_FIELD_JSON(blocks_load_missing)
	DP_FIELD_JSON(bytes_stored)
	DP_FIELD_JSON(bytes_loaded)
#undef DP_FIELD_JSON
	json_object_set_new(o, "buffers_registered",
			    json_integer((json_int_t)LOAD(dp->buffers.registered)));
	json_object_set_new(o, "buffers_registered_bytes",
			    json_integer((json_int_t)LOAD(dp->buffers.registered_bytes)));
	return o;
}

static enum MHD_Result respond_stats(struct MHD_Connection *conn, const struct http_ctx *ctx)
{
	json_t *root = json_object();
	json_object_set_new(root, "l1", stats_l1(ctx->l1));
	json_object_set_new(root, "dataplane", stats_dp(ctx->dp));
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
				     "cannot encode the stats");
	enum MHD_Result r = respond_json(conn, MHD_HTTP_OK, text);
	free(text);
	return r;
}

static enum MHD_Result respond_metrics(struct MHD_Connection *conn, const struct http_ctx *ctx)
{
	size_t len = 0;
	char *text = metrics_render(ctx->l1, ctx->dp, &len);
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

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version,
			      const char *upload_data, size_t *upload_data_size,
			      void **con_cls)
{
	struct http_server *srv = cls;
	(void)version;
	(void)upload_data;
	/* First call per request: headers only; answer on the next one. */
	if (!*con_cls) {
		*con_cls = srv;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0; /* no endpoint here takes a body */
		return MHD_YES;
	}
	bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
		   strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
	if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0) {
		if (!get)
			return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
					     "method_not_allowed", "use GET");
		if (strcmp(url, "/healthz") == 0)
			return respond_json(conn, MHD_HTTP_OK, "{\"status\":\"ok\"}\n");
		if (atomic_load(&srv->ctx->ready))
			return respond_json(conn, MHD_HTTP_OK, "{\"status\":\"ready\"}\n");
		return respond_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
				     "tiers are still opening");
	}
	if (strcmp(url, "/metrics") == 0) {
		if (!get)
			return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
					     "method_not_allowed", "use GET");
		return respond_metrics(conn, srv->ctx);
	}
	if (strcmp(url, "/v1/stats") == 0) {
		if (!get)
			return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
					     "method_not_allowed", "use GET");
		return respond_stats(conn, srv->ctx);
	}
	return respond_error(conn, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint");
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

struct http_server *http_start(const char *listen, struct http_ctx *ctx, char *why,
			       size_t whylen)
{
	struct sockaddr_storage ss;
	if (listen_addr(listen, &ss, why, whylen))
		return NULL;
	struct http_server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	srv->ctx = ctx;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, srv,
				    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				    MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTION_LIMIT,
				    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_PER_IP_LIMIT,
				    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
				    MHD_OPTION_END);
	if (!srv->mhd) {
		snprintf(why, whylen, "cannot listen on %s (in use, or not an address of this host)",
			 listen);
		free(srv);
		return NULL;
	}
	return srv;
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
	free(srv);
}
