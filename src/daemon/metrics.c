/* metrics.c — see metrics.h. Every family has HELP and TYPE; names follow
 * Prometheus practice: kvtier_ prefix, base units, _total on counters. The
 * counters and gauges come from the stats tables (stat_table.h); what is
 * written here by hand is what no table holds: histograms, per-kind and
 * per-namespace families, build facts. */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "gpu.h"
#include "http_stats.h"
#include "kvtier/kvtier.h"
#include "l1.h"
#include "metrics.h"
#include "tiers.h"


static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(FILE *f, const char *name, const char *labels, uint64_t v)
{
	fprintf(f, "%s%s%s%s %" PRIu64 "\n", name, labels ? "{" : "", labels ? labels : "",
		labels ? "}" : "", v);
}

static void one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	family(f, name, type, help);
	sample(f, name, NULL, v);
}

/* --- the stats tables (stat_table.h) --- */

/* Samples gathered from every table, rendered grouped by family. */
#define MAX_TABLE_SAMPLES 256
struct table_samples {
	const struct stat_def *def[MAX_TABLE_SAMPLES];
	uint64_t value[MAX_TABLE_SAMPLES];
	size_t n;
};

static void gather(void *ctx, const struct stat_def *def, uint64_t value)
{
	struct table_samples *t = ctx;
	if (!*def->metric || t->n == MAX_TABLE_SAMPLES)
		return;
	t->def[t->n] = def;
	t->value[t->n++] = value;
}

static bool family_seen(const struct table_samples *t, size_t upto, const char *metric)
{
	for (size_t i = 0; i < upto; i++)
		if (strcmp(t->def[i]->metric, metric) == 0)
			return true;
	return false;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A table's sample; a field in ms exported as seconds (stat_table.h) is divided on the way. */
static void table_sample(FILE *f, const struct stat_def *d, uint64_t v)
{
	const char *labels = *d->labels ? d->labels : NULL;
	if (ends_with(d->field, "_ms") && ends_with(d->metric, "_seconds"))
		fprintf(f, "%s%s%s%s %.3f\n", d->metric, labels ? "{" : "", labels ? labels : "",
			labels ? "}" : "", (double)v / 1000.0);
	else
		sample(f, d->metric, labels, v);
}

/*
 * Each family once, where its first sample came, with every sample of it
 * from any table (kvtier_evictions_total has L1's and L2's): HELP and TYPE
 * from its first sample's entry.
 */
static void render_table_samples(FILE *f, const struct table_samples *t)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct stat_def *d = t->def[i];
		if (family_seen(t, i, d->metric))
			continue;
		family(f, d->metric, d->kind == STAT_COUNTER ? "counter" : "gauge", d->help);
		for (size_t j = i; j < t->n; j++)
			if (strcmp(t->def[j]->metric, d->metric) == 0)
				table_sample(f, t->def[j], t->value[j]);
	}
}

static void render_tables(FILE *f, const struct l1 *l1, const struct tiers *tiers,
			  const struct dp *dp, const struct http_stats *http)
{
	struct table_samples t = {.n = 0};
	l1_stats_visit(l1, gather, &t);
	for (unsigned i = 0; i < tiers->nlower; i++)
		tiers_stats_visit(tiers->lower[i], gather, &t);
	dp_totals_visit(dp, gather, &t);
	dp_rejects_visit(dp, gather, &t);
	gpu_stats_visit(gather, &t);
	http_stats_visit(http, gather, &t);
	render_table_samples(f, &t);
}

