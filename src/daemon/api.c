/* api.c — see api.h. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "buffers.h"
#include "dataplane.h"
#include "l1.h"
#include "loopcall.h"
#include "metrics.h"
#include "ns.h"
#include "policy.h"
#include "settings.h"
#include "tiers.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static int loop_failed(struct api_error *err, int rc)
{
	if (rc == -ETIMEDOUT)
		return api_fail(err, 503, "loop_busy",
				"the event loop did not take this call within 5 s; try again");
	return api_fail(err, 503, "unavailable", "the daemon is stopping (%s)", kvt_strerror(rc));
}

/* --- /v1/stats --- */

/* A stats table's entry as a JSON member: {field: value}. */
static void json_member(void *ctx, const struct stat_def *def, uint64_t value)
{
	json_object_set_new(ctx, def->field, json_integer((json_int_t)value));
}

static json_t *stats_l1(const struct l1 *l1)
{
	json_t *o = json_object();
	l1_stats_visit(l1, json_member, o);
	return o;
}

/* An op's latency histogram: counts per bucket (not cumulative). */
/* An op as /v1/stats shows it under dataplane.ops. */
static void op_json(void *ctx, const struct dp_op_snapshot *op)
{
	json_t *buckets = json_array();
	for (unsigned b = 0; b < DP_HIST_BUCKETS; b++)
		json_array_append_new(buckets, json_integer((json_int_t)op->buckets[b]));
	json_object_set_new(ctx, op->name,
			    json_pack("{s:I,s:I,s:I,s:o}", "requests", (json_int_t)op->requests,
				      "errors", (json_int_t)op->errors, "sum_ns",
				      (json_int_t)op->sum_ns, "buckets", buckets));
}

/* Adds a kind's buffers to the totals ({count, bytes}). */
static void buffer_totals(void *ctx, const char *kind, uint64_t count, uint64_t bytes)
{
	(void)kind;
	uint64_t *totals = ctx;
	totals[0] += count;
	totals[1] += bytes;
}

static json_t *stats_dp(const struct dp *dp)
{
	json_t *o = json_object(), *ops = json_object(), *rejected = json_object();
	dp_ops_visit(dp, op_json, ops);
	dp_rejects_visit(dp, json_member, rejected);
	json_object_set_new(o, "ops", ops);
	static const double bounds[DP_HIST_BUCKETS - 1] = DP_HIST_BOUNDS;
	json_t *jb = json_array();
	for (unsigned b = 0; b < DP_HIST_BUCKETS - 1; b++)
		json_array_append_new(jb, json_real(bounds[b]));
	json_object_set_new(o, "latency_bounds_seconds", jb);
	json_object_set_new(o, "rejected", rejected);
	dp_totals_visit(dp, json_member, o);
	uint64_t totals[2] = {0, 0};
	dp_buffer_kinds_visit(dp, buffer_totals, totals);
	json_object_set_new(o, "buffers_registered", json_integer((json_int_t)totals[0]));
	json_object_set_new(o, "buffers_registered_bytes", json_integer((json_int_t)totals[1]));
	return o;
}

static json_t *stats_tier(const struct tier *t)
{
	json_t *o = json_object();
	tiers_stats_visit(t, json_member, o);
	return o;
}

static json_t *stats_gpu(void)
{
	json_t *devices = json_array();
	for (int i = 0; i < gpu_device_count(); i++) {
		char uuid[41];
		gpu_device_uuid(i, uuid);
		json_array_append_new(devices, json_pack("{s:i,s:s}", "index", i, "uuid", uuid));
	}
	json_t *o = json_pack("{s:b,s:o,s:f}", "built_in", gpu_built_in(), "devices", devices,
			      "l1_pin_seconds", (double)LOAD(gpu_stats.l1_pin_us) / 1e6);
	gpu_stats_visit(json_member, o);
	return o;
}

