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
#include "l2svc.h"
#include "l3svc.h"
#include "loopcall.h"
#include "metrics.h"
#include "ns.h"
#include "policy.h"
#include "settings.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static int loop_failed(struct api_error *err, int rc)
{
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
static json_t *histogram_json(const struct dp_op_stats *o)
{
	json_t *a = json_array();
	for (unsigned b = 0; b < DP_HIST_BUCKETS; b++)
		json_array_append_new(a, json_integer((json_int_t)LOAD(o->buckets[b])));
	return a;
}

static json_t *stats_dp(const struct dp *dp)
{
	const struct dp_stats *st = &dp->stats;
	json_t *o = json_object(), *ops = json_object(), *rejected = json_object();
#define DP_OP_JSON(name, op)                                                            \
	json_object_set_new(ops, #name,                                                  \
			    json_pack("{s:I,s:I,s:I,s:o}", "requests",                   \
				      (json_int_t)LOAD(st->op_##name.requests), "errors", \
				      (json_int_t)LOAD(st->op_##name.errors), "sum_ns",   \
				      (json_int_t)LOAD(st->op_##name.sum_ns), "buckets",  \
				      histogram_json(&st->op_##name)));
	DP_OPS(DP_OP_JSON)
#undef DP_OP_JSON
	dp_rejects_visit(st, json_member, rejected);
	json_object_set_new(o, "ops", ops);
	static const double bounds[DP_HIST_BUCKETS - 1] = DP_HIST_BOUNDS;
	json_t *jb = json_array();
	for (unsigned b = 0; b < DP_HIST_BUCKETS - 1; b++)
		json_array_append_new(jb, json_real(bounds[b]));
	json_object_set_new(o, "latency_bounds_seconds", jb);
	json_object_set_new(o, "rejected", rejected);
	dp_totals_visit(st, json_member, o);
	uint64_t nbuf, buf_bytes;
	buffers_totals(&dp->buffers, &nbuf, &buf_bytes);
	json_object_set_new(o, "buffers_registered", json_integer((json_int_t)nbuf));
	json_object_set_new(o, "buffers_registered_bytes", json_integer((json_int_t)buf_bytes));
	return o;
}

static json_t *stats_l2(const struct l2 *l2)
{
	json_t *o = json_object();
	l2_stats_visit(l2, json_member, o);
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
	json_t *o = json_pack("{s:o,s:o,s:o}", "l1", stats_l1(ctx->l1), "dataplane",
			      stats_dp(ctx->dp), "gpu", stats_gpu());
	json_object_set_new(o, "l2", ctx->l2 ? stats_l2(&ctx->l2->l2) : json_null());
	json_t *l3 = ctx->l3 ? json_object() : json_null();
	if (ctx->l3)
		l3svc_stats_visit(ctx->l3, json_member, l3);
	json_object_set_new(o, "l3", l3);
	return o;
}

/* --- /v1/tiers --- */

static json_t *tier_l2(struct http_ctx *ctx, const struct l1_stats_snapshot *s);
static json_t *tier_l3(const struct l3svc *l3);

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
	json_t *tiers = json_pack("{s:[o]}", "tiers", l1);
	if (ctx->l2)
		json_array_append_new(json_object_get(tiers, "tiers"), tier_l2(ctx, &s));
	if (ctx->l3)
		json_array_append_new(json_object_get(tiers, "tiers"), tier_l3(ctx->l3));
	return tiers;
}

static json_t *tier_l2(struct http_ctx *ctx, const struct l1_stats_snapshot *s)
{
	struct l2_stats_snapshot t;
	l2_stats_read(&ctx->l2->l2, &t);
	const char *state = l2svc_state(ctx->l2);
	json_t *l2 = json_pack(
		"{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "name", "l2", "state", state,
		"capacity_bytes", (json_int_t)t.capacity_bytes, "used_bytes",
		(json_int_t)t.used_bytes, "items", (json_int_t)t.items, "hits",
		(json_int_t)s->lookup_lower_hits, "misses", (json_int_t)t.read_misses, "evictions",
		(json_int_t)(t.items_reclaimed + t.items_dropped_admin + t.items_dropped_quota));
	if (strcmp(state, "failed") == 0)
		json_object_set_new(l2, "next_probe_in_ms",
				    json_integer((json_int_t)LOAD(ctx->l2->next_probe_in_ms)));
	return l2;
}

static json_t *tier_l3(const struct l3svc *l3)
{
	struct l3_stats_snapshot e;
	struct l3scan_stats_snapshot k;
	l3_stats_read(&l3->l3, &e);
	l3scan_stats_read(&l3->scan, &k);
	const char *reason = l3_fault_reason(&l3->l3);
	json_t *o = json_pack(
		"{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "name", "l3", "state", l3_state(&l3->l3),
		"path", l3->l3.root, "capacity_bytes", (json_int_t)k.capacity_bytes, "used_bytes",
		(json_int_t)k.used_bytes, "items", (json_int_t)k.items, "hits", (json_int_t)e.reads,
		"misses", (json_int_t)(e.read_misses + e.read_failures), "evictions",
		(json_int_t)k.files_removed);
	if (reason)
		json_object_set_new(o, "reason", json_string(reason));
	return o;
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
	if (api_parse_policy(body, ctx->l2 != NULL, &pc.p, err))
		return -1;
	pc.set = true;
	rc = loopcall_run(ctx->calls, policy_on_loop, &pc);
	if (rc == -EINVAL)
		return api_fail(err, 400, "invalid_field", "tiers.l1: watermarks out of order");
	if (rc == -EAGAIN)
		return api_fail(err, 409, "l2_not_ready",
			    "mode: L2 is still rebuilding its index, or failed; see /v1/tiers");
	if (rc)
		return loop_failed(err, rc);
	*out = policy_json(&pc.p);
	return 0;
}

/* --- /v1/tiers/{tier}/evict --- */

struct evict_call {
	struct l1 *l1;
	struct l2svc *l2;          /* set for the L2 tier */
	struct l2svc *lower;       /* L1's lower tier, when configured */
	uint64_t bytes;
	uint64_t freed;
	uint64_t evicted, to_l2, dropped;  /* L1: blocks evicted, written to L2, dropped */
	bool complete;
};

/* L2's victim counters: taken (written, or held already) and dropped. */
static void victim_counts(const struct l2svc *l2, uint64_t *taken, uint64_t *dropped)
{
	struct l2_stats_snapshot t;
	l2_stats_read(&l2->l2, &t);
	*taken = t.victims_written + t.victims_present;
	*dropped = t.victims_dropped_behind + t.victims_dropped_unfit + t.victims_dropped_off +
		   t.victims_dropped_quota;
}

static uint64_t l1_evictions(const struct l1 *l1)
{
	struct l1_stats_snapshot s;
	l1_stats_read(l1, &s);
	return s.evictions_admin;
}

/* L1: what it evicted, and, in evict mode, what became of the victims in L2. */
static void evict_l1(struct evict_call *ec)
{
	uint64_t taken0 = 0, dropped0 = 0, taken1 = 0, dropped1 = 0;
	bool lower = ec->lower && ec->lower->started && ec->l1->lower.take_victim;
	if (lower)
		victim_counts(ec->lower, &taken0, &dropped0);
	uint64_t before = l1_evictions(ec->l1);
	ec->freed = l1_evict(ec->l1, ec->bytes, L1_EVICT_ADMIN);
	ec->evicted = l1_evictions(ec->l1) - before;
	if (lower)
		victim_counts(ec->lower, &taken1, &dropped1);
	ec->to_l2 = taken1 - taken0;
	ec->dropped = dropped1 - dropped0;
	struct l1_stats_snapshot s;
	l1_stats_read(ec->l1, &s);
	/* Done when the bytes asked for are free, or nothing unpinned is left. */
	ec->complete = ec->freed >= ec->bytes || s.pinned_items == s.items;
}

static int evict_on_loop(void *arg)
{
	struct evict_call *ec = arg;
	if (ec->l2 && !ec->l2->started)
		return -EAGAIN;
	if (ec->l2) {
		ec->freed = l2_evict(&ec->l2->l2, ec->bytes);
		ec->complete = true;
	} else {
		evict_l1(ec);
	}
	return 0;
}

static int post_evict(struct http_ctx *ctx, const char *tier, json_t *body, json_t **out,
		      struct api_error *err)
{
	bool l2 = strcmp(tier, "l2") == 0 && ctx->l2;
	if (strcmp(tier, "l1") != 0 && !l2)
		return api_fail(err, 404, "not_found", "no tier named \"%s\" (tiers: l1%s)", tier,
				ctx->l2 ? ", l2" : "");
	struct evict_call ec = {.l1 = ctx->l1, .l2 = l2 ? ctx->l2 : NULL, .lower = ctx->l2};
	if (api_parse_evict(body, &ec.bytes, err))
		return -1;
	int rc = loopcall_run(ctx->calls, evict_on_loop, &ec);
	if (rc == -EAGAIN)
		return api_fail(err, 409, "l2_not_ready", "L2 is still rebuilding its index, or failed");
	if (rc)
		return loop_failed(err, rc);
	*out = json_pack("{s:s,s:I,s:b}", "tier", tier, "evicted_bytes", (json_int_t)ec.freed,
			 "complete", ec.complete);
	if (!l2)
		json_object_update_new(*out, json_pack("{s:I,s:I,s:I}", "blocks_evicted",
						       (json_int_t)ec.evicted, "blocks_to_l2",
						       (json_int_t)ec.to_l2, "blocks_dropped",
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
	uint64_t l2_items = 0, l2_bytes = 0;
	if (ctx->l2 && ctx->l2->started)
		l2_ns_usage(&ctx->l2->l2, ns, &l2_items, &l2_bytes);
	json_t *o = json_pack("{s:I,s:s,s:s,s:I,s:i,s:I}", "id", (json_int_t)ns->id, "model",
			      ns->model, "salt", ns->salt, "block_bytes",
			      (json_int_t)ns->block_bytes, "tp_size", (int)ns->tp_size,
			      "connections", (json_int_t)dp_ns_connections(ctx->dp, ns));
	json_object_update_new(o, json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "l1_items",
					    (json_int_t)ns->l1_items, "l1_bytes",
					    (json_int_t)ns->l1_bytes, "l1_quota_bytes",
					    (json_int_t)ns->l1_quota, "l1_quota_evictions",
					    (json_int_t)ns->l1_quota_evictions, "l2_items",
					    (json_int_t)l2_items, "l2_bytes", (json_int_t)l2_bytes,
					    "l2_quota_bytes", (json_int_t)ns->l2_quota));
	if (ctx->l3) {
		uint64_t files, bytes, quota;
		l3svc_ns_usage(ctx->l3, ns, &files, &bytes, &quota);
		json_object_update_new(o, json_pack("{s:I,s:I,s:I}", "l3_files", (json_int_t)files,
						    "l3_bytes", (json_int_t)bytes,
						    "l3_quota_bytes", (json_int_t)quota));
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
					 .l1_quota_evictions = ns->l1_quota_evictions,
					 .l2_quota = ns->l2_quota};
		snprintf(m->model, sizeof(m->model), "%s", ns->model);
		uint64_t items;
		if (uc->ctx->l2 && uc->ctx->l2->started)
			l2_ns_usage(&uc->ctx->l2->l2, ns, &items, &m->l2_bytes);
		if (uc->ctx->l3)
			l3svc_ns_usage(uc->ctx->l3, ns, &items, &m->l3_bytes, &m->l3_quota);
	}
	uc->n = reg->count;
	return 0;
}

int api_namespace_usage(struct http_ctx *ctx, struct metrics_ns **out, uint32_t *n)
{
	struct usage_call uc = {.ctx = ctx};
	int rc = loopcall_run(ctx->calls, usage_on_loop, &uc);
	if (rc) {
		free(uc.ns);
		return rc;
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
		if (qc->ctx->l2 && qc->ctx->l2->started)
			l2_ns_trim(&qc->ctx->l2->l2, ns);
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
	if (api_parse_quota(body, ctx->l2 != NULL, &qc.q, err))
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
	uint64_t l2_items;
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
	if (dc->ctx->l2 && dc->ctx->l2->started)
		dc->l2_items = l2_ns_drop(&dc->ctx->l2->l2, ns);
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
	*out = json_pack("{s:I,s:I,s:I}", "deleted", (json_int_t)id, "evicted_bytes",
			 (json_int_t)dc.freed, "l2_items_dropped", (json_int_t)dc.l2_items);
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
};

static int register_on_loop(void *arg)
{
	struct buffer_call *bc = arg;
	struct buffer_spec spec = {.kind = bc->b.ipc ? KVT_BUFFER_CUDA_IPC : KVT_BUFFER_SHM,
				   .size = bc->b.size, .fd = -1, .path = bc->b.path,
				   .offset = bc->b.offset};
	memcpy(spec.device_uuid, bc->b.device_uuid, sizeof(spec.device_uuid));
	memcpy(spec.ipc_handle, bc->b.handle, sizeof(spec.ipc_handle));
	return buffers_register(&bc->ctx->dp->buffers, &(struct buffer_user){0, bc->b.pid}, &spec);
}

static int unregister_on_loop(void *arg)
{
	struct buffer_call *bc = arg;
	return buffers_unregister_any(&bc->ctx->dp->buffers, bc->index);
}

static int register_failed(int rc, bool ipc, struct api_error *err)
{
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
	if (rc == -ENOENT || rc == -EACCES)
		return api_fail(err, 400, "invalid_field", "path: %s", kvt_strerror(rc));
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
