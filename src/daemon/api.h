/*
 * api.h — the JSON endpoints under /v1: what each one answers and how it
 * validates its body. Every reply is a JSON document; every failure fills
 * struct api_error, which http.c turns into {"error": {"code", "message"}}.
 * Anything that reads or changes the tiers' state runs on the loop thread
 * through loopcall.
 */
#ifndef KVTD_API_H
#define KVTD_API_H

#include <jansson.h>

#include "api_body.h"
#include "ctl_ctx.h"

/* The route for method and url: 0 with *out set (status 200), or an error. */
int api_route(struct http_ctx *ctx, const char *method, const char *url, json_t *body,
	      json_t **out, struct api_error *err);

struct metrics_ns;
/*
 * Copies every namespace's usage and quotas (on the loop thread) into a
 * malloc'd array (*out, free it) of *n. 0, or -1 with the error answer in
 * *err (503: the loop did not take the call in time, or the daemon stops),
 * as every endpoint that calls the loop answers it.
 */
int api_namespace_usage(struct http_ctx *ctx, struct metrics_ns **out, uint32_t *n,
			struct api_error *err);

/* Whether the method changes state (needs the admin token when one is set). */
bool api_method_mutates(const char *method);

#endif