static json_t *get_stats(struct http_ctx *ctx)
{
	json_t *http = json_object();
	http_stats_visit(&ctx->http_stats, json_member, http);
	json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "l1", stats_l1(ctx->l1), "dataplane",
			      stats_dp(ctx->dp), "gpu", stats_gpu(), "http", http);
	for (unsigned i = 0; i < ctx->tiers->nlower; i++)
		json_object_set_new(o, ctx->tiers->lower[i]->name, stats_tier(ctx->tiers->lower[i]));
	return o;
}

/* --- /v1/tiers --- */

/* A lower tier as /v1/tiers lists it, from its summary. */
static json_t *tier_json(const struct tier *t)
{
	struct tier_summary m;
	t->ops->summary(t, &m);
	json_t *o = json_pack("{s:s,s:s}", "name", t->name, "state", m.state);
	if (m.path)
		json_object_set_new(o, "path", json_string(m.path));
	json_object_update_new(
		o, json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "capacity_bytes",
			     (json_int_t)m.capacity_bytes, "used_bytes", (json_int_t)m.used_bytes,
			     "items", (json_int_t)m.items, "hits", (json_int_t)m.hits, "misses",
			     (json_int_t)m.misses, "evictions", (json_int_t)m.evictions));
	if (m.next_probe_in_ms)
		json_object_set_new(o, "next_probe_in_ms", json_integer((json_int_t)m.next_probe_in_ms));
	if (m.reason)
		json_object_set_new(o, "reason", json_string(m.reason));
	return o;
}

static json_t *get_tiers(struct http_ctx *ctx)
{
	struct l1_stats_snapshot s;
	l1_stats_read(ctx->l1, &s);
	json_t *l1 = json_pack(
		"{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "name", "l1", "capacity_bytes",
		(json_int_t)s.capacity_bytes, "used_bytes", (json_int_t)s.used_bytes, "items",
		(json_int_t)s.items, "hits", (json_int_t)s.lookup_hits, "misses",
		(json_int_t)s.lookup_misses, "evictions",
		(json_int_t)(s.evictions_watermark + s.evictions_capacity + s.evictions_admin +
			     s.evictions_quota),
		"dirty_items", (json_int_t)s.dirty_items, "dirty_bytes", (json_int_t)s.dirty_bytes);
	json_t *list = json_pack("[o]", l1);
	for (unsigned i = 0; i < ctx->tiers->nlower; i++)
		json_array_append_new(list, tier_json(ctx->tiers->lower[i]));
	return json_pack("{s:o}", "tiers", list);
}

/* --- /v1/policy --- */

struct policy_call {
	struct policy *policy;
	struct policy_values p;
	bool set;
};

/* On the loop thread: read the policy, or apply it and read it back. */
static int policy_on_loop(void *arg)
{
	struct policy_call *pc = arg;
	int rc = pc->set ? policy_apply(pc->policy, &pc->p) : 0;
	policy_read(pc->policy, &pc->p);
	return rc;
}

static json_t *policy_json(const struct policy_values *p)
{
	return json_pack("{s:s,s:{s:{s:f,s:f}},s:I,s:I,s:I}", "mode",
			 p->evict ? "evict" : "l1-only", "tiers", "l1", "high_watermark", p->high,
			 "low_watermark", p->low, "lease_max_ms", (json_int_t)p->lease_max_ms,
			 "lease_default_ms", (json_int_t)p->lease_default_ms, "store_wait_ms",
			 (json_int_t)p->store_wait_ms);
}

static int get_policy(struct http_ctx *ctx, json_t **out, struct api_error *err)
{
	struct policy_call pc = {.policy = ctx->policy};
	int rc = loopcall_run(ctx->calls, policy_on_loop, &pc);
	if (rc)
		return loop_failed(err, rc);
	*out = policy_json(&pc.p);
	return 0;
}

