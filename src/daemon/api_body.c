/* api_body.c — see api_body.h. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "gpu_id.h"
#include "kvtier/kvtier.h"
#include "settings.h"

#define LEASE_MAX_MS_LIMIT 3600000

int api_fail(struct api_error *err, unsigned status, const char *code, const char *fmt, ...)
{
	err->status = status;
	err->code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

static int need_object(json_t *body, struct api_error *err)
{
	return json_is_object(body) ? 0
				    : api_fail(err, 400, "invalid_body", "the body must be a JSON object");
}

int api_only_keys(json_t *obj, const char *where, const char *const *allowed,
		  struct api_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		bool known = false;
		for (const char *const *a = allowed; *a; a++)
			known |= strcmp(*a, key) == 0;
		if (!known)
			return api_fail(err, 400, "invalid_field", "%s%s: unknown field", where, key);
	}
	return 0;
}

bool api_parse_path_id(const char *text, uint32_t *id)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (!*text || *text == '-' || *end || errno || v > UINT32_MAX)
		return false;
	*id = (uint32_t)v;
	return true;
}

/* --- PUT /v1/policy --- */

static int take_fraction(json_t *obj, const char *key, const char *where, double *out,
			 struct api_error *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
		return api_fail(err, 400, "invalid_field", "%s%s: must be a number in (0, 1]",
				where, key);
	*out = json_number_value(v);
	return 0;
}

static int take_mode(json_t *body, bool have_l2, struct policy_values *p, struct api_error *err)
{
	json_t *mode = json_object_get(body, "mode");
	if (!mode)
		return 0;
	const char *m = json_string_value(mode);
	bool evict = m && strcmp(m, "evict") == 0;
	if (!m || (!evict && strcmp(m, "l1-only") != 0))
		return api_fail(err, 400, "invalid_field", "mode: must be \"evict\" or \"l1-only\"");
	if (evict && !have_l2)
		return api_fail(err, 409, "no_l2",
				"mode: evict needs an L2 tier, and this kvtierd has none (no --l2-path)");
	p->evict = evict;
	return 0;
}

static int take_watermarks(json_t *body, struct policy_values *p, struct api_error *err)
{
	static const char *const tiers[] = {"l1", NULL};
	static const char *const l1[] = {"high_watermark", "low_watermark", NULL};
	json_t *t = json_object_get(body, "tiers");
	if (!t)
		return 0;
	if (!json_is_object(t))
		return api_fail(err, 400, "invalid_field", "tiers: must be an object");
	if (api_only_keys(t, "tiers.", tiers, err))
		return -1;
	json_t *t1 = json_object_get(t, "l1");
	if (!t1)
		return 0;
	if (!json_is_object(t1))
		return api_fail(err, 400, "invalid_field", "tiers.l1: must be an object");
	if (api_only_keys(t1, "tiers.l1.", l1, err) ||
	    take_fraction(t1, "high_watermark", "tiers.l1.", &p->high, err) ||
	    take_fraction(t1, "low_watermark", "tiers.l1.", &p->low, err))
		return -1;
	return 0;
}

/* The millisecond keys, each an integer in min..LEASE_MAX_MS_LIMIT. */
static int take_ms(json_t *body, struct policy_values *p, struct api_error *err)
{
	static const char *const keys[] = {"lease_max_ms", "lease_default_ms", "store_wait_ms"};
	static const int min[] = {1, 1, 0};
	uint32_t *fields[] = {&p->lease_max_ms, &p->lease_default_ms, &p->store_wait_ms};
	for (int i = 0; i < 3; i++) {
		json_t *v = json_object_get(body, keys[i]);
		if (v && (!json_is_integer(v) || json_integer_value(v) < min[i] ||
			  json_integer_value(v) > LEASE_MAX_MS_LIMIT))
			return api_fail(err, 400, "invalid_field", "%s: must be an integer in %d..%d",
					keys[i], min[i], LEASE_MAX_MS_LIMIT);
		if (v)
			*fields[i] = (uint32_t)json_integer_value(v);
	}
	return 0;
}

int api_parse_policy(json_t *body, bool have_l2, struct policy_values *p, struct api_error *err)
{
	static const char *const top[] = {"mode", "tiers", "lease_max_ms", "lease_default_ms",
					  "store_wait_ms", NULL};
	if (need_object(body, err) || api_only_keys(body, "", top, err) ||
	    take_mode(body, have_l2, p, err) || take_watermarks(body, p, err) ||
	    take_ms(body, p, err))
		return -1;
	switch (kvtd_check_rules(p->high, p->low, p->lease_default_ms, p->lease_max_ms)) {
	case KVTD_RULE_WATERMARK_ORDER:
		return api_fail(err, 400, "invalid_field",
				"tiers.l1.low_watermark: %.3g must be below high_watermark %.3g",
				p->low, p->high);
	case KVTD_RULE_WATERMARK_FLOOR:
		return api_fail(err, 400, "invalid_field",
				"tiers.l1.low_watermark: %.3g is below %.2g: each eviction would empty most of L1",
				p->low, KVTD_WATERMARK_FLOOR);
	case KVTD_RULE_LEASE_ORDER:
		return api_fail(err, 400, "invalid_field",
				"lease_default_ms: %u must not be longer than lease_max_ms %u",
				p->lease_default_ms, p->lease_max_ms);
	case KVTD_RULES_HOLD:
		break;
	}
	return 0;
}

/* --- POST /v1/tiers/{tier}/evict --- */

