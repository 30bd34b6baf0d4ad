/*
 * test_http_guard.c — the control plane's connection guard (http_guard.h)
 * and whom it answers (http_origin.h). Connections are socket pairs: a shed
 * connection's far end reads its end of file, a kept one's has nothing to
 * read. Past max_waiting the oldest waiting connections go, never one being
 * served; past the deadline every waiting one goes; an answer starts a new
 * deadline and moves the connection to the back. Each shed is counted.
 */
#include "config.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_guard.h"
#include "http_origin.h"
#include "test_util.h"

#define N 6

struct pairs {
	int near[N], far[N];
};

static void open_pairs(struct pairs *p)
{
	for (int i = 0; i < N; i++) {
		int sv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		p->near[i] = sv[0];
		p->far[i] = sv[1];
	}
}

static void close_pairs(struct pairs *p)
{
	for (int i = 0; i < N; i++) {
		close(p->near[i]);
		close(p->far[i]);
	}
}

/* Whether connection i was shut down: its far end reads end of file at once. */
static bool shed(const struct pairs *p, int i)
{
	char c;
	return recv(p->far[i], &c, 1, MSG_DONTWAIT) == 0;
}

static void test_oldest_waiting_go_first(void **state)
{
	(void)state;
	struct http_stats stats = {0};
	struct http_guard g;
	struct pairs p;
	open_pairs(&p);
	http_guard_init(&g, &stats);
	g.max_waiting = 3;
	struct guarded_conn *c[N];
	for (int i = 0; i < 3; i++)
		c[i] = http_guard_started(&g, p.near[i]);
	http_guard_serving(&g, c[0], true); /* served: never shed */
	c[3] = http_guard_started(&g, p.near[3]);
	assert_false(shed(&p, 0) || shed(&p, 1) || shed(&p, 2) || shed(&p, 3));
	http_guard_answered(&g, c[1]); /* now the newest */
	c[4] = http_guard_started(&g, p.near[4]);
	c[5] = http_guard_started(&g, p.near[5]);
	/* Waiting, oldest first: 2, 3, 1, 4, 5; two of five over three. */
	assert_true(shed(&p, 2) && shed(&p, 3));
	assert_false(shed(&p, 0) || shed(&p, 1) || shed(&p, 4) || shed(&p, 5));
	assert_int_equal(stats.shed_crowded, 2);
	assert_int_equal(stats.shed_overdue, 0);
	assert_int_equal(stats.connections, 6);
	for (int i = 0; i < N; i++)
		http_guard_closed(&g, c[i]);
	assert_int_equal(stats.connections, 0);
	assert_int_equal(g.waiting, 0);
	http_guard_destroy(&g);
	close_pairs(&p);
}

static void test_overdue_waiting_go(void **state)
{
	(void)state;
	struct http_stats stats = {0};
	struct http_guard g;
	struct pairs p;
	open_pairs(&p);
	http_guard_init(&g, &stats);
	struct guarded_conn *a = http_guard_started(&g, p.near[0]);
	struct guarded_conn *b = http_guard_started(&g, p.near[1]);
	http_guard_serving(&g, b, true);
	g.deadline_ms = 0; /* everything waiting is overdue at the next start */
	struct guarded_conn *c = http_guard_started(&g, p.near[2]);
	assert_true(shed(&p, 0));
	assert_false(shed(&p, 1) || shed(&p, 2));
	assert_int_equal(stats.shed_overdue, 1);
	http_guard_serving(&g, b, false); /* still counted once when it closes */
	http_guard_closed(&g, a);
	http_guard_closed(&g, b);
	http_guard_closed(&g, c);
	assert_int_equal(g.waiting, 0);
	http_guard_destroy(&g);
	close_pairs(&p);
}

static void test_hosts(void **state)
{
	(void)state;
	static const char *const ok[] = {"127.0.0.1:8470", "127.0.0.1", "10.1.2.3:80", "[::1]:8470",
					 "[fe80::1]", "localhost:8470", "LOCALHOST.", "kvtier.ns.svc",
					 "Kvtier.NS.svc.:8470", "other"};
	static const char *const bad[] = {"evil.example:8470", "localhost.evil.example", "",
					  "[::1", "::1", "kvtier.ns.svc.evil", "127.0.0.1.nip.io"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_true(http_host_allowed(ok[i], "kvtier.ns.svc,other"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(http_host_allowed(bad[i], "kvtier.ns.svc,other"));
	assert_true(http_host_allowed(NULL, NULL)); /* HTTP/1.0: no Host */
	assert_false(http_host_allowed("kvtier.ns.svc", NULL));
}

static void test_origins(void **state)
{
	(void)state;
	assert_true(http_origin_allowed(NULL, "127.0.0.1:8470"));
	assert_true(http_origin_allowed("http://127.0.0.1:8470", "127.0.0.1:8470"));
	assert_true(http_origin_allowed("https://LocalHost:8470", "localhost:8470"));
	assert_false(http_origin_allowed("http://127.0.0.1:8471", "127.0.0.1:8470"));
	assert_false(http_origin_allowed("http://evil.example", "127.0.0.1:8470"));
	assert_false(http_origin_allowed("null", "127.0.0.1:8470"));
	assert_false(http_origin_allowed("http://127.0.0.1:8470", NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oldest_waiting_go_first),
		cmocka_unit_test(test_overdue_waiting_go),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_origins),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