static int put_policy(struct http_ctx *ctx, json_t *body, json_t **out, struct api_error *err)
{
	/* Read the current policy, merge the body into it, then apply: a body
	 * names only what it changes. (Two PUTs at once: the last one wins.) */
	struct policy_call pc = {.policy = ctx->policy};
	int rc = loopcall_run(ctx->calls, policy_on_loop, &pc);
	if (rc)
		return loop_failed(err, rc);
	if (api_parse_policy(body, tiers_victim_tier(ctx->tiers) != NULL, &pc.p, err))
		return -1;
	pc.set = true;
	rc = loopcall_run(ctx->calls, policy_on_loop, &pc);
	if (rc == -EINVAL)
		return api_fail(err, 400, "invalid_field", "tiers.l1: watermarks out of order");
	if (rc == -EAGAIN)
		return api_fail(err, 409, "l2_not_ready",
			    "mode: no victim tier serves (L2 is still rebuilding its index, or failed); see /v1/tiers");
	if (rc)
		return loop_failed(err, rc);
	*out = policy_json(&pc.p);
	return 0;
}

/* --- /v1/tiers/{tier}/evict --- */

struct evict_call {
	struct l1 *l1;
	struct tier *tier;         /* a lower tier; NULL for L1 */
	struct tier *victims;      /* L1's victim tier, when there is one */
	uint64_t bytes;
	uint64_t freed;
	uint64_t evicted, to_lower, dropped;  /* L1: blocks evicted, taken by the victim tier, dropped */
	bool complete;
};

static uint64_t l1_evictions(const struct l1 *l1)
{
	struct l1_stats_snapshot s;
	l1_stats_read(l1, &s);
	return s.evictions_admin;
}

/* L1: what it evicted, and, in evict mode, what became of the victims below. */
static void evict_l1(struct evict_call *ec)
{
	uint64_t taken0 = 0, dropped0 = 0, taken1 = 0, dropped1 = 0;
	struct tier *v = ec->l1->lower.take_victim ? ec->victims : NULL;
	if (v)
		v->ops->victim_counts(v, &taken0, &dropped0);
	uint64_t before = l1_evictions(ec->l1);
	ec->freed = l1_evict(ec->l1, ec->bytes, L1_EVICT_ADMIN);
	ec->evicted = l1_evictions(ec->l1) - before;
	if (v)
		v->ops->victim_counts(v, &taken1, &dropped1);
	ec->to_lower = taken1 - taken0;
	ec->dropped = dropped1 - dropped0;
	struct l1_stats_snapshot s;
	l1_stats_read(ec->l1, &s);
	/* Done when the bytes asked for are free, or nothing unpinned is left. */
	ec->complete = ec->freed >= ec->bytes || s.pinned_items == s.items;
}

static int evict_on_loop(void *arg)
{
	struct evict_call *ec = arg;
	if (!ec->tier) {
		evict_l1(ec);
		return 0;
	}
	int64_t freed = ec->tier->ops->evict(ec->tier, ec->bytes);
	if (freed < 0)
		return (int)freed;
	ec->freed = (uint64_t)freed;
	ec->complete = true;
	return 0;
}

/* "l1, l2, ...": the tiers an operator may evict from. */
static void evictable_names(const struct tiers *tiers, char *out, size_t len)
{
	int n = snprintf(out, len, "l1");
	for (unsigned i = 0; i < tiers->nlower && n > 0 && (size_t)n < len; i++)
		if (tiers->lower[i]->ops->evict)
			n += snprintf(out + n, len - (size_t)n, ", %s", tiers->lower[i]->name);
}

