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

/*
 * ms from now on the monotonic clock, as an absolute time for
 * pthread_cond_timedwait on a condition made with CLOCK_MONOTONIC.
 */
static inline void kvt_deadline_ms(struct timespec *until, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, until);
	uint64_t ns = (uint64_t)until->tv_nsec + ms % 1000u * 1000000u;
	until->tv_sec += (time_t)(ms / 1000u + ns / 1000000000u);
	until->tv_nsec = (long)(ns % 1000000000u);
}

#endif
