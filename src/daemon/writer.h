/*
 * writer.h — the way from L1 down to L2, as L1's lower tier in evict mode:
 * the hooks L1 calls for victims, lookups, room and durability. An item
 * the write-behind hands down is written from its own L1 slots (no copy):
 * its records are reserved in L2 at once, its checksums are computed on
 * the offload thread, then its writes are queued, and L1 gets the slots
 * back (l1_write_released) when they are done. A victim evicted while
 * still dirty is copied into L2's write buffer on the loop, as before
 * write-behind (it is counted: evictions_dirty).
 *
 * Owner: the event loop thread, for every call and callback; the checksums
 * run on the offload's thread over slots that stay pinned meanwhile.
 */
#ifndef KVTD_WRITER_H
#define KVTD_WRITER_H

#include <stdbool.h>

#include "l1.h"
#include "l2.h"
#include "loop.h"
#include "offload.h"

struct writer {
	struct l1 *l1;
	struct l2 *l2;
	struct loop *loop;
	struct offload offload;
	struct loop_source done_src;  /* the offload's eventfd */
	bool open;
};

/* Starts the checksum thread and watches it from loop. 0 or -errno. */
int writer_open(struct writer *w, struct l1 *l1, struct l2 *l2, struct loop *loop);
/*
 * Checksums what is queued and queues its writes (L2 then finishes them),
 * stops the thread. Call before l2_close.
 */
void writer_close(struct writer *w);

/* L1's lower tier in evict mode. */
struct l1_lower_tier writer_lower_tier(struct writer *w);

#endif