static int post_evict(struct http_ctx *ctx, const char *tier, json_t *body, json_t **out,
		      struct api_error *err)
{
	struct tier *lower = tiers_find(ctx->tiers, tier);
	if (lower && !lower->ops->evict)
		return api_fail(err, 409, "not_evictable",
				"%s is shared by every node: its files go by l3-size and "
				"namespace-l3-quota, or with their namespace (DELETE /v1/namespaces/ID)",
				tier);
	if (strcmp(tier, "l1") != 0 && !lower) {
		char names[128];
		evictable_names(ctx->tiers, names, sizeof(names));
		return api_fail(err, 404, "not_found", "no tier named \"%s\" (tiers: %s)", tier, names);
	}
	struct evict_call ec = {.l1 = ctx->l1, .tier = lower,
				.victims = tiers_victim_tier(ctx->tiers)};
	if (api_parse_evict(body, &ec.bytes, err))
		return -1;
	int rc = loopcall_run(ctx->calls, evict_on_loop, &ec);
	if (rc == -EAGAIN)
		return api_fail(err, 409, "l2_not_ready", "%s is still starting (L2 rebuilds its index), or failed",
			    tier);
	if (rc)
		return loop_failed(err, rc);
	*out = json_pack("{s:s,s:I,s:b}", "tier", tier, "evicted_bytes", (json_int_t)ec.freed,
			 "complete", ec.complete);
	if (!lower)
		json_object_update_new(*out, json_pack("{s:I,s:I,s:I}", "blocks_evicted",
						       (json_int_t)ec.evicted, "blocks_to_l2",
						       (json_int_t)ec.to_lower, "blocks_dropped",
						       (json_int_t)ec.dropped));
	return 0;
}

/* --- /v1/namespaces --- */

/* A JSON list built on the loop thread by fill, answered as {name: [...]}. */
struct list_call {
	struct http_ctx *ctx;
	json_t *list;
	void (*fill)(struct http_ctx *ctx, json_t *list);
};

static int list_on_loop(void *arg)
{
	struct list_call *lc = arg;
	lc->fill(lc->ctx, lc->list);
	return 0;
}

static int get_list(struct http_ctx *ctx, const char *name,
		    void (*fill)(struct http_ctx *ctx, json_t *list), json_t **out,
		    struct api_error *err)
{
	struct list_call lc = {.ctx = ctx, .list = json_array(), .fill = fill};
	int rc = loopcall_run(ctx->calls, list_on_loop, &lc);
	if (rc) {
		json_decref(lc.list);
		return loop_failed(err, rc);
	}
	*out = json_pack("{s:o}", name, lc.list);
	return 0;
}

/* One namespace as GET /v1/namespaces and PUT /v1/namespaces/{id} show it (loop thread). */
static json_t *namespace_json(struct http_ctx *ctx, const struct kvt_ns *ns)
{
	/* The salt is never shown: it is all a client needs to join the namespace. */
	char digest[17];
	snprintf(digest, sizeof(digest), "%016llx", (unsigned long long)ns->digest);
	json_t *o = json_pack("{s:I,s:s,s:b,s:s,s:I,s:i,s:I}", "id", (json_int_t)ns->id, "model",
			      ns->model, "salted", ns->salt[0] != '\0', "digest", digest,
			      "block_bytes", (json_int_t)ns->block_bytes, "tp_size", (int)ns->tp_size,
			      "connections", (json_int_t)dp_ns_connections(ctx->dp, ns));
	json_object_update_new(o, json_pack("{s:I,s:I,s:I,s:I}", "l1_items",
					    (json_int_t)ns->l1_items, "l1_bytes",
					    (json_int_t)ns->l1_bytes, "l1_quota_bytes",
					    (json_int_t)ns->l1_quota, "l1_quota_evictions",
					    (json_int_t)ns->l1_quota_evictions));
	for (unsigned i = 0; i < ctx->tiers->nlower; i++) {
		struct tier *t = ctx->tiers->lower[i];
		struct tier_usage u;
		t->ops->ns_usage(t, ns, &u);
		char items[32], bytes[32], quota[32];
		snprintf(items, sizeof(items), "%s_%s", t->name, t->unit);
		snprintf(bytes, sizeof(bytes), "%s_bytes", t->name);
		snprintf(quota, sizeof(quota), "%s_quota_bytes", t->name);
		json_object_update_new(o, json_pack("{s:I,s:I,s:I}", items, (json_int_t)u.items,
						    bytes, (json_int_t)u.bytes, quota,
						    (json_int_t)u.quota));
	}
	return o;
}

