/* test_common.c — libkvtier's common pieces: sizes, errors, the key chain. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "test_util.h"

static void parse_ok(const char *text, uint64_t want)
{
	uint64_t got = 0;
	assert_int_equal(kvt_parse_size(text, &got), 0);
	assert_int_equal(got, want);
}

static void test_parse_size_units(void **state)
{
	(void)state;
	parse_ok("0", 0);
	parse_ok("4096", 4096);
	parse_ok("12B", 12);
	parse_ok("1KiB", 1024);
	parse_ok("64MiB", UINT64_C(64) << 20);
	parse_ok("64 MiB", UINT64_C(64) << 20);
	parse_ok("3GiB", UINT64_C(3) << 30);
	parse_ok("2TiB", UINT64_C(2) << 40);
	parse_ok("1KB", 1000);
	parse_ok("5MB", 5000000);
	parse_ok("2GB", 2000000000);
	parse_ok("1TB", UINT64_C(1000000000000));
	parse_ok("16777215TiB", UINT64_C(16777215) << 40);
}

static void test_parse_size_rejects(void **state)
{
	(void)state;
	uint64_t v = 77;
	const char *bad[] = {"", "MiB", "-1", "1.5GiB", "1 GiB ", "1  GiB", "1gib",
			     "1K", "1 M", "0x10", " 1", "1GiBx"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kvt_parse_size(bad[i], &v), -EINVAL);
	assert_int_equal(kvt_parse_size("18446744073709551616", &v), -ERANGE);
	assert_int_equal(kvt_parse_size("16777215 TiB", &v), 0);
	assert_int_equal(kvt_parse_size("16777216TiB", &v), -ERANGE);
	assert_int_equal(kvt_parse_size(NULL, &v), -EINVAL);
}

static void test_format_size(void **state)
{
	(void)state;
	char buf[32];
	kvt_format_size(UINT64_C(1) << 30, buf, sizeof(buf));
	assert_string_equal(buf, "1 GiB");
	kvt_format_size(1536 * 1024, buf, sizeof(buf));
	assert_string_equal(buf, "1536 KiB");
	kvt_format_size(4097, buf, sizeof(buf));
	assert_string_equal(buf, "4097 B");
	kvt_format_size(0, buf, sizeof(buf));
	assert_string_equal(buf, "0 B");
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(kvt_strerror(0), "success");
	assert_string_equal(kvt_strerror(-ENOENT), kvt_strerror(ENOENT));
	assert_non_null(strstr(kvt_strerror(-ENOENT), "No such file"));
	assert_non_null(strstr(kvt_strerror(-KVT_ENSCONFLICT), "namespace"));
	assert_non_null(strstr(kvt_strerror(-KVT_EALLPINNED), "pinned"));
	assert_non_null(strstr(kvt_strerror(-KVT_EQUOTA), "quota"));
	assert_non_null(strstr(kvt_strerror(-KVT_ENSLIMIT), "max-namespaces-per-client"));
	assert_int_equal(KVT_ENSLIMIT, 4101); /* the values docs/protocol.md gives */
	assert_string_equal(kvt_strerror(KVT_EBASE), "unknown kvtier error");
	assert_string_equal(kvt_strerror(-999999), "unknown error");
}

static void test_key_chain_matches_xxh3(void **state)
{
	(void)state;
	int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct kvt_key keys[4];
	assert_int_equal(kvt_key_chain(tokens, 8, 4, keys, 4), 2);

	/* key_0 = XXH3-128(tokens 0..3), key_1 = XXH3-128(key_0 || tokens 4..7). */
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(tokens, 16, KVT_CHAIN_SEED));
	assert_memory_equal(keys[0].bytes, c.digest, 16);
	uint8_t buf[32];
	memcpy(buf, keys[0].bytes, 16);
	memcpy(buf + 16, tokens + 4, 16);
	XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(buf, 32, KVT_CHAIN_SEED));
	assert_memory_equal(keys[1].bytes, c.digest, 16);
}

static void test_key_chain_each_is_next_per_parent(void **state)
{
	(void)state;
	int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8}, step[2] = {-2, 9};
	struct kvt_key parents[2], want[2], got[2];
	assert_int_equal(kvt_key_chain(tokens, 8, 4, parents, 2), 2);
	for (int i = 0; i < 2; i++)
		kvt_key_chain_next(&parents[i], step, 2, &want[i]);
	memset(got, 0xa5, sizeof(got));
	kvt_key_chain_each(parents, 2, step, 2, got);
	assert_memory_equal(got, want, sizeof(want));
	kvt_key_chain_each(parents, 0, step, 2, got); /* n 0: nothing written */
	assert_memory_equal(got, want, sizeof(want));
	kvt_key_chain_each(parents, 2, step, 2, parents); /* in place */
	assert_memory_equal(parents, want, sizeof(want));
}

static void test_key_chain_prefix_property(void **state)
{
	(void)state;
	int32_t a[12] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12};
	int32_t b[12];
	memcpy(b, a, sizeof(a));
	b[6] = 99; /* differs in the second block only */
	struct kvt_key ka[3], kb[3];
	assert_int_equal(kvt_key_chain(a, 12, 4, ka, 3), 3);
	assert_int_equal(kvt_key_chain(b, 12, 4, kb, 3), 3);
	assert_memory_equal(ka[0].bytes, kb[0].bytes, 16);
	assert_memory_not_equal(ka[1].bytes, kb[1].bytes, 16);
	/* The change carries down the chain even though block 3 is equal. */
	assert_memory_not_equal(ka[2].bytes, kb[2].bytes, 16);
	/* A partial trailing block gets no key; max_keys caps the count. */
	assert_int_equal(kvt_key_chain(a, 11, 4, ka, 3), 2);
	assert_int_equal(kvt_key_chain(a, 12, 4, ka, 1), 1);
	assert_int_equal(kvt_key_chain(a, 12, 0, ka, 3), -EINVAL);
}

static void test_version(void **state)
{
	(void)state;
	assert_string_equal(kvt_version(), PACKAGE_VERSION);
}

/* The socket a client finds with no flag is the one kvtierd makes with none. */
static void test_default_socket(void **state)
{
	(void)state;
	char buf[256], want[256];
	if (geteuid() == 0) {
		snprintf(want, sizeof(want), "/run/kvtier/kvtierd.sock");
	} else {
		setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
		snprintf(want, sizeof(want), "/run/user/1234/kvtier/kvtierd.sock");
	}
	assert_int_equal(kvt_default_socket(buf, sizeof(buf)), 0);
	assert_string_equal(buf, want);
	assert_int_equal(kvt_default_socket(buf, 8), -ENAMETOOLONG);
	assert_int_equal(kvt_default_socket(buf, strlen(want)), -ENAMETOOLONG); /* no room for the NUL */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_socket),
		cmocka_unit_test(test_parse_size_units),
		cmocka_unit_test(test_parse_size_rejects),
		cmocka_unit_test(test_format_size),
		cmocka_unit_test(test_strerror),
		cmocka_unit_test(test_key_chain_matches_xxh3),
		cmocka_unit_test(test_key_chain_each_is_next_per_parent),
		cmocka_unit_test(test_key_chain_prefix_property),
		cmocka_unit_test(test_version),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
