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

#include "codec.h"

struct kvt_client;

/* REGISTER of any kind (codec.h's frame), passing fd (or -1) with it. */
int kvt__buffer_register_frame(struct kvt_client *c, const struct frame_register *reg, int fd,
			       uint32_t *index);

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
