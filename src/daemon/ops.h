/*
 * ops.h — the op handlers of include/kvtier/protocol.h: one per op, in one
 * table with what each needs before it runs (HELLO done, the worker role),
 * checked in docs/protocol.md's order; each request is timed and counted.
 * STORE and LOAD hand their blocks to the tiering glue (tiering.h) and are
 * answered when their copies are done.
 *
 * Owner: the event loop thread.
 */
#ifndef KVTD_OPS_H
#define KVTD_OPS_H

#include "conn.h"
#include "copy.h"
#include "wire.h"

struct dp;

/*
 * Runs one whole frame of c (h decoded, payload h->length bytes): a reply
 * now, an error reply, or, for STORE and LOAD, a reply once the copies are
 * done. Never fails: what goes wrong is in the reply and the counters.
 */
void ops_dispatch(struct dp_conn *c, const struct wire_hdr *h, const uint8_t *payload);

/* Answers the STOREs and LOADs of a list of finished batches (copy_engine_reap). */
void ops_transfers_done(struct dp *dp, struct copy_batch *done);

#endif
