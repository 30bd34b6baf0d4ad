/* metrics.c — see metrics.h. Every family has HELP and TYPE; names follow
 * Prometheus practice: kvtier_ prefix, base units, _total on counters. */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "dataplane.h"
#include "gpu.h"
#include "kvtier/kvtier.h"
#include "l1.h"
#include "l2.h"
#include "metrics.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

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

/* The tier families, with an l2 sample in each when L2 is configured (t). */
static void render_tiers(FILE *f, const struct l1_stats_snapshot *s,
			 const struct l2_stats_snapshot *t)
{
	family(f, "kvtier_lookups_total", "counter", "Prefix lookups.");
	sample(f, "kvtier_lookups_total", NULL, s->lookups);
	family(f, "kvtier_lookup_blocks_total", "counter",
	       "Keys answered by lookups, by tier and result (a miss ends a chain).");
	sample(f, "kvtier_lookup_blocks_total", "tier=\"l1\",result=\"hit\"", s->lookup_hits);
	sample(f, "kvtier_lookup_blocks_total", "tier=\"l2\",result=\"hit\"", s->lookup_lower_hits);
	sample(f, "kvtier_lookup_blocks_total", "tier=\"none\",result=\"miss\"", s->lookup_misses);
	family(f, "kvtier_stored_bytes_total", "counter",
	       "Bytes stored, by tier (L2: records written, headers and padding included).");
	sample(f, "kvtier_stored_bytes_total", "tier=\"l1\"", s->bytes_stored);
	if (t)
		sample(f, "kvtier_stored_bytes_total", "tier=\"l2\"", t->bytes_written);
	family(f, "kvtier_loaded_bytes_total", "counter", "Bytes loaded, by tier.");
	sample(f, "kvtier_loaded_bytes_total", "tier=\"l1\"", s->bytes_loaded);
	if (t)
		sample(f, "kvtier_loaded_bytes_total", "tier=\"l2\"", t->bytes_read);
	family(f, "kvtier_evictions_total", "counter", "Items evicted, by tier and reason.");
	sample(f, "kvtier_evictions_total", "tier=\"l1\",reason=\"watermark\"", s->evictions_watermark);
	sample(f, "kvtier_evictions_total", "tier=\"l1\",reason=\"capacity\"", s->evictions_capacity);
	sample(f, "kvtier_evictions_total", "tier=\"l1\",reason=\"admin\"", s->evictions_admin);
	sample(f, "kvtier_evictions_total", "tier=\"l1\",reason=\"quota\"", s->evictions_quota);
	if (t) {
		sample(f, "kvtier_evictions_total", "tier=\"l2\",reason=\"reclaim\"", t->items_reclaimed);
		sample(f, "kvtier_evictions_total", "tier=\"l2\",reason=\"admin\"", t->items_dropped_admin);
		sample(f, "kvtier_evictions_total", "tier=\"l2\",reason=\"quota\"", t->items_dropped_quota);
	}
	family(f, "kvtier_tier_capacity_bytes", "gauge", "Bytes a tier can hold.");
	sample(f, "kvtier_tier_capacity_bytes", "tier=\"l1\"", s->capacity_bytes);
	if (t)
		sample(f, "kvtier_tier_capacity_bytes", "tier=\"l2\"", t->capacity_bytes);
	family(f, "kvtier_tier_used_bytes", "gauge", "Bytes of a tier in use.");
	sample(f, "kvtier_tier_used_bytes", "tier=\"l1\"", s->used_bytes);
	if (t)
		sample(f, "kvtier_tier_used_bytes", "tier=\"l2\"", t->used_bytes);
	family(f, "kvtier_tier_items", "gauge", "Items (blocks) held by a tier, complete or not.");
	sample(f, "kvtier_tier_items", "tier=\"l1\"", s->items);
	if (t)
		sample(f, "kvtier_tier_items", "tier=\"l2\"", t->items);
	one(f, "kvtier_pins_active", "gauge", "Items pinned by a copy or a lease.", s->pinned_items);
	one(f, "kvtier_leases_active", "gauge", "Leases held.", s->leases_active);
	family(f, "kvtier_leases_total", "counter", "Leases, by how they began or ended.");
	sample(f, "kvtier_leases_total", "event=\"taken\"", s->leases_taken);
	sample(f, "kvtier_leases_total", "event=\"released\"", s->leases_released);
	sample(f, "kvtier_leases_total", "event=\"expired\"", s->leases_expired);
}