static void fill_namespaces(struct http_ctx *ctx, json_t *list)
{
	for (uint32_t i = 0; i < ctx->namespaces->count; i++)
		json_array_append_new(list, namespace_json(ctx, ctx->namespaces->ns[i]));
}

struct usage_call {
	struct http_ctx *ctx;
	struct metrics_ns *ns;
	uint32_t n;
};

static int usage_on_loop(void *arg)
{
	struct usage_call *uc = arg;
	const struct ns_registry *reg = uc->ctx->namespaces;
	uc->ns = calloc(reg->count ? reg->count : 1, sizeof(*uc->ns));
	if (!uc->ns)
		return -ENOMEM;
	for (uint32_t i = 0; i < reg->count; i++) {
		const struct kvt_ns *ns = reg->ns[i];
		struct metrics_ns *m = &uc->ns[i];
		*m = (struct metrics_ns){.id = ns->id, .l1_bytes = ns->l1_bytes,
					 .l1_quota = ns->l1_quota,
					 .l1_quota_evictions = ns->l1_quota_evictions};
		snprintf(m->model, sizeof(m->model), "%s", ns->model);
		for (unsigned t = 0; t < uc->ctx->tiers->nlower; t++) {
			struct tier *tier = uc->ctx->tiers->lower[t];
			tier->ops->ns_usage(tier, ns, &m->lower[t]);
		}
	}
	uc->n = reg->count;
	return 0;
}

int api_namespace_usage(struct http_ctx *ctx, struct metrics_ns **out, uint32_t *n,
			struct api_error *err)
{
	struct usage_call uc = {.ctx = ctx};
	int rc = loopcall_run(ctx->calls, usage_on_loop, &uc);
	if (rc) {
		free(uc.ns);
		return loop_failed(err, rc);
	}
	*out = uc.ns;
	*n = uc.n;
	return 0;
}

/* PUT /v1/namespaces/{id}: quotas set on the loop thread, the namespace read back. */
struct ns_quota_call {
	struct http_ctx *ctx;
	uint32_t id;
	struct api_quota q;
	uint64_t min_l1;            /* out: one slot, when l1 is refused */
	json_t *result;
};

static int ns_quota_on_loop(void *arg)
{
	struct ns_quota_call *qc = arg;
	struct kvt_ns *ns = ns_find_id(qc->ctx->namespaces, qc->id);
	if (!ns)
		return -ENOENT;
	qc->min_l1 = ns->l1_class ? ns->l1_class->slot_size : 0;
	if (qc->q.set_l1 && l1_ns_set_quota(qc->ctx->l1, ns, qc->q.l1))
		return -ERANGE;
	if (qc->q.set_l2) {
		ns->l2_quota = qc->q.l2;
		for (unsigned i = 0; i < qc->ctx->tiers->nlower; i++) {
			struct tier *t = qc->ctx->tiers->lower[i];
			if (t->ops->ns_trim)
				t->ops->ns_trim(t, ns);
		}
	}
	qc->result = namespace_json(qc->ctx, ns);
	return 0;
}

