/*
 * policy.h — what may change while kvtierd runs: the mode (evict or
 * l1-only), L1's watermarks, the lease limits, how long a STORE waits for
 * the writer, and the log level. Each has
 * one apply function, and both ways in call the same ones: SIGHUP (the live
 * keys of the reread settings, settings.c's table says which) and
 * PUT /v1/policy (the body merged into what runs). The cross-field rules are
 * settings.h's kvtd_check_rules, for every way in.
 *
 * Owner: the event loop thread (the control plane calls in through a loop
 * call). The header needs no engine's: the body parser (api_body.h) and its
 * fuzz target use struct policy_values alone.
 */
#ifndef KVTD_POLICY_H
#define KVTD_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

struct l1;
struct dp;
struct tiers;
struct kvtd_config;

struct policy_values {
	bool evict;                /* mode evict (L1 victims to the victim tier, misses read from it); else l1-only */
	double high, low;          /* L1 watermarks */
	uint32_t lease_max_ms;
	uint32_t lease_default_ms;
	uint32_t store_wait_ms;    /* a STORE's bound on waiting for the writer; 0: drop */
	enum kvt_log_level log_level;
};

/* What a policy acts on. */
struct policy {
	struct l1 *l1;
	struct dp *dp;
	struct tiers *tiers;
};

void policy_read(const struct policy *p, struct policy_values *out);
/*
 * Applies what differs between next and what runs, each through its apply
 * function. 0; -EINVAL when a cross-field rule fails (kvtd_check_rules); -EAGAIN for a
 * change of mode while no victim tier serves (none, or L2 rebuilding its
 * index, or failed to): nothing is applied on an error.
 */
int policy_apply(struct policy *p, const struct policy_values *next);
/* The live keys of cfg (reread by SIGHUP) over cur: the mode is not a key and stays. */
void policy_from_config(const struct kvtd_config *cfg, const struct policy_values *cur,
			struct policy_values *out);

#endif
