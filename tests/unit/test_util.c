/* test_util.c — see test_util.h; also the strdup of alloc_hooks.h. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
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

/*
 * posix_memalign through the tracking allocator: a block of size + align
 * bytes, handed out at its first aligned address. The aligned blocks are
 * listed so that free finds the block it came from (test-only: a short list).
 */
struct aligned_block {
	void *aligned, *raw;
	struct aligned_block *next;
};
static struct aligned_block *aligned_blocks;

int kvt_test_posix_memalign(void **out, size_t align, size_t size, const char *file, int line);
int kvt_test_posix_memalign(void **out, size_t align, size_t size, const char *file, int line)
{
	struct aligned_block *a = _test_malloc(sizeof(*a), file, line);
	char *raw = _test_malloc(size + align, file, line);
	if (!a || !raw) {
		_test_free(a, file, line);
		_test_free(raw, file, line);
		return ENOMEM;
	}
	*a = (struct aligned_block){(void *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1)),
				    raw, aligned_blocks};
	aligned_blocks = a;
	*out = a->aligned;
	return 0;
}

void kvt_test_free(void *ptr, const char *file, int line);
void kvt_test_free(void *ptr, const char *file, int line)
{
	for (struct aligned_block **p = &aligned_blocks; ptr && *p; p = &(*p)->next) {
		struct aligned_block *a = *p;
		if (a->aligned == ptr) {
			*p = a->next;
			_test_free(a->raw, file, line);
			_test_free(a, file, line);
			return;
		}
	}
	_test_free(ptr, file, line);
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