static int put_namespace(struct http_ctx *ctx, const char *id_text, json_t *body, json_t **out,
			 struct api_error *err)
{
	struct ns_quota_call qc = {.ctx = ctx};
	if (!api_parse_path_id(id_text, &qc.id) || qc.id == 0)
		return api_fail(err, 404, "not_found", "no namespace with id \"%s\"", id_text);
	if (api_parse_quota(body, tiers_victim_tier(ctx->tiers) != NULL, &qc.q, err))
		return -1;
	int rc = loopcall_run(ctx->calls, ns_quota_on_loop, &qc);
	if (rc == -ENOENT)
		return api_fail(err, 404, "not_found", "no namespace with id %u", qc.id);
	if (rc == -ERANGE)
		return api_fail(err, 400, "invalid_field",
			    "l1_quota_bytes: %llu is less than one block slot (%llu bytes); use 0 "
			    "for no quota", (unsigned long long)qc.q.l1, (unsigned long long)qc.min_l1);
	if (rc)
		return loop_failed(err, rc);
	*out = qc.result;
	return 0;
}

struct ns_drop_call {
	struct http_ctx *ctx;
	uint32_t id;
	uint64_t freed;
	uint64_t dropped[TIERS_MAX_LOWER];  /* items each lower tier dropped */
	uint32_t connections;
	uint64_t pinned;
};

/* On the loop thread: a namespace goes only when nothing uses it. */
static int ns_drop_on_loop(void *arg)
{
	struct ns_drop_call *dc = arg;
	struct kvt_ns *ns = ns_find_id(dc->ctx->namespaces, dc->id);
	if (!ns)
		return -ENOENT;
	dc->connections = dp_ns_connections(dc->ctx->dp, ns);
	if (dc->connections)
		return -EBUSY;
	dc->freed = l1_ns_drop(dc->ctx->l1, ns, &dc->pinned); /* nothing of it goes to L2 */
	if (dc->pinned)
		return -EBUSY;
	for (unsigned i = 0; i < dc->ctx->tiers->nlower; i++) {
		struct tier *t = dc->ctx->tiers->lower[i];
		dc->dropped[i] = t->ops->ns_drop ? t->ops->ns_drop(t, ns) : 0;
	}
	ns_remove(dc->ctx->namespaces, ns);
	return 0;
}

static int delete_namespace(struct http_ctx *ctx, const char *id_text, json_t **out,
			    struct api_error *err)
{
	uint32_t id;
	if (!api_parse_path_id(id_text, &id) || id == 0)
		return api_fail(err, 404, "not_found", "no namespace with id \"%s\"", id_text);
	struct ns_drop_call dc = {.ctx = ctx, .id = id};
	int rc = loopcall_run(ctx->calls, ns_drop_on_loop, &dc);
	if (rc == -ENOENT)
		return api_fail(err, 404, "not_found", "no namespace with id %u", id);
	if (rc == -EBUSY && dc.connections)
		return api_fail(err, 409, "in_use", "namespace %u has %u client connections", id,
			    dc.connections);
	if (rc == -EBUSY)
		return api_fail(err, 409, "in_use",
			    "namespace %u: %llu blocks are still being copied; try again", id,
			    (unsigned long long)dc.pinned);
	if (rc)
		return loop_failed(err, rc);
	*out = json_pack("{s:I,s:I}", "deleted", (json_int_t)id, "evicted_bytes",
			 (json_int_t)dc.freed);
	for (unsigned i = 0; i < ctx->tiers->nlower; i++) {
		const struct tier *t = ctx->tiers->lower[i];
		char key[48];
		snprintf(key, sizeof(key), "%s_%s_dropped", t->name, t->unit);
		if (t->ops->ns_drop)
			json_object_set_new(*out, key, json_integer((json_int_t)dc.dropped[i]));
	}
	return 0;
}

/* --- /v1/buffers --- */

static void buffer_json(uint32_t index, const struct stbuf *b, pid_t pid, void *ctx)
{
	json_t *list = ctx;
	char owner[32];
	snprintf(owner, sizeof(owner), "%016llx", (unsigned long long)b->session);
	json_t *o = json_pack("{s:I,s:s,s:s,s:I,s:I,s:I}", "index", (json_int_t)index, "kind",
			      buffers_kind_name(b->kind), "owner", owner, "pid", (json_int_t)pid,
			      "size_bytes", (json_int_t)b->size, "last_use_ms",
			      (json_int_t)b->last_use_ms);
	if (stbuf_device(b) >= 0) {
		char uuid[41];
		gpu_device_uuid(stbuf_device(b), uuid);
		json_object_set_new(o, "device", json_string(uuid));
	}
	json_array_append_new(list, o);
}

