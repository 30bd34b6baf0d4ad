/* sessions.c — see sessions.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

#include "dp.h"
#include "log.h"
#include "owner_stats.h"
#include "sessions.h"

/* --- sessions --- */

/* A random 64-bit value that is never 0 (0 asks HELLO for a new session). */
static bool random_nonzero(uint64_t *v)
{
	if (getrandom(v, sizeof(*v), 0) != sizeof(*v))
		return false;
	*v |= 1;
	return true;
}

struct dp_session *session_new(struct dp *dp, const struct peer *peer)
{
	struct dp_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->leases = calloc(dp->max_leases_per_client, sizeof(*s->leases));
	s->lease_bytes = calloc(dp->max_leases_per_client, sizeof(*s->lease_bytes));
	if (!s->leases || !s->lease_bytes || !random_nonzero(&s->id) ||
	    !random_nonzero(&s->secret)) {
		free(s->leases);
		free(s->lease_bytes);
		free(s);
		return NULL;
	}
	s->uid = peer->uid;
	s->pid = peer->pid;
	LIST_INSERT_HEAD(&dp->sessions, s, link);
	STAT_ADD(dp, clients_active, 1);
	return s;
}

struct dp_session *session_by_secret(struct dp *dp, uint64_t secret)
{
	struct dp_session *s;
	LIST_FOREACH(s, &dp->sessions, link)
		if (s->secret == secret)
			return s;
	return NULL;
}

int session_join(struct dp *dp, uint64_t secret, const struct peer *peer,
		 struct dp_session **out)
{
	struct dp_session *s = session_by_secret(dp, secret);
	if (!s || s->uid != peer->uid || (s->pid && peer->pid && s->pid != peer->pid)) {
		STAT_ADD(dp, rejected.bad_hello, 1);
		return -EPERM;
	}
	*out = s;
	return 0;
}

/* The last lane of a client is gone: its buffers and leases go at once. */
static void session_end(struct dp *dp, struct dp_session *s)
{
	unsigned nbuf = buffers_drop_session(&dp->buffers, s->id);
	unsigned nleases = 0;
	for (uint32_t i = 0; i < s->nleases; i++)
		nleases += l1_lease_release(dp->l1, s->leases[i]) == 0;
	log_debug("client %016llx (pid %d) gone: %u buffers, %u leases released",
		  (unsigned long long)s->id, (int)s->pid, nbuf, nleases);
	LIST_REMOVE(s, link);
	free(s->leases);
	free(s->lease_bytes);
	free(s);
	STAT_SUB(dp, clients_active, 1);
}

void session_leave(struct dp *dp, struct dp_session *s)
{
	if (--s->nconns == 0)
		session_end(dp, s);
}

/* --- leases --- */

static void forget_lease_at(struct dp_session *s, uint32_t i)
{
	s->leased_bytes -= s->lease_bytes[i];
	s->nleases--;
	s->leases[i] = s->leases[s->nleases];
	s->lease_bytes[i] = s->lease_bytes[s->nleases];
}

/* Forgets leases that expired, so the per-client list holds live ones only. */
static void session_prune_leases(struct dp *dp, struct dp_session *s)
{
	for (uint32_t i = s->nleases; i-- > 0;)
		if (!l1_lease_active(dp->l1, s->leases[i]))
			forget_lease_at(s, i);
}

/* What the leases of uid's sessions pin; expired ones pruned first when prune. */
static uint64_t leased_by_uid(struct dp *dp, uid_t uid, bool prune)
{
	uint64_t bytes = 0;
	struct dp_session *s;
	LIST_FOREACH(s, &dp->sessions, link) {
		if (s->uid != uid)
			continue;
		if (prune)
			session_prune_leases(dp, s);
		bytes += s->leased_bytes;
	}
	return bytes;
}

/*
 * Whether uid's leases may pin need more bytes within dp->peer.leased_bytes:
 * counted as they are, then (only when that says no) with expired leases
 * pruned first.
 */
static bool uid_lease_room(struct dp *dp, uid_t uid, uint64_t need)
{
	uint64_t cap = dp->peer.leased_bytes;
	for (int prune = 0; prune < 2; prune++) {
		uint64_t used = leased_by_uid(dp, uid, prune);
		if (need <= (used < cap ? cap - used : 0))
			return true;
	}
	return false;
}

bool session_lease_room(struct dp *dp, struct dp_session *s)
{
	if (s->nleases == dp->max_leases_per_client)
		session_prune_leases(dp, s);
	if (s->nleases == dp->max_leases_per_client) {
		STAT_ADD(dp, rejected.lease_limit, 1);
		return false;
	}
	if (!uid_lease_room(dp, s->uid, 1)) {
		STAT_ADD(dp, rejected.peer_limit, 1);
		return false;
	}
	return true;
}

