/*
 * sessions.h — the data plane's clients: a session per client process (its
 * lanes share it), the leases its LOOKUPs took, and the namespaces its
 * HELLOs bound and created (with their reclaim once idle).
 *
 * Owner: the event loop thread.
 */
#ifndef KVTD_SESSIONS_H
#define KVTD_SESSIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "codec.h"
#include "ns.h"

struct dp;

struct dp_session {
	uint64_t id;               /* random, never 0: names it in listings and buffers */
	/*
	 * What a lane shows to join it: random, never 0, told only to the lane
	 * that made the session (HELLO's reply), never listed. The id cannot
	 * stand in for it: GET /v1/buffers shows ids to anyone.
	 */
	uint64_t secret;
	uid_t uid;                 /* of its first lane (SO_PEERCRED): a joiner's must match */
	pid_t pid;                 /* of its first lane; 0 when unknown */
	uint32_t nconns;
	uint32_t namespaces_created;
	uint32_t nleases;
	uint64_t *leases;          /* max_leases_per_client slots */
	uint64_t *lease_bytes;     /* what each of leases pins (l1_lease_bytes when taken) */
	uint64_t leased_bytes;     /* their sum: expired ones count until pruned */
	LIST_ENTRY(dp_session) link; /* dp->sessions */
};

/* Who a lane's peer is (SO_PEERCRED): pid 0 when it lives in a PID namespace kvtierd cannot see. */
struct peer {
	uid_t uid;
	pid_t pid;
};

/* A new session of peer with no lane yet; NULL when out of memory. */
struct dp_session *session_new(struct dp *dp, const struct peer *peer);
/*
 * The session a lane of peer joins with secret: -EPERM (counted as
 * bad_hello) when none has it, or its first lane's uid (or pid, where both
 * are known) differs.
 */
int session_join(struct dp *dp, uint64_t secret, const struct peer *peer,
		 struct dp_session **out);
/* The session whose secret this is (the control plane names one so); NULL when none. */
struct dp_session *session_by_secret(struct dp *dp, uint64_t secret);
/* A lane of s closed: the last one ends s, releasing its buffers and leases. */
void session_leave(struct dp *dp, struct dp_session *s);

/*
 * Room for one more lease in s: expired ones are forgotten first. False
 * when s holds max_leases_per_client (counted as rejected lease_limit), or
 * the leases of its uid's sessions pin dp->peer.leased_bytes or more
 * (counted as peer_limit).
 */
bool session_lease_room(struct dp *dp, struct dp_session *s);
/*
 * Adds a lease s took, or releases it at once when it would take the pins of
 * s's uid past dp->peer.leased_bytes (counted as peer_limit): true when kept.
 */
bool session_keep_lease(struct dp *dp, struct dp_session *s, uint64_t lease);
/* Forgets lease if s holds it: a lease is released only by its taker. */
bool session_forget_lease(struct dp_session *s, uint64_t lease);

/*
 * The namespace a HELLO of peer names, created when new within the
 * session's allowance (s NULL: a new session, nothing created yet) and its
 * uid's (dp->peer.namespaces created and not reclaimed: a new session per
 * connection gets round the first); a full table, or a uid at its limit, is
 * swept of idle namespaces once before it is refused. 0, -KVT_ENSLIMIT,
 * -KVT_ENSCONFLICT, -ENOSPC, or another error of ns_get or l1_ns_open; each
 * counted.
 */
int session_hello_namespace(struct dp *dp, const struct dp_session *s, const struct peer *peer,
			    const struct frame_hello *hello, struct kvt_ns **out, bool *created);
/* A lane binds to ns, or leaves it: an idle namespace (no lane, nothing in L1) is reclaimed. */
void ns_bind(struct kvt_ns *ns);
void ns_unbind(struct dp *dp, struct kvt_ns *ns);
/* Reclaims ns now if it is idle (a HELLO that bound nothing after all). */
void ns_reclaim_if_idle(struct dp *dp, struct kvt_ns *ns);

/*
 * Removes every namespace no connection is bound to that holds nothing in
 * L1 (what L2 holds is found again by the namespace's digest when a client
 * names it next). Returns how many went.
 */
uint32_t dp_reclaim_namespaces(struct dp *dp);

#endif
