/*
 * api_body.h — what the JSON bodies of the /v1 endpoints mean: each body's
 * fields checked and turned into a plain request, with the error the client
 * gets (400 naming the field, 409 for what this daemon cannot take). Pure
 * functions over jansson values, no daemon state: any thread, and a fuzz
 * target (tests/fuzz/fuzz_api_body.c) drives them directly.
 */
#ifndef KVTD_API_BODY_H
#define KVTD_API_BODY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier/protocol.h"
#include "policy.h"

struct api_error {
	unsigned status;
	const char *code;
	char message[256];
};

/* Fills err (status, code, message) and returns -1. */
int api_fail(struct api_error *err, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Fails on the first key of obj not in allowed (NULL-terminated); where prefixes it. */
int api_only_keys(json_t *obj, const char *where, const char *const *allowed,
		  struct api_error *err);

/* The decimal id at the end of a path ("/v1/buffers/12"). */
bool api_parse_path_id(const char *text, uint32_t *id);

/* The live policy, as GET /v1/policy shows it and PUT /v1/policy changes it. */
/*
 * Merges a PUT /v1/policy body into p (a body names only what it changes)
 * and checks the cross-field rules on the result. 0 or -1 with err.
 */
int api_parse_policy(json_t *body, bool have_l2, struct policy_values *p, struct api_error *err);

/* POST /v1/tiers/{tier}/evict: {"bytes": N > 0} or {"all": true} (UINT64_MAX). */
int api_parse_evict(json_t *body, uint64_t *bytes, struct api_error *err);

/* PUT /v1/namespaces/{id}: the quotas it sets. */
struct api_quota {
	bool set_l1, set_l2;
	uint64_t l1, l2;
};
int api_parse_quota(json_t *body, bool have_l2, struct api_quota *q, struct api_error *err);

/* POST /v1/buffers: a shm file by path, or a cuda_ipc allocation. */
struct api_buffer {
	bool ipc;
	const char *path;           /* shm: into body, valid while it lives */
	uint64_t size;
	pid_t pid;                  /* the owner: a process, or (pid 0) ... */
	uint64_t session;           /* ... the client session with this secret */
	uint8_t device_uuid[KVT_UUID_BYTES];   /* cuda_ipc */
	uint8_t handle[KVT_IPC_HANDLE_BYTES];
	uint64_t offset;
};
int api_parse_buffer(json_t *body, struct api_buffer *b, struct api_error *err);

#endif