/* The L2 engine's own families (only with L2 configured). */
static void render_l2(FILE *f, const struct l2_stats_snapshot *t)
{
	one(f, "kvtier_l2_io_errors_total", "counter", "L2 reads and writes that failed.",
	    t->io_errors);
	one(f, "kvtier_l2_checksum_failures_total", "counter",
	    "L2 reads whose data checksum failed (each a miss; the item is dropped).",
	    t->checksum_failures);
	family(f, "kvtier_l2_victims_total", "counter",
	       "L1 victims offered to L2, by what became of them.");
	sample(f, "kvtier_l2_victims_total", "result=\"written\"", t->victims_written);
	sample(f, "kvtier_l2_victims_total", "result=\"present\"", t->victims_present);
	sample(f, "kvtier_l2_victims_total", "result=\"dropped_behind\"", t->victims_dropped_behind);
	sample(f, "kvtier_l2_victims_total", "result=\"dropped_unfit\"", t->victims_dropped_unfit);
	sample(f, "kvtier_l2_victims_total", "result=\"dropped_off\"", t->victims_dropped_off);
	sample(f, "kvtier_l2_victims_total", "result=\"dropped_quota\"", t->victims_dropped_quota);
	family(f, "kvtier_l2_reads_total", "counter", "Part reads L2 served, by source.");
	sample(f, "kvtier_l2_reads_total", "source=\"disk\"", t->reads - t->reads_from_memory);
	sample(f, "kvtier_l2_reads_total", "source=\"write_buffer\"", t->reads_from_memory);
	one(f, "kvtier_l2_read_misses_total", "counter", "Part reads of blocks L2 does not hold.",
	    t->read_misses);
	family(f, "kvtier_l2_retries_total", "counter", "Reads and writes continued, by reason.");
	sample(f, "kvtier_l2_retries_total", "reason=\"short\"", t->short_ios);
	sample(f, "kvtier_l2_retries_total", "reason=\"eagain\"", t->eagain_retries);
	one(f, "kvtier_l2_regions_reclaimed_total", "counter", "Regions reclaimed for new writes.",
	    t->regions_reclaimed);
	one(f, "kvtier_l2_recovered_items", "gauge", "Items the scan at start found.",
	    t->recovered_items);
	one(f, "kvtier_l2_recovery_dropped_records", "gauge",
	    "Records the scan at start dropped (items missing a part).", t->recovery_dropped);
	one(f, "kvtier_l2_regions", "gauge", "L2 regions.", t->regions);
	one(f, "kvtier_l2_free_regions", "gauge", "L2 regions holding nothing.", t->free_regions);
	one(f, "kvtier_l2_ios_inflight", "gauge", "L2 reads and writes in flight.", t->ios_inflight);
	one(f, "kvtier_l2_ios_queued", "gauge", "L2 reads and writes waiting to be submitted.",
	    t->ios_queued);
	one(f, "kvtier_l2_ready", "gauge", "1 once the L2 index is rebuilt.", t->ready);
	one(f, "kvtier_l2_failed", "gauge", "1 after repeated L2 I/O errors (L1 only since).",
	    t->failed);
}

