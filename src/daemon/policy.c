/* policy.c — see policy.h. */
#include "config.h"

#include <errno.h>

#include "dp.h"
#include "l1.h"
#include "policy.h"
#include "settings.h"
#include "tiers.h"

void policy_read(const struct policy *p, struct policy_values *out)
{
	*out = (struct policy_values){
		.evict = p->tiers->evict, .high = p->l1->high_watermark,
		.low = p->l1->low_watermark, .lease_max_ms = p->l1->max_lease_ms,
		.lease_default_ms = p->dp->lease_default_ms,
		.store_wait_ms = p->dp->tiering.store_wait_ms, .log_level = kvt_log_get_level(),
	};
}

/* --- one apply function per live setting --- */

/* The mode moves with the victim tier: while none serves, it stays (policy_apply refuses a change). */
static int apply_mode(struct policy *p, const struct policy_values *v)
{
	(void)tiers_set_evict(p->tiers, v->evict); /* -EAGAIN: nothing to move */
	return 0;
}

static int apply_watermarks(struct policy *p, const struct policy_values *v)
{
	return l1_set_watermarks(p->l1, v->high, v->low);
}

static int apply_lease_max(struct policy *p, const struct policy_values *v)
{
	l1_set_max_lease(p->l1, v->lease_max_ms);
	return 0;
}

static int apply_lease_default(struct policy *p, const struct policy_values *v)
{
	p->dp->lease_default_ms = v->lease_default_ms;
	return 0;
}

static int apply_store_wait(struct policy *p, const struct policy_values *v)
{
	p->dp->tiering.store_wait_ms = v->store_wait_ms;
	return 0;
}

static int apply_log_level(struct policy *p, const struct policy_values *v)
{
	(void)p;
	kvt_log_set_level(v->log_level);
	return 0;
}

/* Every setting, applied alike whether it changed or not (applying one again is a no-op). */
static int (*const setters[])(struct policy *p, const struct policy_values *v) = {
	apply_mode, apply_watermarks, apply_lease_max, apply_lease_default, apply_store_wait,
	apply_log_level,
};

int policy_apply(struct policy *p, const struct policy_values *next)
{
	/* The refusals first, so that a refused change leaves everything as it was. */
	if (next->evict != p->tiers->evict && !tiers_victim_serves(p->tiers))
		return -EAGAIN;
	if (kvtd_check_rules(next->high, next->low, next->lease_default_ms, next->lease_max_ms) !=
	    KVTD_RULES_HOLD)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(setters) / sizeof(setters[0]); i++) {
		int err = setters[i](p, next);
		if (err)
			return err;
	}
	return 0;
}

void policy_from_config(const struct kvtd_config *cfg, const struct policy_values *cur,
			struct policy_values *out)
{
	*out = *cur;
	out->high = cfg->l1_high_watermark;
	out->low = cfg->l1_low_watermark;
	out->lease_max_ms = (uint32_t)cfg->lease_max_ms;
	out->lease_default_ms = (uint32_t)cfg->lease_default_ms;
	out->store_wait_ms = (uint32_t)cfg->store_wait_ms;
	out->log_level = cfg->log_level;
}
