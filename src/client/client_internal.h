/*
 * client_internal.h — what libkvtier's modules share and do not export:
 * the REGISTER call of every buffer kind (client.c), used by the GPU
 * staging buffers (gpubuf.c); lane sockets and host-side KV copies for the
 * pipeline (pipeline.c).
 */
#ifndef KVT_CLIENT_INTERNAL_H
#define KVT_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

struct kvt_client;

/* REGISTER of kind with extra_len bytes after the common 16 and fd (or -1). */
int kvt__buffer_register_kind(struct kvt_client *c, uint32_t kind, uint64_t size,
			      const void *extra, size_t extra_len, int fd, uint32_t *index);

/* The socket of a lane, for poll(): readable when replies (or a hang-up) wait. */
int kvt__lane_fd(struct kvt_client *c, unsigned lane);

struct kvt_kv_layout;
/*
 * kvt_kv_restore (to_cache 1) and kvt_kv_gather (0) on host memory: the
 * layout's layer bases are host pointers. A negative id skips its block.
 */
void kvt__kv_copy_host(const struct kvt_kv_layout *l, uint8_t *staging, const int32_t *ids,
		       uint32_t nblocks, int to_cache);

#endif
