/*
 * l2svc.h — the L2 tier inside kvtierd: everything about it in one glue
 * file, as memcached's storage.c is. It opens the engine (l2.h) from the
 * settings, rebuilds its index on a thread of its own while the daemon
 * already serves (readiness waits for it), and registers L2 with the tier
 * stack (tiers.h) as its victim tier: L1's victims and write-behind reach
 * it through writer.h, LOOKUPs and LOADs of L1 misses through its ops. It
 * feeds its ring's completions from the event loop and probes a failed L2
 * with back-off. The engine itself knows nothing of this.
 *
 * Owner: the event loop thread; the tier's summary and stats from any thread.
 */
#ifndef KVTD_L2SVC_H
#define KVTD_L2SVC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "handoff.h"
#include "l1.h"
#include "l2.h"
#include "loop.h"
#include "settings.h"
#include "tier.h"
#include "tiers.h"
#include "writer.h"

struct l2svc {
	struct tier tier;             /* what the stack sees */
	struct l2 l2;
	struct writer writer;         /* L1's way down to it */
	bool open;
	bool started;                 /* the index is rebuilt and L2 serves */
	struct loop *loop;
	struct l1 *l1;
	struct tiers *stack;
	void (*on_ready)(void *ctx);  /* called once the index is rebuilt (or failed) */
	void *ready_ctx;
	struct loop_source ring_src;  /* the ring's completions */
	struct loop_timer probe_timer; /* once a second: while failed, probes with back-off */
	uint32_t probe_backoff_s;     /* the wait before the next probe, doubling to a cap */
	uint64_t next_probe_ms;
	_Atomic uint64_t next_probe_in_ms;  /* for the control plane: 0 when not failed */
	struct handoff recovered;     /* the rebuild thread posts recovered_item when done */
	struct handoff_item recovered_item;
	struct loop_source done_src;  /* recovered's eventfd */
	pthread_t thread;
	bool thread_running;
	int recover_err;
	double recover_ms;
};

/*
 * Opens L2 as cfg says, registers it with stack (below the tiers there
 * are) and starts rebuilding its index; once that is done L2 serves, the
 * mode becomes evict, and on_ready(ctx) runs on the loop thread. 0 or
 * -errno (logged, with the reason). The stack closes it (its close op);
 * before a stop its flush op runs the loop until the writer has put every
 * dirty L1 item into L2 and the writes are on disk, or the limit passed.
 *
 * Its state (the summary op): "recovering" (rebuilding its index), "ready",
 * "failed" (writes stopped after repeated I/O errors, reads served and
 * verified, a probe retries writing with back-off) or "unavailable" (the
 * index could not be rebuilt; restart to retry).
 */
int l2svc_open(struct l2svc *s, const struct kvtd_config *cfg, struct l1 *l1,
	       struct tiers *stack, struct loop *loop, void (*on_ready)(void *ctx), void *ctx);

/* Probe back-off: the first wait, and the most it doubles to. */
#define L2SVC_PROBE_FIRST_S 1
#define L2SVC_PROBE_MAX_S 60
/* While L2 I/O is in flight, the loop looks at the ring at least this often. */
#define L2SVC_POLL_MS 10

#endif