bool session_keep_lease(struct dp *dp, struct dp_session *s, uint64_t lease)
{
	uint64_t bytes = l1_lease_bytes(dp->l1, lease);
	if (!uid_lease_room(dp, s->uid, bytes)) {
		l1_lease_release(dp->l1, lease);
		STAT_ADD(dp, rejected.peer_limit, 1);
		return false;
	}
	s->leases[s->nleases] = lease;
	s->lease_bytes[s->nleases++] = bytes;
	s->leased_bytes += bytes;
	return true;
}

bool session_forget_lease(struct dp_session *s, uint64_t lease)
{
	for (uint32_t i = 0; i < s->nleases; i++) {
		if (s->leases[i] == lease) {
			forget_lease_at(s, i);
			return true;
		}
	}
	return false;
}

/* --- namespaces --- */

static bool ns_idle(const struct kvt_ns *ns)
{
	return ns->dp_conns == 0 && ns->l1_items == 0;
}

static void ns_reclaim(struct dp *dp, struct kvt_ns *ns)
{
	log_debug("namespace %u (%s) reclaimed: no client, nothing in L1", ns->id, ns->model);
	ns_remove(dp->namespaces, ns);
	STAT_ADD(dp, namespaces_reclaimed, 1);
}

void ns_reclaim_if_idle(struct dp *dp, struct kvt_ns *ns)
{
	if (ns_idle(ns))
		ns_reclaim(dp, ns);
}

uint32_t dp_reclaim_namespaces(struct dp *dp)
{
	uint32_t n = 0;
	for (uint32_t i = dp->namespaces->count; i-- > 0;) { /* removal moves the last into i */
		struct kvt_ns *ns = dp->namespaces->ns[i];
		if (ns_idle(ns)) {
			ns_reclaim(dp, ns);
			n++;
		}
	}
	return n;
}

void ns_bind(struct kvt_ns *ns)
{
	ns->dp_conns++;
}

void ns_unbind(struct dp *dp, struct kvt_ns *ns)
{
	ns->dp_conns--;
	ns_reclaim_if_idle(dp, ns);
}

/* ns_get, and once more after a sweep of idle namespaces when the table is full. */
static int get_namespace(struct dp *dp, const struct frame_hello *hello, struct kvt_ns **ns)
{
	int err = ns_get(dp->namespaces, hello->model, hello->salt, hello->block_bytes,
			 hello->tp_size, ns);
	if (err == -ENOSPC && dp_reclaim_namespaces(dp))
		err = ns_get(dp->namespaces, hello->model, hello->salt, hello->block_bytes,
			     hello->tp_size, ns);
	if (err == -KVT_ENSCONFLICT)
		STAT_ADD(dp, rejected.ns_conflict, 1);
	else if (err == -ENOSPC)
		STAT_ADD(dp, rejected.namespaces_full, 1);
	else if (err < 0)
		STAT_ADD(dp, rejected.bad_hello, 1);
	return err;
}

/* The namespaces uid's clients created that are still there. */
static uint32_t namespaces_of(const struct dp *dp, uid_t uid)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < dp->namespaces->count; i++)
		n += dp->namespaces->ns[i]->creator_uid == uid;
	return n;
}

int session_hello_namespace(struct dp *dp, const struct dp_session *s, const struct peer *peer,
			    const struct frame_hello *hello, struct kvt_ns **out, bool *created)
{
	*created = false;
	struct kvt_ns *ns = ns_find(dp->namespaces, hello->model, hello->salt);
	if (!ns && s && s->namespaces_created >= dp->max_namespaces_per_client) {
		STAT_ADD(dp, rejected.namespace_limit, 1);
		return -KVT_ENSLIMIT;
	}
	if (!ns && namespaces_of(dp, peer->uid) >= dp->peer.namespaces &&
	    (!dp_reclaim_namespaces(dp) || namespaces_of(dp, peer->uid) >= dp->peer.namespaces)) {
		STAT_ADD(dp, rejected.peer_limit, 1);
		return -KVT_ENSLIMIT;
	}
	int err = get_namespace(dp, hello, &ns);
	if (err < 0)
		return err;
	if (err == 1) {
		*created = true;
		ns->creator_uid = peer->uid;
		ns->l1_quota = dp->namespace_l1_quota;
		ns->l2_quota = dp->namespace_l2_quota;
	}
	if (!ns->l1_class && (err = l1_ns_open(dp->l1, ns)) < 0) {
		STAT_ADD(dp, rejected.bad_hello, 1);
		if (*created)
			ns_remove(dp->namespaces, ns);
		return err;
	}
	if (ns->l1_quota && ns->l1_quota < ns->l1_class->slot_size)
		ns->l1_quota = ns->l1_class->slot_size; /* a default quota below one block: one block */
	*out = ns;
	return 0;
}
