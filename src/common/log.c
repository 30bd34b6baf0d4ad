/* log.c — see log.h. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static _Atomic int current_level = KVT_LOG_INFO;

int kvt_log_level_parse(const char *name, enum kvt_log_level *level)
{
	for (int i = 0; i <= KVT_LOG_DEBUG; i++) {
		if (strcmp(name, level_names[i]) == 0) {
			*level = (enum kvt_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void kvt_log_set_level(enum kvt_log_level level)
{
	atomic_store_explicit(&current_level, (int)level, memory_order_relaxed);
}

enum kvt_log_level kvt_log_get_level(void)
{
	return (enum kvt_log_level)atomic_load_explicit(&current_level,
							memory_order_relaxed);
}

void kvt_log(enum kvt_log_level level, const char *fmt, ...)
{
	if ((int)level > atomic_load_explicit(&current_level, memory_order_relaxed))
		return;
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);

	/* Format the whole line first so concurrent threads never interleave. */
	char line[1024];
	int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ldZ %-5s ",
		      ts.tv_nsec / 1000000, level_names[level]);
	va_list ap;
	va_start(ap, fmt);
	int body = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (body < 0)
		body = 0;
	n += body;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, (size_t)n, stderr);
}

int kvt_fail(char *why, size_t whylen, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return err;
}
