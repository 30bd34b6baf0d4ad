/*
 * daemon_fixture.h — C integration tests' view of a real kvtierd: start one
 * on a temporary runtime dir with a free loopback port, read its /v1/stats,
 * stop it and check it exited cleanly.
 */
#ifndef KVT_DAEMON_FIXTURE_H
#define KVT_DAEMON_FIXTURE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

struct daemon_fixture {
	pid_t pid;
	uint16_t http_port;
	char dir[64];
	char socket[128];
	char log[128];
};

/* Starts kvtierd ($KVTIERD) with extra flags (NULL-terminated). 0 or -1. */
int daemon_start(struct daemon_fixture *d, const char *const *flags);
/* SIGTERM, wait; returns the exit status (0 clean), removes the dir. */
int daemon_stop(struct daemon_fixture *d);
/* GET path; the parsed JSON body (caller json_decref), NULL on failure. */
json_t *daemon_get_json(const struct daemon_fixture *d, const char *path);
/* METHOD path with a JSON body (or NULL); the parsed answer, the status in *status. */
json_t *daemon_request(const struct daemon_fixture *d, const char *method, const char *path,
		       const char *body, int *status);
/* The same, the body as text (caller frees), NULL on failure. */
char *daemon_request_text(const struct daemon_fixture *d, const char *method, const char *path,
			  const char *body, int *status);
/* A number from /v1/stats by dotted path ("dataplane.rejected.bad_magic"); -1 on error. */
long long daemon_stat(const struct daemon_fixture *d, const char *dotted);

#endif
