/*
 * fdpass.h — one sendmsg() of a byte run with, optionally, one file
 * descriptor riding along (SCM_RIGHTS). Shared by libkvtier (REGISTER of a
 * staging buffer) and the data-plane tests that build frames by hand; the
 * daemon's receiving side lives in its connection code (conn.c).
 * Thread-safe: no state.
 */
#ifndef KVT_FDPASS_H
#define KVT_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Sends up to len bytes of buf on the stream socket sock in one sendmsg()
 * (MSG_NOSIGNAL: a dead peer is -EPIPE, never SIGPIPE), with pass_fd
 * attached when it is >= 0. Retries on EINTR. Returns the bytes sent (the
 * descriptor, if any, went with them), or -errno (-EPIPE, -EAGAIN on a
 * non-blocking socket that is full, -EBADF for a bad pass_fd, ...).
 */
ssize_t fdpass_send(int sock, const void *buf, size_t len, int pass_fd);

#endif