static void op_histogram(void *ctx, const struct dp_op_snapshot *op)
{
	static const double bounds[DP_HIST_BUCKETS - 1] = DP_HIST_BOUNDS;
	FILE *f = ctx;
	uint64_t cum = 0;
	for (unsigned b = 0; b < DP_HIST_BUCKETS; b++) {
		cum += op->buckets[b];
		if (b + 1 < DP_HIST_BUCKETS)
			fprintf(f, "kvtier_op_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				op->name, bounds[b], cum);
		else
			fprintf(f, "kvtier_op_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
				op->name, cum);
	}
	fprintf(f, "kvtier_op_duration_seconds_sum{op=\"%s\"} %.9f\n", op->name,
		(double)op->sum_ns / 1e9);
	fprintf(f, "kvtier_op_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", op->name, cum);
}

static void op_errors(void *ctx, const struct dp_op_snapshot *op)
{
	char label[32];
	snprintf(label, sizeof(label), "op=\"%s\"", op->name);
	sample(ctx, "kvtier_op_errors_total", label, op->errors);
}

static void kind_count(void *ctx, const char *kind, uint64_t count, uint64_t bytes)
{
	(void)bytes;
	char label[32];
	snprintf(label, sizeof(label), "kind=\"%s\"", kind);
	sample(ctx, "kvtier_buffers_registered", label, count);
}

static void kind_bytes(void *ctx, const char *kind, uint64_t count, uint64_t bytes)
{
	(void)count;
	char label[32];
	snprintf(label, sizeof(label), "kind=\"%s\"", kind);
	sample(ctx, "kvtier_buffers_registered_bytes", label, bytes);
}

static void render_dp(FILE *f, const struct dp *dp)
{
	family(f, "kvtier_op_duration_seconds", "histogram",
	       "Time from a request's arrival to its reply, by op.");
	dp_ops_visit(dp, op_histogram, f);
	family(f, "kvtier_op_errors_total", "counter", "Replies with an error status, by op.");
	dp_ops_visit(dp, op_errors, f);
	family(f, "kvtier_buffers_registered", "gauge", "Staging buffers registered, by kind.");
	dp_buffer_kinds_visit(dp, kind_count, f);
	family(f, "kvtier_buffers_registered_bytes", "gauge",
	       "Bytes of staging buffers registered, by kind.");
	dp_buffer_kinds_visit(dp, kind_bytes, f);
}

/* A label value as the text format wants it: backslash, quote and newline escaped. */
static void label_value(char *out, size_t cap, const char *in)
{
	size_t n = 0;
	for (; *in && n + 3 < cap; in++) {
		if (*in == '\\' || *in == '"' || *in == '\n') {
			out[n++] = '\\';
			out[n++] = *in == '\n' ? 'n' : *in;
		} else {
			out[n++] = *in;
		}
	}
	out[n] = '\0';
}

/* One gauge family with a sample per namespace, from the field at offset. */
static void ns_family(FILE *f, const char *name, const char *type, const char *help,
		      const struct metrics_ns *ns, uint32_t nns, size_t offset)
{
	family(f, name, type, help);
	for (uint32_t i = 0; i < nns; i++) {
		char model[2 * KVT_NS_MODEL_MAX + 2], labels[sizeof(model) + 48];
		label_value(model, sizeof(model), ns[i].model);
		snprintf(labels, sizeof(labels), "namespace=\"%u\",model=\"%s\"", ns[i].id, model);
		sample(f, name, labels, *(const uint64_t *)((const char *)&ns[i] + offset));
	}
}

static void render_namespaces(FILE *f, const struct tiers *tiers, const struct metrics_ns *ns,
			      uint32_t nns)
{
#define NS_FIELD(field) offsetof(struct metrics_ns, field)
	ns_family(f, "kvtier_namespace_l1_bytes", "gauge", "L1 bytes a namespace holds.", ns, nns,
		  NS_FIELD(l1_bytes));
	ns_family(f, "kvtier_namespace_l1_quota_bytes", "gauge",
		  "A namespace's L1 quota (0: none).", ns, nns, NS_FIELD(l1_quota));
	ns_family(f, "kvtier_namespace_l1_quota_evictions_total", "counter",
		  "Blocks a namespace evicted to stay within its L1 quota.", ns, nns,
		  NS_FIELD(l1_quota_evictions));
	for (unsigned t = 0; t < tiers->nlower; t++) {
		const struct tier *tier = tiers->lower[t];
		size_t at = NS_FIELD(lower) + t * sizeof(ns->lower[0]);
		char name[64];
		snprintf(name, sizeof(name), "kvtier_namespace_%s_bytes", tier->name);
		ns_family(f, name, "gauge", tier->usage_help, ns, nns, at + offsetof(struct tier_usage, bytes));
		snprintf(name, sizeof(name), "kvtier_namespace_%s_quota_bytes", tier->name);
		ns_family(f, name, "gauge", tier->quota_help, ns, nns, at + offsetof(struct tier_usage, quota));
	}
#undef NS_FIELD
}

static void render_gpu(FILE *f)
{
	one(f, "kvtier_gpu_devices", "gauge", "CUDA devices this kvtierd uses.",
	    (uint64_t)gpu_device_count());
}

char *metrics_render(const struct l1 *l1, const struct tiers *tiers, const struct dp *dp,
		     const struct http_stats *http, const struct metrics_ns *ns, uint32_t nns,
		     size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	family(f, "kvtier_build_info", "gauge", "Build facts of this kvtierd; always 1.");
	fprintf(f, "kvtier_build_info{version=\"%s\",cuda=\"%s\"} 1\n", kvt_version(),
		gpu_built_in() ? "yes" : "no");
	one(f, "kvtier_up", "gauge", "1 while the daemon serves.", 1);
	render_tables(f, l1, tiers, dp, http);
	render_dp(f, dp);
	render_namespaces(f, tiers, ns, nns);
	render_gpu(f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}
