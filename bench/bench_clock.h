/* bench_clock.h — the benchmarks' clock: monotonic seconds as a double. */
#ifndef KVT_BENCH_CLOCK_H
#define KVT_BENCH_CLOCK_H

#include <time.h>

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
