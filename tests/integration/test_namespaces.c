/*
 * test_namespaces.c — namespaces no client can exhaust, and per-namespace
 * quotas: the per-client creation limit and its error, idle namespaces
 * reclaimed (so more than the table's size come and go), quotas set by
 * flag and by PUT /v1/namespaces/{id}, a namespace past its quota evicting
 * its own least-recent blocks while another keeps all of its own, and the
 * same numbers in /v1/namespaces and /metrics.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp_helpers.h"
#include "kvtier/protocol.h"
#include "ns.h"

#define BLOCK (64 * KiB)

/* The namespace of model in /v1/namespaces (caller json_decref), or NULL. */
static json_t *namespace_of(struct daemon_fixture *d, const char *model)
{
	json_t *root = daemon_get_json(d, "/v1/namespaces"), *found = NULL, *ns;
	size_t i;
	json_array_foreach(json_object_get(root, "namespaces"), i, ns)
		if (strcmp(json_string_value(json_object_get(ns, "model")), model) == 0)
			found = json_incref(ns);
	json_decref(root);
	return found;
}

static long long ns_field(json_t *ns, const char *key)
{
	return json_integer_value(json_object_get(ns, key));
}

static size_t namespace_count(struct daemon_fixture *d)
{
	json_t *root = daemon_get_json(d, "/v1/namespaces");
	size_t n = json_array_size(json_object_get(root, "namespaces"));
	json_decref(root);
	return n;
}

static void test_creation_limit_and_reclaim(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--max-namespaces-per-client", "2", NULL});
	uint64_t session;
	int a = raw_connect(d), b = raw_connect(d), c = raw_connect(d), again = raw_connect(d);
	assert_int_equal(raw_hello_as(a, "a", 0, &session), 0);
	assert_int_equal(raw_hello_as(b, "b", session, NULL), 0);
	/* A third new namespace from the same client is refused, with its own code... */
	assert_int_equal(raw_hello_as(c, "c", session, NULL), -KVT_ENSLIMIT);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.namespace_limit"), 1);
	/* ...but naming one that exists is not creating one. */
	assert_int_equal(raw_hello_as(again, "a", session, NULL), 0);
	assert_int_equal(namespace_count(d), 2);
	close(a);
	close(b);
	close(c);
	close(again);
	/* No client and nothing in L1: both go. */
	long long reclaimed = 0;
	for (int i = 0; i < 400 && reclaimed != 2; i++)
		if ((reclaimed = daemon_stat(d, "dataplane.namespaces_reclaimed")) != 2)
			sleep_ms(10);
	assert_int_equal(reclaimed, 2);
	assert_int_equal(namespace_count(d), 0);
	/* More namespaces than the table holds come and go: none is refused. */
	for (int i = 0; i < KVT_NS_MAX + 100; i++) {
		char model[32];
		snprintf(model, sizeof(model), "m%d", i);
		int fd = raw_connect(d);
		assert_int_equal(raw_hello_as(fd, model, 0, NULL), 0);
		close(fd);
	}
	assert_int_equal(daemon_stat(d, "dataplane.rejected.namespaces_full"), 0);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.bad_hello"), 0);
	/* A namespace that holds blocks outlives its clients. */
	struct kvt_client *k = client(d, "keep", BLOCK, 1, 0, 0, 1);
	struct staging s = staging(k, 4 * BLOCK);
	store_range(k, &s, 0, 4, BLOCK);
	kvt_client_close(k);
	k = client(d, "keep", BLOCK, 1, 0, 0, 1);
	assert_int_equal(lookup_range(k, 0, 4, 0, NULL), 4);
	kvt_client_close(k);
	stop(d);
}

/* PUT /v1/namespaces/{id} with body; returns the HTTP status. */
static int put_quota(struct daemon_fixture *d, long long id, const char *body)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/namespaces/%lld", id);
	int status;
	json_decref(daemon_request(d, "PUT", path, body, &status));
	return status;
}

/* How many of keys [first, first+n) LOAD finds, checking the bytes of each. */
static uint32_t loadable(struct kvt_client *c, struct staging *s, uint64_t first, uint32_t n)
{
	struct kvt_block b[64];
	blocks_for(b, first, n, BLOCK);
	assert_int_equal(kvt_load(c, s->index, b, n), 0);
	uint32_t found = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (b[i].status == -ENOENT)
			continue;
		assert_int_equal(b[i].status, 0);
		assert_true(test_check(s->p + (uint64_t)i * BLOCK, BLOCK, first + i));
		found++;
	}
	return found;
}