static void fill_buffers(struct http_ctx *ctx, json_t *list)
{
	dp_buffers_foreach(ctx->dp, buffer_json, list);
}

struct buffer_call {
	struct http_ctx *ctx;
	struct api_buffer b;
	uint32_t index;
	uint64_t owner;  /* the session's id, when the body named one by its secret */
};

static int register_on_loop(void *arg)
{
	struct buffer_call *bc = arg;
	struct buffer_spec spec = {.kind = bc->b.ipc ? KVT_BUFFER_CUDA_IPC : KVT_BUFFER_SHM,
				   .size = bc->b.size, .fd = -1, .path = bc->b.path,
				   .offset = bc->b.offset};
	memcpy(spec.device_uuid, bc->b.device_uuid, sizeof(spec.device_uuid));
	memcpy(spec.ipc_handle, bc->b.handle, sizeof(spec.ipc_handle));
	return dp_register_buffer(bc->ctx->dp, bc->b.session, bc->b.pid, &spec, &bc->owner);
}

static int unregister_on_loop(void *arg)
{
	struct buffer_call *bc = arg;
	return buffers_unregister_any(&bc->ctx->dp->buffers, bc->index);
}

static int register_failed(int rc, bool ipc, struct api_error *err)
{
	if (rc == -ETIMEDOUT || rc == -ESHUTDOWN)
		return loop_failed(err, rc);
	if (rc == -KVT_ENOCUDA)
		return api_fail(err, 409, "no_cuda", "%s", kvt_strerror(rc));
	if (ipc && rc == -ENODEV)
		return api_fail(err, 400, "invalid_field", "device: kvtierd sees no GPU with this UUID");
	if (ipc && rc == -EINVAL)
		return api_fail(err, 400, "invalid_field",
			    "handle: does not open here (another process's live cudaMalloc "
			    "allocation, from a distinct PID), or offset + size passes its end");
	if (rc == -EINVAL)
		return api_fail(err, 400, "invalid_field",
			    "path: must name a regular file directly under /dev/shm/ (no link) "
			    "of at least size bytes");
	if (rc == -ENOENT || rc == -EACCES || rc == -EISDIR || rc == -ENAMETOOLONG || rc == -ENOTDIR)
		return api_fail(err, 400, "invalid_field", "path: %s", kvt_strerror(rc));
	if (rc == -ESRCH)
		return api_fail(err, 400, "invalid_field", "session: no client has this session");
	if (rc == -ENOSPC)
		return api_fail(err, 409, "too_many_buffers", "the buffer table is full");
	return api_fail(err, 500, "internal", "cannot map the buffer: %s", kvt_strerror(rc));
}

static int post_buffer(struct http_ctx *ctx, json_t *body, json_t **out, struct api_error *err)
{
	struct buffer_call bc = {.ctx = ctx};
	if (api_parse_buffer(body, &bc.b, err))
		return -1;
	int rc = loopcall_run(ctx->calls, register_on_loop, &bc);
	if (rc < 0)
		return register_failed(rc, bc.b.ipc, err);
	*out = json_pack("{s:i,s:s,s:I,s:I}", "index", rc, "kind", bc.b.ipc ? "cuda_ipc" : "shm",
			 "pid", (json_int_t)bc.b.pid, "size_bytes", (json_int_t)bc.b.size);
	if (bc.b.session) { /* its id, as the listing shows it: never the secret */
		char owner[17];
		snprintf(owner, sizeof(owner), "%016llx", (unsigned long long)bc.owner);
		json_object_set_new(*out, "owner", json_string(owner));
	}
	return 0;
}

