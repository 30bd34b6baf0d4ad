/*
 * clock.h — the monotonic clock every kvtier thread counts time in
 * (timeouts, leases, waits, durations). Any thread.
 */
#ifndef KVT_CLOCK_H
#define KVT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t kvt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t kvt_now_ms(void)
{
	return kvt_now_ns() / 1000000u;
}

#endif
