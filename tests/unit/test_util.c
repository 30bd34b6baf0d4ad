/* test_util.c — see test_util.h; also the strdup of alloc_hooks.h. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "test_util.h"

/*
 * cmocka writes a failed assertion to stdout; a sanitizer that then aborts
 * at exit (a leak left by the failed test) would lose a buffered stdout, so
 * every test program's stdout is line-buffered from the start.
 */
__attribute__((constructor)) static void line_buffered_stdout(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

char *kvt_test_strdup(const char *s, const char *file, int line);
char *kvt_test_strdup(const char *s, const char *file, int line)
{
	size_t n = strlen(s) + 1;
	char *p = _test_malloc(n, file, line);
	if (p)
		memcpy(p, s, n);
	return p;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

struct kvt_key test_key(uint64_t n)
{
	struct kvt_key k;
	uint64_t s = n, a = splitmix(&s), b = splitmix(&s);
	memcpy(k.bytes, &a, 8);
	memcpy(k.bytes + 8, &b, 8);
	return k;
}

void test_fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);
		memcpy(buf + i, &v, 8);
	}
	uint64_t v = splitmix(&s);
	memcpy(buf + i, &v, len - i);
}

int test_check(const uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);
		if (memcmp(buf + i, &v, 8))
			return 0;
	}
	uint64_t v = splitmix(&s);
	return memcmp(buf + i, &v, len - i) == 0;
}
