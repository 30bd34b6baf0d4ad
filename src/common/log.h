/*
 * log.h — the daemon's log: one line per event on stderr, with an ISO-8601
 * UTC timestamp and the level. The level can change at run time (SIGHUP).
 */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include <stddef.h>

enum kvt_log_level {
	KVT_LOG_ERROR,
	KVT_LOG_WARN,
	KVT_LOG_INFO,
	KVT_LOG_DEBUG,
};

/* Parses "error", "warn", "info" or "debug"; -EINVAL otherwise. */
int kvt_log_level_parse(const char *name, enum kvt_log_level *level);

void kvt_log_set_level(enum kvt_log_level level);
enum kvt_log_level kvt_log_get_level(void);

void kvt_log(enum kvt_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * The daemon's one way to say why a call failed: writes the message into
 * why (whylen bytes) and returns err, so a caller writes
 * `return kvt_fail(why, whylen, -EINVAL, "...", ...)`.
 */
int kvt_fail(char *why, size_t whylen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define log_error(...) kvt_log(KVT_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  kvt_log(KVT_LOG_WARN, __VA_ARGS__)
#define log_info(...)  kvt_log(KVT_LOG_INFO, __VA_ARGS__)
#define log_debug(...) kvt_log(KVT_LOG_DEBUG, __VA_ARGS__)

#endif
