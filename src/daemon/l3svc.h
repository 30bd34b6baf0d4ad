/*
 * l3svc.h — the L3 tier inside kvtierd, everything about it in one glue
 * file: opens the engine (l3.h) and the keeper (l3scan.h) from the
 * settings and registers L3 with the tier stack (tiers.h) as a
 * write-through tier. It publishes stored parts in the background (never
 * on the STORE path: the stored op only queues the part, and the submit op,
 * after each round of the loop, publishes from the pinned L1 slot,
 * l3-queue-depth at a time, or, for a part gone from L1 before its turn,
 * from a tier above it read back into a bounce buffer); answers lookups
 * from what it knows is in L3 (the keeper's last walk, plus what this node
 * published or read since); probes a degraded L3 once a second.
 *
 * Owner: the event loop thread; the tier's summary and stats from any thread.
 */
#ifndef KVTD_L3SVC_H
#define KVTD_L3SVC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "handoff.h"
#include "index.h"
#include "l1.h"
#include "l2.h"
#include "l3.h"
#include "l3mac.h"
#include "l3scan.h"
#include "loop.h"
#include "ns.h"
#include "settings.h"
#include "tier.h"
#include "tiers.h"

#define L3SVC_STATS(X) \
	X(publish_skipped, COUNTER, "kvtier_l3_publishes_total", "result=\"skipped\"", \
	  "Stored parts not offered to L3: gone from L1 (and L2) before their turn, the queue full, or L3 degraded.") \
	X(published_from_l2, COUNTER, "kvtier_l3_publishes_from_l2_total", "", \
	  "Parts offered to L3 from L2 (gone from L1 before their turn, read back from L2).") \
	X(publish_queued, GAUGE, "kvtier_l3_publish_queue", "", "Stored parts waiting to be published.") \
	X(known_parts, GAUGE, "kvtier_l3_known_parts", "", \
	  "Parts lookups know to be in L3 (the last walk, and this node's publishes and reads since).")

struct l3svc_stats {
	L3SVC_STATS(STAT_LIVE_FIELD)
};

struct l3_known;                  /* l3svc.c: a set of parts */
struct l3svc_pub;

struct l3svc_pending {            /* a stored part waiting to be published */
	uint32_t ns_id;
	uint16_t rank;
	struct kvt_key key;
};

struct l3svc {
	struct tier tier;              /* what the stack sees */
	struct l3 l3;
	struct l3mac_key key;          /* with l3-key-file: signs and checks parts (l3mac.h) */
	struct l3scan scan;
	bool open;
	struct loop *loop;
	struct loop_source ring_src;
	struct handoff seen;           /* the keeper hands over each walk's set of parts */
	struct loop_source seen_src;   /* seen's eventfd */
	struct offload offload;        /* the parts' checksums (l3.h) */
	struct loop_source hashed_src; /* the offload's eventfd */
	bool offload_open;
	struct loop_timer probe_timer;
	struct l1 *l1;
	struct tiers *stack;           /* parts gone from L1 are read back from the tiers above */
	struct ns_registry *namespaces;
	struct l3svc_pending *pending; /* a ring of pending_cap */
	uint32_t pending_head, pending_count, pending_cap;
	struct l3svc_pub *pubs;        /* l3-queue-depth publish slots */
	uint32_t npubs;
	struct l3_known *known;        /* the last walk's parts (built on the keeper's thread) */
	struct l3_known *recent;       /* parts published or read since */
	uint64_t published_since_walk; /* bytes; past the cap's room: the keeper walks at once */
	struct l3svc_stats stats;
};

/*
 * Opens L3 as cfg says (l3-path set) and registers it with stack, below the
 * tiers there are. 0, or -errno with the reason logged. The stack closes
 * it (its close op: what is in flight finishes, the keeper stops).
 */
int l3svc_open(struct l3svc *s, const struct kvtd_config *cfg, struct l1 *l1,
	       struct tiers *stack, struct ns_registry *namespaces, struct loop *loop);

#endif
