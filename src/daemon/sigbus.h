/*
 * sigbus.h — touching memory a client may shrink under us: a staging file
 * truncated by its owner while the daemon copies into it raises SIGBUS, which would kill the daemon. Guarded, the access fails
 * with -EFAULT instead and the daemon carries on (the request fails). Written by hand because no library here offers it:
 * the only way to survive a page that vanished is to jump out of the
 * signal handler. A SIGBUS outside a guarded access kills the process as
 * without the handler.
 *
 * Owner: any thread; the guard is the calling thread's own.
 */
#ifndef KVTD_SIGBUS_H
#define KVTD_SIGBUS_H

#include <stddef.h>

/* Installs the SIGBUS handler (once; later calls are no-ops). */
void sigbus_guard_install(void);

/* memcpy(dst, src, len): 0, or -EFAULT when a page of either vanished. */
int sigbus_guarded_copy(void *dst, const void *src, size_t len);

#endif
