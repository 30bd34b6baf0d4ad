/*
 * fuzz_api_body.c — libFuzzer target for the control plane's JSON bodies
 * (api_body.h): the first byte picks the endpoint (and whether the daemon
 * has L2), the rest is the body, parsed as http.c parses it. A refused body
 * must come with a 400 or 409, a code and a message; an accepted one must
 * hold every rule the daemon relies on.
 */
#include "config.h"

#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "api_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const struct api_error *err)
{
	if ((err->status != 400 && err->status != 409) || !err->code || !err->message[0])
		__builtin_trap();
}

static void check_policy(const struct policy_values *p, bool have_l2)
{
	if (!(p->low > 0 && p->low < p->high && p->high <= 1) || p->lease_default_ms < 1 ||
	    p->lease_default_ms > p->lease_max_ms || p->lease_max_ms > 3600000 ||
	    (p->evict && !have_l2))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned which = data[0] % 4;
	bool have_l2 = data[0] & 0x80;
	json_error_t jerr;
	json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &jerr);
	if (!body)
		return 0;
	struct api_error err = {0};
	int rc = 0;
	if (which == 0) {
		struct policy_values p = {have_l2, 0.95, 0.90, 30000, 5000, 1000, KVT_LOG_INFO};
		rc = api_parse_policy(body, have_l2, &p, &err);
		if (rc == 0)
			check_policy(&p, have_l2);
	} else if (which == 1) {
		uint64_t bytes = 0;
		rc = api_parse_evict(body, &bytes, &err);
		if (rc == 0 && bytes == 0)
			__builtin_trap();
	} else if (which == 2) {
		struct api_quota q = {0};
		rc = api_parse_quota(body, have_l2, &q, &err);
		if (rc == 0 && q.set_l2 && q.l2 && !have_l2)
			__builtin_trap();
	} else {
		struct api_buffer b = {0};
		rc = api_parse_buffer(body, &b, &err);
		if (rc == 0 && (b.size == 0 || b.pid <= 0 || (!b.ipc && !b.path)))
			__builtin_trap();
	}
	if (rc)
		check_error(&err);
	json_decref(body);
	return 0;
}
