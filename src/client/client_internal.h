/*
 * client_internal.h — what libkvtier's modules share and do not export:
 * the REGISTER call of every buffer kind (client.c), used by the GPU
 * staging buffers (gpubuf.c).
 */
#ifndef KVT_CLIENT_INTERNAL_H
#define KVT_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

struct kvt_client;

/* REGISTER of kind with extra_len bytes after the common 16 and fd (or -1). */
int kvt__buffer_register_kind(struct kvt_client *c, uint32_t kind, uint64_t size,
			      const void *extra, size_t extra_len, int fd, uint32_t *index);

#endif