int api_parse_evict(json_t *body, uint64_t *bytes, struct api_error *err)
{
	static const char *const keys[] = {"bytes", "all", NULL};
	if (need_object(body, err) || api_only_keys(body, "", keys, err))
		return -1;
	json_t *b = json_object_get(body, "bytes"), *all = json_object_get(body, "all");
	if (b && !all && json_is_integer(b) && json_integer_value(b) > 0)
		*bytes = (uint64_t)json_integer_value(b);
	else if (all && !b && json_is_true(all))
		*bytes = UINT64_MAX;
	else
		return api_fail(err, 400, "invalid_field",
				"give either \"bytes\": a positive integer, or \"all\": true");
	return 0;
}

/* --- PUT /v1/namespaces/{id} --- */

/* A byte count: an integer >= 0, or a size string ("8GiB"). */
static int take_bytes(json_t *obj, const char *key, bool *set, uint64_t *out,
		      struct api_error *err)
{
	json_t *v = json_object_get(obj, key);
	*set = v != NULL;
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	/* At most INT64_MAX: what is set is echoed as a JSON integer. */
	if (json_is_string(v) && kvt_parse_size(json_string_value(v), out) == 0 &&
	    *out <= INT64_MAX)
		return 0;
	return api_fail(err, 400, "invalid_field",
			"%s: must be bytes (an integer >= 0, at most 2^63 - 1) or a size such as "
			"\"4GiB\"; 0 removes the quota",
			key);
}

int api_parse_quota(json_t *body, bool have_l2, struct api_quota *q, struct api_error *err)
{
	static const char *const keys[] = {"l1_quota_bytes", "l2_quota_bytes", NULL};
	if (need_object(body, err) || api_only_keys(body, "", keys, err) ||
	    take_bytes(body, "l1_quota_bytes", &q->set_l1, &q->l1, err) ||
	    take_bytes(body, "l2_quota_bytes", &q->set_l2, &q->l2, err))
		return -1;
	if (q->set_l2 && q->l2 && !have_l2)
		return api_fail(err, 409, "no_l2", "l2_quota_bytes: this kvtierd has no L2 tier");
	return 0;
}

/* --- POST /v1/buffers --- */

static int take_ipc_fields(json_t *body, struct api_buffer *b, struct api_error *err)
{
	json_t *offset = json_object_get(body, "offset");
	const char *handle = json_string_value(json_object_get(body, "handle"));
	if (!handle || gpu_ipc_handle_parse(handle, b->handle))
		return api_fail(err, 400, "invalid_field",
				"handle: must be the 64-byte cudaIpcMemHandle_t as 128 hex digits");
	const char *dev = json_string_value(json_object_get(body, "device"));
	if (!dev || gpu_uuid_parse(dev, b->device_uuid))
		return api_fail(err, 400, "invalid_field",
				"device: must be the GPU's UUID, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
	if (offset && (!json_is_integer(offset) || json_integer_value(offset) < 0))
		return api_fail(err, 400, "invalid_field",
				"offset: must be the buffer's byte offset in the allocation (>= 0)");
	b->offset = offset ? (uint64_t)json_integer_value(offset) : 0;
	return 0;
}

/* A session secret as libkvtier shows it: 16 hex digits, not 0. */
static bool parse_session(const char *text, uint64_t *out)
{
	if (!text || strlen(text) != 16 || strspn(text, "0123456789abcdefABCDEF") != 16)
		return false;
	*out = strtoull(text, NULL, 16);
	return *out != 0;
}

/* The owner: "pid" (a process kvtierd can see) or "session" (a client's secret), one of them. */
static int take_owner(json_t *body, struct api_buffer *b, struct api_error *err)
{
	json_t *pid = json_object_get(body, "pid"), *session = json_object_get(body, "session");
	if (pid && session)
		return api_fail(err, 400, "invalid_field",
				"session: name the owner by pid or by session, not both");
	if (session) {
		if (!parse_session(json_string_value(session), &b->session))
			return api_fail(err, 400, "invalid_field",
					"session: must be a client's session secret, 16 hex digits "
					"(kvt_client_session)");
		return 0;
	}
	if (!json_is_integer(pid) || json_integer_value(pid) <= 0 ||
	    json_integer_value(pid) > INT32_MAX)
		return api_fail(err, 400, "invalid_field",
				"pid: must be the id of the process that will use the buffer "
				"(or name its client by \"session\")");
	b->pid = (pid_t)json_integer_value(pid);
	return 0;
}

int api_parse_buffer(json_t *body, struct api_buffer *b, struct api_error *err)
{
	static const char *const keys[] = {"kind", "path", "size", "pid", "session", "handle",
					   "device", "offset", NULL};
	if (need_object(body, err) || api_only_keys(body, "", keys, err))
		return -1;
	const char *kind = json_string_value(json_object_get(body, "kind"));
	b->ipc = kind && strcmp(kind, "cuda_ipc") == 0;
	if (!kind || (!b->ipc && strcmp(kind, "shm") != 0))
		return api_fail(err, 400, "invalid_field", "kind: must be \"shm\" or \"cuda_ipc\"");
	json_t *path = json_object_get(body, "path"), *size = json_object_get(body, "size");
	if (!b->ipc && !json_is_string(path))
		return api_fail(err, 400, "invalid_field", "path: must be a file under /dev/shm/");
	if (!json_is_integer(size) || json_integer_value(size) <= 0)
		return api_fail(err, 400, "invalid_field", "size: must be a positive integer of bytes");
	if (take_owner(body, b, err))
		return -1;
	b->path = json_string_value(path);
	b->size = (uint64_t)json_integer_value(size);
	return b->ipc ? take_ipc_fields(body, b, err) : 0;
}
