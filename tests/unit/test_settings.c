/* test_settings.c — flags, the JSON config file, defaults and validation. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "settings.h"
#include "test_util.h"

#define MAXARGS 16

struct loaded {
	struct kvtd_config cfg;
	enum kvtd_action action;
	char err[1024];
	int rc;
};

/* Loads a NULL-terminated argument list (argv[0] added). */
static void load(struct loaded *l, const char *const *args)
{
	char *argv[MAXARGS + 2] = {"kvtierd"};
	int argc = 1;
	for (; args[argc - 1]; argc++)
		argv[argc] = (char *)args[argc - 1];
	argv[argc] = NULL;
	memset(l, 0, sizeof(*l));
	l->rc = kvtd_config_load(&l->cfg, argc, argv, &l->action, l->err, sizeof(l->err));
	if (l->rc)
		print_message("load: %s\n", l->err);
}

static void expect_error(const char *const *args, const char *fragment)
{
	struct loaded l;
	load(&l, args);
	if (l.rc == 0)
		fail_msg("%s: accepted, wanted an error with '%s'", args[0], fragment);
	assert_int_equal(l.rc, -EINVAL);
	if (!strstr(l.err, fragment))
		fail_msg("error '%s' lacks '%s'", l.err, fragment);
}

/* Writes text to a fresh temporary file; the caller unlinks it. */
static void write_file(char *path, const char *text)
{
	strcpy(path, "/tmp/kvtier-test-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void test_defaults(void **state)
{
	(void)state;
	struct loaded l;
	const char *args[] = {"--runtime-dir", "/tmp/kvt-rt", NULL};
	load(&l, args);
	assert_int_equal(l.rc, 0);
	assert_int_equal(l.action, KVTD_RUN);
	assert_string_equal(l.cfg.http_listen, "127.0.0.1:8470");
	assert_string_equal(l.cfg.socket_path, "/tmp/kvt-rt/kvtierd.sock");
	assert_true(l.cfg.l1_size > 0 && l.cfg.l1_size <= (UINT64_C(1) << 30));
	assert_true(l.cfg.l1_size <= kvtd_memory_limit() / 4 + 1);
	assert_int_equal(l.cfg.l1_region_size, UINT64_C(64) << 20);
	assert_true(l.cfg.l1_high_watermark == 0.95);
	assert_true(l.cfg.l1_low_watermark == 0.90);
	assert_int_equal(l.cfg.max_leases, 65536);
	assert_int_equal(l.cfg.lease_max_ms, 30000);
	assert_null(l.cfg.l2_path);
	assert_false(l.cfg.l1_hugepages);
	assert_int_equal(l.cfg.log_level, KVT_LOG_INFO);
	kvtd_config_free(&l.cfg);
}

static void test_flags(void **state)
{
	(void)state;
	struct loaded l;
	const char *args[] = {"-s", "/tmp/x.sock", "--http", "[::1]:9000", "--l1-size",
			      "256MiB", "--l1-hugepages", "--l1-low-watermark=0.5",
			      "--log-level", "debug", "--runtime-dir", "/tmp/rt", "--l1-pin=false",
			      NULL};
	load(&l, args);
	assert_int_equal(l.rc, 0);
	assert_string_equal(l.cfg.socket_path, "/tmp/x.sock");
	assert_string_equal(l.cfg.http_listen, "[::1]:9000");
	assert_int_equal(l.cfg.l1_size, UINT64_C(256) << 20);
	assert_int_equal(l.cfg.l1_region_size, UINT64_C(16) << 20); /* 256 MiB / 16 */
	assert_true(l.cfg.l1_hugepages);
	assert_false(l.cfg.l1_pin);
	assert_true(l.cfg.l1_low_watermark == 0.5);
	assert_int_equal(l.cfg.log_level, KVT_LOG_DEBUG);
	kvtd_config_free(&l.cfg);
	/* A switch with a value that is not a boolean is refused by name. */
	const char *bad[] = {"--l1-pin=maybe", NULL};
	load(&l, bad);
	assert_int_equal(l.rc, -EINVAL);
	assert_non_null(strstr(l.err, "--l1-pin: 'maybe' is not true or false"));
}

static void test_file_then_flags(void **state)
{
	(void)state;
	char path[64];
	write_file(path, "{\"l1-size\": \"64MiB\", \"l1-region-size\": 4194304,\n"
			 " \"l1-high-watermark\": 0.8, \"l1-low-watermark\": 0.7, \"l1-hugepages\": true,\n"
			 " \"log-level\": \"warn\", \"http\": \"127.0.0.1:9100\",\n"
			 " \"max-leases\": 10, \"runtime-dir\": \"/tmp/rt2\"}");
	struct loaded l;
	const char *args[] = {"--config", path, "--log-level", "error", NULL};
	load(&l, args);
	unlink(path);
	assert_int_equal(l.rc, 0);
	assert_int_equal(l.cfg.l1_size, UINT64_C(64) << 20);
	assert_int_equal(l.cfg.l1_region_size, UINT64_C(4) << 20);
	assert_true(l.cfg.l1_high_watermark == 0.8);
	assert_true(l.cfg.l1_hugepages);
	assert_int_equal(l.cfg.max_leases, 10);
	assert_string_equal(l.cfg.http_listen, "127.0.0.1:9100");
	assert_int_equal(l.cfg.log_level, KVT_LOG_ERROR); /* the flag wins */
	assert_string_equal(l.cfg.config_file, path);
	kvtd_config_free(&l.cfg);
}

static void test_help_and_version(void **state)
{
	(void)state;
	struct loaded l;
	const char *help[] = {"--help", NULL};
	load(&l, help);
	assert_int_equal(l.rc, 0);
	assert_int_equal(l.action, KVTD_HELP);
	kvtd_config_free(&l.cfg);
	const char *version[] = {"-V", NULL};
	load(&l, version);
	assert_int_equal(l.action, KVTD_VERSION);
	kvtd_config_free(&l.cfg);
}

static void test_flag_errors(void **state)
{
	(void)state;
	expect_error((const char *[]){"--bogus", NULL}, "--bogus: unknown option");
	expect_error((const char *[]){"--l1-size", NULL}, "--l1-size: missing argument");
	expect_error((const char *[]){"stray", NULL}, "stray: unexpected argument");
	expect_error((const char *[]){"--l1-size", "12XB", NULL}, "--l1-size: bad size '12XB'");
	expect_error((const char *[]){"--l1-size", "99999999TiB", NULL}, "too large");
	expect_error((const char *[]){"--l1-size", "1KiB", NULL}, "--l1-size: 1024 is outside");
	expect_error((const char *[]){"--l1-size", "1TiB", NULL}, "more than the");
	expect_error((const char *[]){"--http", "localhost", NULL}, "--http: bad address");
	expect_error((const char *[]){"--http", "1.2.3.4:70000", NULL}, "bad address");
	expect_error((const char *[]){"--log-level", "loud", NULL}, "unknown level 'loud'");
	expect_error((const char *[]){"--l1-high-watermark", "1.5", NULL}, "not a fraction");
	expect_error((const char *[]){"--l1-high-watermark", "0.5", NULL},
		     "l1-low-watermark: 0.9 must be below l1-high-watermark 0.5");
	expect_error((const char *[]){"--l1-high-watermark", "0.02", "--l1-low-watermark", "0.01",
				      NULL},
		     "l1-low-watermark: 0.01 is below 0.5: each eviction would empty most of L1");
	expect_error((const char *[]){"--max-leases", "-3", NULL},
		     "--max-leases: '-3' is negative; give a whole number >= 1");
	expect_error((const char *[]){"--max-leases", "3x", NULL}, "'3x' is not a whole number");
	expect_error((const char *[]){"--l1-size", "-1GiB", NULL},
		     "--l1-size: a size cannot be negative ('-1GiB')");
	expect_error((const char *[]){"--lease-max-ms", "1000", "--lease-default-ms", "2000", NULL},
		     "lease-default-ms: 2000 must not be longer than lease-max-ms 1000");
	expect_error((const char *[]){"--l1-size", "1TiB", NULL},
		     "of memory this process may use (physical memory or its cgroup's limit)");
	expect_error((const char *[]){"--max-leases", "0", NULL}, "outside 1..");
	expect_error((const char *[]){"--l2-size", "1GiB", NULL}, "l2-size: given without l2-path");
	expect_error((const char *[]){"--l2-region-size", "8MiB", NULL},
		     "l2-region-size: given without l2-path");
	expect_error((const char *[]){"--l2-path", "/tmp/l2", "--l2-region-size", "5000", NULL},
		     "l2-region-size: must be a multiple of 4 KiB");
	expect_error((const char *[]){"--l2-path", "/tmp/l2", "--l2-queue-depth", "0", NULL},
		     "l2-queue-depth");
	expect_error((const char *[]){"--l2-path", "/tmp/l2", "--l2-write-buffers", "1", NULL},
		     "--l2-write-buffers: 1 is outside 2..64");
	expect_error((const char *[]){"--l1-size", "64MiB", "--l1-region-size", "128MiB", NULL},
		     "larger than l1-size");
	expect_error((const char *[]){"--l1-region-size", "1000000B", NULL}, "outside");
	expect_error((const char *[]){"--l1-region-size", "1050000", NULL}, "multiple of 4 KiB");
	expect_error((const char *[]){"--socket", "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock", NULL},
		     "longer than 107 bytes");
	expect_error((const char *[]){"--socket", "", NULL}, "--socket: must not be empty");
}

static void file_error(const char *text, const char *fragment)
{
	char path[64];
	write_file(path, text);
	const char *args[] = {"-c", path, NULL};
	expect_error(args, fragment);
	unlink(path);
}

static void test_file_errors(void **state)
{
	(void)state;
	file_error("{\"l1-sise\": \"1GiB\"}", "key \"l1-sise\": unknown key");
	file_error("{\"config\": \"/x\"}", "key \"config\": unknown key");
	file_error("{\"l1-size\": true}", "key \"l1-size\": expected a size string");
	file_error("{\"l1-size\": -5}", "key \"l1-size\": -5 is negative; expected a size");
	file_error("{\"l1-low-watermark\": -0.1}", "'-0.1' is not a fraction in (0, 1]");
	file_error("{\"l1-hugepages\": \"yes\"}", "expected true or false");
	file_error("{\"max-leases\": 2.5}", "expected a whole number");
	file_error("{\"http\": 8470}", "key \"http\": expected a string");
	file_error("{\"l1-size\": \"lots\"}", "key \"l1-size\": bad size 'lots'");
	file_error("[1, 2]", "top level must be a JSON object");
	file_error("{\"l1-size\": \"1GiB\",\n \"l1-size\": \"2GiB\"}", "line 2");
	file_error("{\n\n  oops }", "line 3");
	expect_error((const char *[]){"-c", "/nonexistent/kvtier.json", NULL},
		     "config file /nonexistent/kvtier.json: No such file or directory");
	expect_error((const char *[]){"-c", "/tmp", NULL}, "config file /tmp: is a directory, not a file");
}

/* Writes text to dir/rel, making the directories on the way. */
static void put_file(const char *dir, const char *rel, const char *text)
{
	char path[512], cmd[600];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* The memory limit from a cgroup tree of either version, the process deep inside it. */
static void test_memory_limit_cgroups(void **state)
{
	(void)state;
	char dir[] = "/tmp/kvtier-cg-XXXXXX", proc[600], cmd[600];
	assert_non_null(mkdtemp(dir));
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", dir);
	const uint64_t phys = UINT64_C(64) << 30;
	/* No cgroup files: physical memory. */
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), phys);
	/* v1: the memory controller's own hierarchy; a parent's limit applies too. */
	put_file(dir, "proc-cgroup", "12:cpu,cpuacct:/pod/c1\n4:memory:/pod/c1\n");
	put_file(dir, "memory/pod/c1/memory.limit_in_bytes", "9223372036854771712\n");
	put_file(dir, "memory/pod/memory.limit_in_bytes", "8589934592\n");
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), UINT64_C(8) << 30);
	put_file(dir, "memory/pod/c1/memory.limit_in_bytes", "4294967296\n");
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), UINT64_C(4) << 30);
	/* v2: memory.max along the unified tree; "max" is no limit. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/memory'", dir);
	assert_int_equal(system(cmd), 0);
	put_file(dir, "proc-cgroup", "0::/kubepods/pod1/ctr\n");
	put_file(dir, "kubepods/pod1/ctr/memory.max", "max\n");
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), phys);
	put_file(dir, "kubepods/pod1/memory.max", "2147483648\n");
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), UINT64_C(2) << 30);
	/* A private cgroup namespace: "/" and the limit at the mount's root. */
	put_file(dir, "proc-cgroup", "0::/\n");
	put_file(dir, "memory.max", "1073741824\n");
	assert_int_equal(kvtd_memory_limit_in(proc, dir, phys), UINT64_C(1) << 30);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_listen_parse(void **state)
{
	(void)state;
	char host[64];
	uint16_t port;
	assert_int_equal(kvtd_parse_listen("127.0.0.1:8470", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 8470);
	assert_int_equal(kvtd_parse_listen("[::1]:80", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(kvtd_parse_listen("::1:80", host, sizeof(host), &port), -EINVAL);
	assert_int_equal(kvtd_parse_listen(":80", host, sizeof(host), &port), -EINVAL);
	assert_int_equal(kvtd_parse_listen("a:0", host, sizeof(host), &port), 0);
	assert_int_equal(port, 0); /* any free port */
	assert_int_equal(kvtd_parse_listen("a:65536", host, sizeof(host), &port), -EINVAL);
	assert_int_equal(kvtd_parse_listen("a:", host, sizeof(host), &port), -EINVAL);
	assert_int_equal(kvtd_parse_listen("a:12x", host, sizeof(host), &port), -EINVAL);
}

struct diff_seen {
	char names[256];
	int live;
};

static void on_diff(const char *name, bool live, void *ctx)
{
	struct diff_seen *d = ctx;
	strcat(d->names, name);
	strcat(d->names, " ");
	d->live += live;
}

static void test_diff(void **state)
{
	(void)state;
	struct loaded a, b;
	load(&a, (const char *[]){"--runtime-dir", "/tmp/r", NULL});
	load(&b, (const char *[]){"--runtime-dir", "/tmp/r", "--log-level", "debug",
				  "--http", "127.0.0.1:1", NULL});
	struct diff_seen d = {{0}, 0};
	kvtd_config_diff(&a.cfg, &b.cfg, on_diff, &d);
	assert_string_equal(d.names, "http log-level ");
	assert_int_equal(d.live, 1);
	kvtd_config_free(&a.cfg);
	kvtd_config_free(&b.cfg);
}

static void test_help_text_lists_every_option(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	kvtd_config_print_help("kvtierd", f);
	fclose(f);
	const char *flags[] = {"--config FILE", "--runtime-dir DIR", "--socket PATH",
			       "--http ADDR:PORT", "--l1-size SIZE", "--l1-region-size SIZE",
			       "--l1-hugepages", "--l1-high-watermark FRACTION",
			       "--l1-low-watermark FRACTION", "--max-leases N",
			       "--lease-max-ms MS", "--l2-path PATH", "--l2-size SIZE",
			       "--log-level LEVEL", "--help", "--version", "127.0.0.1:8470"};
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (!strstr(buf, flags[i]))
			fail_msg("--help lacks %s", flags[i]);
	(free)(buf); /* open_memstream's buffer is from the real allocator: bypass the hook */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_file_then_flags),
		cmocka_unit_test(test_help_and_version),
		cmocka_unit_test(test_flag_errors),
		cmocka_unit_test(test_file_errors),
		cmocka_unit_test(test_listen_parse),
		cmocka_unit_test(test_memory_limit_cgroups),
		cmocka_unit_test(test_diff),
		cmocka_unit_test(test_help_text_lists_every_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