static void render_histograms(FILE *f, const struct dp_stats *st)
{
	static const double bounds[DP_HIST_BUCKETS - 1] = DP_HIST_BOUNDS;
	family(f, "kvtier_op_duration_seconds", "histogram",
	       "Time from a request's arrival to its reply, by op.");
#define DP_OP_HIST(name, opcode)                                                          \
	do {                                                                              \
		const struct dp_op_stats *o = &st->op_##name;                             \
		uint64_t cum = 0;                                                         \
		for (unsigned b = 0; b < DP_HIST_BUCKETS; b++) {                           \
			cum += LOAD(o->buckets[b]);                                       \
			if (b + 1 < DP_HIST_BUCKETS)                                      \
				fprintf(f, "kvtier_op_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %" PRIu64 "\n", \
					#name, bounds[b], cum);                           \
			else                                                              \
				fprintf(f, "kvtier_op_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", \
					#name, cum);                                      \
		}                                                                         \
		fprintf(f, "kvtier_op_duration_seconds_sum{op=\"%s\"} %.9f\n", #name,      \
			(double)LOAD(o->sum_ns) / 1e9);                                   \
		fprintf(f, "kvtier_op_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", #name, cum); \
	} while (0);
	DP_OPS(DP_OP_HIST)
#undef DP_OP_HIST
	family(f, "kvtier_op_errors_total", "counter", "Replies with an error status, by op.");
#define DP_OP_ERR(name, opcode) \
	sample(f, "kvtier_op_errors_total", "op=\"" #name "\"", LOAD(st->op_##name.errors));
	DP_OPS(DP_OP_ERR)
#undef DP_OP_ERR
}

/* One sample of name per buffer kind, from a gauge array indexed by kind. */
static void samples_by_kind(FILE *f, const char *name, const _Atomic uint64_t *gauges)
{
	for (uint32_t k = KVT_BUFFER_SHM; k < BUFFER_KINDS; k++) {
		char label[32];
		snprintf(label, sizeof(label), "kind=\"%s\"", buffers_kind_name(k));
		sample(f, name, label, LOAD(gauges[k]));
	}
}

static void render_dp(FILE *f, const struct dp *dp)
{
	const struct dp_stats *st = &dp->stats;
	render_histograms(f, st);
	family(f, "kvtier_requests_rejected_total", "counter",
	       "Data-plane requests or connections refused, by reason.");
#define DP_REJECT_SAMPLE(name, help) \
	sample(f, "kvtier_requests_rejected_total", "reason=\"" #name "\"", LOAD(st->rejected_##name));
	DP_REJECTS(DP_REJECT_SAMPLE)
#undef DP_REJECT_SAMPLE
#define DP_TOTAL_METRIC(field, metric, type, help) \
	if (*metric)                                 \
		one(f, metric, type, help, LOAD(st->field));
	DP_TOTALS(DP_TOTAL_METRIC)
#undef DP_TOTAL_METRIC
	family(f, "kvtier_buffers_registered", "gauge", "Staging buffers registered, by kind.");
	samples_by_kind(f, "kvtier_buffers_registered", dp->buffers.kind_registered);
	family(f, "kvtier_buffers_registered_bytes", "gauge",
	       "Bytes of staging buffers registered, by kind.");
	samples_by_kind(f, "kvtier_buffers_registered_bytes", dp->buffers.kind_bytes);
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

static void render_namespaces(FILE *f, bool have_l2, const struct metrics_ns *ns, uint32_t nns)
{
#define NS_FIELD(field) offsetof(struct metrics_ns, field)
	ns_family(f, "kvtier_namespace_l1_bytes", "gauge", "L1 bytes a namespace holds.", ns, nns,
		  NS_FIELD(l1_bytes));
	ns_family(f, "kvtier_namespace_l1_quota_bytes", "gauge",
		  "A namespace's L1 quota (0: none).", ns, nns, NS_FIELD(l1_quota));
	ns_family(f, "kvtier_namespace_l1_quota_evictions_total", "counter",
		  "Blocks a namespace evicted to stay within its L1 quota.", ns, nns,
		  NS_FIELD(l1_quota_evictions));
	if (have_l2) {
		ns_family(f, "kvtier_namespace_l2_bytes", "gauge",
			  "L2 bytes a namespace holds (records, headers included).", ns, nns,
			  NS_FIELD(l2_bytes));
		ns_family(f, "kvtier_namespace_l2_quota_bytes", "gauge",
			  "A namespace's L2 quota (0: none).", ns, nns, NS_FIELD(l2_quota));
	}
#undef NS_FIELD
}

static void render_gpu(FILE *f)
{
	one(f, "kvtier_gpu_devices", "gauge", "CUDA devices this kvtierd uses.",
	    (uint64_t)gpu_device_count());
	one(f, "kvtier_l1_pinned_bytes", "gauge", "Bytes of L1 pinned for DMA.",
	    LOAD(gpu_stats.l1_pinned));
	one(f, "kvtier_gpu_mappings_open", "gauge", "GPU staging mappings open.",
	    LOAD(gpu_stats.mappings_open));
#define GPU_METRIC(name, help) \
	one(f, "kvtier_gpu_" #name "_total", "counter", help ".", LOAD(gpu_stats.name));
	GPU_COUNTERS(GPU_METRIC)
#undef GPU_METRIC
}

char *metrics_render(const struct l1 *l1, const struct l2 *l2, const struct dp *dp,
		     const struct metrics_ns *ns, uint32_t nns, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	family(f, "kvtier_build_info", "gauge", "Build facts of this kvtierd; always 1.");
	fprintf(f, "kvtier_build_info{version=\"%s\",cuda=\"%s\"} 1\n", kvt_version(),
		gpu_built_in() ? "yes" : "no");
	one(f, "kvtier_up", "gauge", "1 while the daemon serves.", 1);
	struct l1_stats_snapshot s;
	l1_stats_read(l1, &s);
	struct l2_stats_snapshot t;
	if (l2)
		l2_stats_read(l2, &t);
	render_tiers(f, &s, l2 ? &t : NULL);
	if (l2)
		render_l2(f, &t);
	render_dp(f, dp);
	render_namespaces(f, l2 != NULL, ns, nns);
	render_gpu(f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}
