/*
 * ctl_ctx.h — what the control plane works on: the engines whose counters
 * its endpoints read and the loop call through which they change state.
 * http.c (the server) and api.c (the JSON endpoints) both take it; main.c
 * fills it.
 *
 * Owner: main.c sets it up before the server starts; the server's thread
 * reads it, and changes state only through loopcall, on the loop thread.
 */
#ifndef KVTD_CTL_CTX_H
#define KVTD_CTL_CTX_H

#include <stdatomic.h>
#include <stdbool.h>

#include "http_stats.h"

struct l1;
struct tiers;
struct dp;
struct ns_registry;
struct loopcall;

struct http_ctx {
	_Atomic bool ready;          /* tiers open, indexes rebuilt */
	struct l1 *l1;               /* counters read here; changed via calls */
	struct tiers *tiers;         /* the lower tiers: summaries and stats read here */
	struct dp *dp;                /* counters read here; changed via calls */
	struct ns_registry *namespaces;
	struct loopcall *calls;
	struct policy *policy;       /* PUT /v1/policy applies through it (on the loop) */
	const char *admin_token;     /* NULL: mutating endpoints are open */
	const char *web_dir;         /* the dashboard's files; NULL: none found */
	const char *hosts;           /* --http-hosts: names accepted as Host; NULL: none */
	struct http_stats http_stats; /* the server's refusals (any thread) */
};

#endif
