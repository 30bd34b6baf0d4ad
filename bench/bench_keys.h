/* bench_keys.h — distinct, well-spread keys for the engine benchmarks. */
#ifndef KVT_BENCH_KEYS_H
#define KVT_BENCH_KEYS_H

#include <stdint.h>
#include <string.h>

#include "kvtier/kvtier.h"

static inline struct kvt_key key_of(uint64_t n)
{
	struct kvt_key k;
	uint64_t a = n * UINT64_C(0x9e3779b97f4a7c15), b = ~n * UINT64_C(0xbf58476d1ce4e5b9);
	memcpy(k.bytes, &a, 8);
	memcpy(k.bytes + 8, &b, 8);
	return k;
}

#endif