static void test_quota_by_put(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--l1-size", "64MiB", NULL});
	struct kvt_client *q = client(d, "tenant-q", BLOCK, 1, 0, 0, 1);
	struct kvt_client *o = client(d, "tenant-o", BLOCK, 1, 0, 0, 1);
	struct staging sq = staging(q, 16 * BLOCK), so = staging(o, 16 * BLOCK);
	store_range(o, &so, 1000, 16, BLOCK);
	store_range(q, &sq, 0, 8, BLOCK);
	json_t *ns = namespace_of(d, "tenant-q");
	long long id = ns_field(ns, "id");
	long long slot = ns_field(ns, "l1_bytes") / 8;
	assert_int_equal(ns_field(ns, "l1_quota_bytes"), 0);
	assert_int_equal(ns_field(ns, "connections"), 1);
	json_decref(ns);
	/* Bad bodies are refused by the field; an unknown id is 404. */
	assert_int_equal(put_quota(d, id, "{\"l1_quota_bytes\": -1}"), 400);
	assert_int_equal(put_quota(d, id, "{\"l1_quota_bytes\": 100}"), 400);
	assert_int_equal(put_quota(d, id, "{\"l1_quota\": 1}"), 400);
	assert_int_equal(put_quota(d, id, "[1]"), 400);
	assert_int_equal(put_quota(d, 99999, "{\"l1_quota_bytes\": 0}"), 404);
	/* Lowering it to 4 blocks evicts the 4 least recent at once. */
	char body[128];
	snprintf(body, sizeof(body), "{\"l1_quota_bytes\": %lld}", 4 * slot);
	assert_int_equal(put_quota(d, id, body), 200);
	ns = namespace_of(d, "tenant-q");
	assert_int_equal(ns_field(ns, "l1_bytes"), 4 * slot);
	assert_int_equal(ns_field(ns, "l1_quota_bytes"), 4 * slot);
	assert_int_equal(ns_field(ns, "l1_quota_evictions"), 4);
	json_decref(ns);
	assert_int_equal(loadable(q, &sq, 0, 4), 0);
	assert_int_equal(loadable(q, &sq, 4, 4), 4);
	/* New stores past it evict the namespace's own least recent, not the other's. */
	store_range(q, &sq, 100, 2, BLOCK);
	assert_int_equal(loadable(q, &sq, 100, 2), 2);
	assert_int_equal(loadable(q, &sq, 4, 4), 2);
	assert_int_equal(loadable(o, &so, 1000, 16), 16);
	assert_int_equal(daemon_stat(d, "l1.evictions_quota"), 6);
	/* /metrics says the same. */
	int status;
	char *metrics = daemon_request_text(d, "GET", "/metrics", NULL, &status);
	assert_int_equal(status, 200);
	char want[160];
	snprintf(want, sizeof(want),
		 "kvtier_namespace_l1_quota_bytes{namespace=\"%lld\",model=\"tenant-q\"} %lld\n", id,
		 4 * slot);
	assert_non_null(strstr(metrics, want));
	snprintf(want, sizeof(want),
		 "kvtier_namespace_l1_bytes{namespace=\"%lld\",model=\"tenant-q\"} %lld\n", id,
		 4 * slot);
	assert_non_null(strstr(metrics, want));
	assert_non_null(strstr(metrics, "kvtier_evictions_total{tier=\"l1\",reason=\"quota\"} 6\n"));
	free(metrics);
	/* A size string works too; 0 lifts the quota. */
	assert_int_equal(put_quota(d, id, "{\"l1_quota_bytes\": \"0\"}"), 200);
	store_range(q, &sq, 200, 8, BLOCK);
	assert_int_equal(loadable(q, &sq, 200, 8), 8);
	kvt_client_close(q);
	kvt_client_close(o);
	stop(d);
}

static void test_default_quota_flag(void **state)
{
	(void)state;
	struct daemon_fixture *d = start((const char *[]){"--namespace-l1-quota", "256KiB", NULL});
	struct kvt_client *q = client(d, "tenant", BLOCK, 1, 0, 0, 1);
	struct staging s = staging(q, 16 * BLOCK);
	for (uint64_t first = 0; first < 16; first += 4)
		store_range(q, &s, first, 4, BLOCK);
	json_t *ns = namespace_of(d, "tenant");
	assert_int_equal(ns_field(ns, "l1_quota_bytes"), 256 * KiB);
	assert_true(ns_field(ns, "l1_bytes") <= 256 * KiB);
	assert_int_equal(ns_field(ns, "l1_quota_evictions"), 16 - ns_field(ns, "l1_items"));
	json_decref(ns);
	assert_int_equal(loadable(q, &s, 12, 4), 4); /* the most recent stay */
	/* One STORE larger than the quota: its blocks are pinned while they are
	 * written, so those past the quota fail with KVT_EQUOTA, counted. */
	struct kvt_block b[8];
	blocks_for(b, 500, 8, BLOCK);
	assert_int_equal(kvt_store(q, s.index, b, 8), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(b[i].status, i < 4 ? 0 : -KVT_EQUOTA);
	assert_int_equal(daemon_stat(d, "dataplane.rejected.quota"), 4);
	kvt_client_close(q);
	stop(d);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_creation_limit_and_reclaim, teardown),
		cmocka_unit_test_teardown(test_quota_by_put, teardown),
		cmocka_unit_test_teardown(test_default_quota_flag, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
