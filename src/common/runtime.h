/*
 * runtime.h — kvtierd's default runtime directory: /run/kvtier as root, else
 * $XDG_RUNTIME_DIR/kvtier, else /tmp/kvtier-UID (the socket is kvtierd.sock
 * in it: kvt_default_socket, kvtier.h). Any thread.
 */
#ifndef KVT_RUNTIME_H
#define KVT_RUNTIME_H

#include <stddef.h>

/* Writes the directory into buf: 0, or -ENAMETOOLONG when it does not fit. */
int kvt_default_runtime_dir(char *buf, size_t len);

#endif
