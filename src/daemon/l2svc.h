/*
 * l2svc.h — runs the L2 engine inside kvtierd: opens it from the settings,
 * rebuilds its index on a thread of its own while the daemon already serves
 * (readiness waits for it), then binds it to L1 (victims and write-behind
 * through writer.h, lookups) and to the
 * data plane (LOADs of L1 misses) and feeds its ring's completions from the
 * event loop. The engine itself (l2.h) knows nothing of this.
 */
#ifndef KVTD_L2SVC_H
#define KVTD_L2SVC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dataplane.h"
#include "l1.h"
#include "l2.h"
#include "loop.h"
#include "settings.h"
#include "writer.h"

struct l2svc {
	struct l2 l2;
	struct writer writer;         /* L1's way down to it */
	bool open;
	bool started;                 /* the index is rebuilt and L2 serves */
	struct loop *loop;
	struct loop_hook submit_hook; /* submits what a round of the loop queued */
	struct l1 *l1;
	struct dp *dp;
	void (*on_ready)(void *ctx);  /* called once the index is rebuilt (or failed) */
	void *ready_ctx;
	struct loop_source ring_src;  /* the ring's completions */
	struct loop_timer probe_timer; /* once a second: while failed, probes with back-off */
	uint32_t probe_backoff_s;     /* the wait before the next probe, doubling to a cap */
	uint64_t next_probe_ms;
	_Atomic uint64_t next_probe_in_ms;  /* for the control plane: 0 when not failed */
	struct loop_source done_src;  /* the recovery thread has finished */
	pthread_t thread;
	bool thread_running;
	int recover_err;
	double recover_ms;
};

/*
 * Opens L2 as cfg says and starts rebuilding its index; on_ready(ctx) runs on
 * the loop thread when that is done. 0 or -errno (logged, with the reason).
 */
int l2svc_open(struct l2svc *s, const struct kvtd_config *cfg, struct l1 *l1, struct dp *dp,
	       struct loop *loop, void (*on_ready)(void *ctx), void *ctx);
/*
 * Before a stop (the data plane closed): runs the loop until the writer has
 * put every dirty L1 item into L2 and the writes are on disk, or limit_ms
 * passed; progress and the outcome in the log. Evict mode only.
 */
void l2svc_flush(struct l2svc *s, uint32_t limit_ms);
void l2svc_close(struct l2svc *s);

/* Sets the mode live: evict (victims to L2, misses read from it) or l1-only. */
void l2svc_set_evict(struct l2svc *s, bool evict);

/*
 * L2's state for the control plane (any thread): "recovering" (rebuilding
 * its index), "ready", "failed" (writes stopped after repeated I/O errors,
 * reads served and verified, a probe retries writing with back-off) or
 * "unavailable" (the index could not be rebuilt; restart to retry).
 */
const char *l2svc_state(const struct l2svc *s);

/* Probe back-off: the first wait, and the most it doubles to. */
#define L2SVC_PROBE_FIRST_S 1
#define L2SVC_PROBE_MAX_S 60
/* While L2 I/O is in flight, the loop looks at the ring at least this often. */
#define L2SVC_POLL_MS 10

#endif
