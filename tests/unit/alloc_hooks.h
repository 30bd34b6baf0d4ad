/*
 * alloc_hooks.h — forced into the daemon sources that unit tests compile
 * (-include), so their heap goes through cmocka's tracking allocator and a
 * test that leaks a block fails, naming the file and line that made it.
 */
#ifndef KVT_ALLOC_HOOKS_H
#define KVT_ALLOC_HOOKS_H

#include "config.h"   /* first: feature macros (_GNU_SOURCE) come before any libc header */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void *_test_malloc(const size_t size, const char *file, const int line);
void *_test_calloc(const size_t n, const size_t size, const char *file, const int line);
void *_test_realloc(void *ptr, const size_t size, const char *file, const int line);
void _test_free(void *const ptr, const char *file, const int line);
char *kvt_test_strdup(const char *s, const char *file, int line);
int kvt_test_posix_memalign(void **out, size_t align, size_t size, const char *file, int line);
void kvt_test_free(void *ptr, const char *file, int line);

#define malloc(size) _test_malloc(size, __FILE__, __LINE__)
#define calloc(n, size) _test_calloc(n, size, __FILE__, __LINE__)
#define realloc(ptr, size) _test_realloc(ptr, size, __FILE__, __LINE__)
#define free(ptr) kvt_test_free(ptr, __FILE__, __LINE__)
#define strdup(s) kvt_test_strdup(s, __FILE__, __LINE__)
#define posix_memalign(out, align, size) kvt_test_posix_memalign((void **)(out), align, size, __FILE__, __LINE__)

#endif