static int delete_buffer(struct http_ctx *ctx, const char *id_text, json_t **out,
			 struct api_error *err)
{
	uint32_t index;
	if (!api_parse_path_id(id_text, &index))
		return api_fail(err, 404, "not_found", "no buffer with index \"%s\"", id_text);
	struct buffer_call bc = {.ctx = ctx, .index = index};
	int rc = loopcall_run(ctx->calls, unregister_on_loop, &bc);
	if (rc == -ENOENT)
		return api_fail(err, 404, "not_found", "no buffer with index %u", index);
	if (rc)
		return loop_failed(err, rc);
	*out = json_pack("{s:I}", "unregistered", (json_int_t)index);
	return 0;
}

/* --- routing --- */

bool api_method_mutates(const char *method)
{
	return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
}

static int wrong_method(struct api_error *err, const char *allowed)
{
	return api_fail(err, 405, "method_not_allowed", "use %s", allowed);
}

int api_route(struct http_ctx *ctx, const char *method, const char *url, json_t *body,
	      json_t **out, struct api_error *err)
{
	bool get = !api_method_mutates(method);
	memset(err, 0, sizeof(*err));
	if (strcmp(url, "/v1/stats") == 0 || strcmp(url, "/v1/tiers") == 0) {
		if (!get)
			return wrong_method(err, "GET");
		*out = strcmp(url, "/v1/stats") == 0 ? get_stats(ctx) : get_tiers(ctx);
		return 0;
	}
	if (strcmp(url, "/v1/namespaces") == 0)
		return get ? get_list(ctx, "namespaces", fill_namespaces, out, err)
			   : wrong_method(err, "GET");
	if (strcmp(url, "/v1/buffers") == 0) {
		if (get)
			return get_list(ctx, "buffers", fill_buffers, out, err);
		if (strcmp(method, "POST") != 0)
			return wrong_method(err, "GET or POST");
		return post_buffer(ctx, body, out, err);
	}
	static const char buf_prefix[] = "/v1/buffers/";
	if (strncmp(url, buf_prefix, sizeof(buf_prefix) - 1) == 0) {
		if (strcmp(method, "DELETE") != 0)
			return wrong_method(err, "DELETE");
		return delete_buffer(ctx, url + sizeof(buf_prefix) - 1, out, err);
	}
	static const char ns_prefix[] = "/v1/namespaces/";
	if (strncmp(url, ns_prefix, sizeof(ns_prefix) - 1) == 0) {
		if (strcmp(method, "PUT") == 0)
			return put_namespace(ctx, url + sizeof(ns_prefix) - 1, body, out, err);
		if (strcmp(method, "DELETE") != 0)
			return wrong_method(err, "PUT or DELETE");
		return delete_namespace(ctx, url + sizeof(ns_prefix) - 1, out, err);
	}
	if (strcmp(url, "/v1/policy") == 0) {
		if (get)
			return get_policy(ctx, out, err);
		if (strcmp(method, "PUT") != 0)
			return wrong_method(err, "GET or PUT");
		return put_policy(ctx, body, out, err);
	}
	static const char prefix[] = "/v1/tiers/", suffix[] = "/evict";
	size_t n = strlen(url);
	if (strncmp(url, prefix, sizeof(prefix) - 1) == 0 && n > sizeof(prefix) - 1 + 6 &&
	    strcmp(url + n - 6, suffix) == 0) {
		if (strcmp(method, "POST") != 0)
			return wrong_method(err, "POST");
		char tier[64];
		size_t len = n - (sizeof(prefix) - 1) - 6;
		if (len >= sizeof(tier))
			return api_fail(err, 404, "not_found", "no such tier");
		memcpy(tier, url + sizeof(prefix) - 1, len);
		tier[len] = '\0';
		return post_evict(ctx, tier, body, out, err);
	}
	return api_fail(err, 404, "not_found", "no such endpoint");
}
