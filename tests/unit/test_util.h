/* test_util.h — helpers shared by the cmocka unit tests. */
#ifndef KVT_TEST_UTIL_H
#define KVT_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "kvtier/kvtier.h"

/* A key whose bytes are derived from n, distinct for distinct n. */
struct kvt_key test_key(uint64_t n);
/* Fills buf with bytes derived from (seed, offset): a wrong block is caught. */
void test_fill(uint8_t *buf, size_t len, uint64_t seed);
/* Whether buf holds exactly what test_fill(seed) wrote. */
int test_check(const uint8_t *buf, size_t len, uint64_t seed);

#endif
