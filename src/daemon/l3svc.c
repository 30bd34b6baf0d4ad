/* l3svc.c — see l3svc.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h" /* arena_slot_size */
#include "clock.h"
#include "kvtier/kvtier.h"
#include "l3svc.h"
#include "log.h"

static const struct tier l3_tier;
static void close_tier(struct tier *t);

static struct l3svc *of(const struct tier *t)
{
	return (struct l3svc *)((char *)t - offsetof(struct l3svc, tier));
}

#define COUNT(s, field, n) atomic_fetch_add_explicit(&(s)->stats.field, (n), memory_order_relaxed)
#define SET(s, field, v) atomic_store_explicit(&(s)->stats.field, (v), memory_order_relaxed)
#define PENDING_MAX 65536u   /* stored parts waiting; past it they are skipped */

/* --- sets of known parts: (namespace digest, key) -> ranks seen (ranks < 64) --- */

struct known_entry {
	struct index_entry e;
	uint64_t ranks;
	uint64_t added_ms;           /* recent set: when; dropped once a walk started after it */
	LIST_ENTRY(known_entry) all_link;  /* k->all */
};

struct l3_known {
	struct handoff_item seen;    /* a walk's set, on its way to the loop */
	struct index ix;
	LIST_HEAD(, known_entry) all;  /* every entry, for freeing (recent set) */
	struct known_entry *block;   /* one allocation for a walk's set */
	uint64_t walk_start_ms;      /* a walk's set: when its walk started */
};

static struct l3_known *known_new(void)
{
	struct l3_known *k = calloc(1, sizeof(*k));
	if (k && index_init(&k->ix, 1024)) {
		free(k);
		return NULL;
	}
	return k;
}

static void known_free(struct l3_known *k)
{
	if (!k)
		return;
	for (struct known_entry *e = LIST_FIRST(&k->all), *next; e; e = next) {
		next = LIST_NEXT(e, all_link);
		free(e);
	}
	free(k->block);
	index_destroy(&k->ix);
	free(k);
}

/* A rank's bit in an entry's ranks (none past 63: such parts are never known, a miss). */
static uint64_t rank_bit(uint16_t rank)
{
	return rank < 64 ? UINT64_C(1) << rank : 0;
}

static void known_insert(struct l3_known *k, struct known_entry *e, uint64_t hash,
			 uint64_t digest, const struct kvt_key *key)
{
	e->e.hash = hash;
	e->e.ns_tag = digest;
	e->e.key = *key;
	index_insert(&k->ix, &e->e);
}

static struct known_entry *known_find(const struct l3_known *k, uint64_t digest,
				      const struct kvt_key *key, uint64_t *hash)
{
	*hash = index_hash(&k->ix, digest, key);
	struct index_entry *e = index_find(&k->ix, digest, key, *hash);
	return e ? (struct known_entry *)e : NULL;
}

/* Adds rank to (digest, key) in the recent set k. */
static void known_add(struct l3_known *k, uint64_t digest, const struct kvt_key *key,
		      uint16_t rank)
{
	uint64_t hash;
	struct known_entry *e = known_find(k, digest, key, &hash);
	if (!e) {
		if (!(e = calloc(1, sizeof(*e))))
			return; /* lookups miss it: a recompute, never a fault */
		LIST_INSERT_HEAD(&k->all, e, all_link);
		known_insert(k, e, hash, digest, key);
	}
	e->ranks |= rank_bit(rank);
	e->added_ms = kvt_now_ms();
}

static uint64_t known_ranks(const struct l3_known *k, uint64_t digest, const struct kvt_key *key)
{
	uint64_t hash;
	const struct known_entry *e = k ? known_find(k, digest, key, &hash) : NULL;
	return e ? e->ranks : 0;
}

/* On the keeper's thread: a walk's parts as a set, handed to the loop. */
static void walk_seen(void *ctx, struct l3scan_part *parts, uint64_t n)
{
	struct l3svc *s = ctx;
	struct l3_known *k = known_new();
	struct known_entry *block = k ? calloc(n ? n : 1, sizeof(*block)) : NULL;
	if (!block) {
		known_free(k);
		free(parts);
		return;
	}
	k->block = block;
	/* The walk started at most its duration ago: recent entries after that stay. */
	k->walk_start_ms = kvt_now_ms() - atomic_load(&s->scan.stats.last_scan_ms);
	uint64_t used = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t hash;
		struct known_entry *e = known_find(k, parts[i].ns_digest, &parts[i].key, &hash);
		if (!e) {
			e = &block[used++];
			known_insert(k, e, hash, parts[i].ns_digest, &parts[i].key);
		}
		e->ranks |= rank_bit(parts[i].rank);
	}
	free(parts);
	handoff_post(&s->seen, &k->seen);
}

/* The newest of the walks handed over (the older ones are freed), or NULL. */
static struct l3_known *newest_walk(struct l3svc *s)
{
	struct l3_known *k = NULL;
	for (struct handoff_item *i = handoff_take(&s->seen), *next; i; i = next) {
		next = i->next;
		known_free(k);
		k = (struct l3_known *)((char *)i - offsetof(struct l3_known, seen));
	}
	return k;
}

/* Drops the recent entries the new walk has seen (added before it started). */
static void recent_trim(struct l3svc *s, uint64_t walk_start_ms)
{
	for (struct known_entry *e = LIST_FIRST(&s->recent->all), *next; e; e = next) {
		next = LIST_NEXT(e, all_link);
		if (e->added_ms < walk_start_ms) {
			LIST_REMOVE(e, all_link);
			index_remove(&s->recent->ix, &e->e);
			free(e);
		}
	}
}

static void on_seen(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct l3svc *s = (struct l3svc *)((char *)src - offsetof(struct l3svc, seen_src));
	struct l3_known *k = newest_walk(s);
	if (!k)
		return;
	known_free(s->known);
	s->known = k;
	recent_trim(s, k->walk_start_ms);
	s->published_since_walk = 0;
	SET(s, known_parts, k->ix.count + s->recent->ix.count);
}

static bool contains(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key)
{
	struct l3svc *s = of(t);
	uint64_t ranks = known_ranks(s->known, ns->digest, key) |
			 known_ranks(s->recent, ns->digest, key);
	uint64_t all = ns->tp_size >= 64 ? UINT64_MAX : (UINT64_C(1) << ns->tp_size) - 1;
	return (ranks & all) == all;
}

/* --- reading --- */

/* A read of the engine's, for a tier_read (freed when done). */
struct l3svc_read {
	struct l3_read rd;         /* first: the engine's callbacks get its address */
	struct tier_read *up;
	struct l3svc *s;
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank;
};

static uint8_t *read_target(struct l3_read *rd, uint32_t length)
{
	struct l3svc_read *r = (struct l3svc_read *)rd;
	return r->up->target(r->up, length);
}

static void read_abandoned(struct l3_read *rd)
{
	struct l3svc_read *r = (struct l3svc_read *)rd;
	r->up->abandoned(r->up);
}

/* A part read is known from now on. */
static void read_done(struct l3_read *rd, int status)
{
	struct l3svc_read *r = (struct l3svc_read *)rd;
	struct tier_read *up = r->up;
	uint32_t length = rd->op.length;
	if (!status)
		known_add(r->s->recent, r->ns_digest, &r->key, r->rank);
	free(r);
	up->done(up, status, length);
}

static int read_begin(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		      uint16_t rank, struct tier_read *up)
{
	struct l3svc *s = of(t);
	struct l3svc_read *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOENT;
	*r = (struct l3svc_read){.rd = {.target = read_target, .done = read_done},
				 .up = up, .s = s, .ns_digest = ns->digest, .key = *key,
				 .rank = rank};
	if (up->abandoned)
		r->rd.abandoned = read_abandoned;
	if (l3_read_begin(&s->l3, ns, key, rank, up->cap, &r->rd)) {
		free(r);
		return -ENOENT;
	}
	return 0;
}

static bool readable(struct tier *t)
{
	(void)t;
	return true; /* reads are tried, and verified, in any state */
}

/* --- publishing --- */

struct l3svc_pub {
	struct l3_publish p;
	struct l3svc *s;
	uint32_t ns_id;              /* found again after an L2 read: the namespace may be gone */
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank;
	bool busy;
	bool pinned;                 /* ref holds the L1 part being published */
	struct l1_ref ref;
	uint8_t *bounce;             /* or: the part read back from above (bounce_len bytes mapped) */
	size_t bounce_len;
	struct tier_read rd;
};

static void stored(struct tier *t, const struct kvt_ns *ns, const struct kvt_key *key,
		   uint16_t rank)
{
	struct l3svc *s = of(t);
	if (s->pending_count == s->pending_cap) {
		COUNT(s, publish_skipped, 1);
		return;
	}
	s->pending[(s->pending_head + s->pending_count++) % s->pending_cap] =
		(struct l3svc_pending){ns->id, rank, *key};
	SET(s, publish_queued, s->pending_count);
}

/* The slot is free again: what it held (an L1 pin, a bounce buffer) goes. */
static void pub_release(struct l3svc_pub *pub)
{
	if (pub->pinned)
		l1_load_end(pub->s->l1, &pub->ref);
	if (pub->bounce)
		munmap(pub->bounce, pub->bounce_len);
	pub->pinned = false;
	pub->bounce = NULL;
	pub->busy = false;
}

static void published(struct l3_publish *p, int status)
{
	struct l3svc_pub *pub = (struct l3svc_pub *)p;
	struct l3svc *s = pub->s;
	uint64_t bytes = pub->p.op.length;
	if (status == 0 || status == -EEXIST)
		known_add(s->recent, pub->ns_digest, &pub->key, pub->rank);
	pub_release(pub);
	s->published_since_walk += status == 0 ? bytes : 0;
	struct l3scan_stats_snapshot st;
	l3scan_stats_read(&s->scan, &st);
	if (st.capacity_bytes && st.used_bytes + s->published_since_walk > st.capacity_bytes) {
		l3scan_kick(&s->scan);
		s->published_since_walk = 0; /* one kick per overshoot */
	}
}

/* The part's bytes are at hand (pinned in L1, or read back from L2): publish them. */
static void publish_bytes(struct l3svc_pub *pub, const struct kvt_ns *ns, const uint8_t *data,
			  uint32_t length)
{
	pub->p.done = published;
	if (l3_publish_begin(&pub->s->l3, ns, &pub->key, pub->rank, data, length, &pub->p)) {
		COUNT(pub->s, publish_skipped, 1); /* degraded */
		pub_release(pub);
	}
}

/* The tier above knows the part's length: a bounce buffer of the namespace's slot size. */
static uint8_t *read_back_target(struct tier_read *rd, uint32_t length)
{
	struct l3svc_pub *pub = (struct l3svc_pub *)((char *)rd - offsetof(struct l3svc_pub, rd));
	(void)length; /* at most rd->cap, the tier's contract */
	void *m = mmap(NULL, pub->bounce_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	pub->bounce = m;
	return pub->bounce;
}

static void read_back(struct tier_read *rd, int status, uint32_t length)
{
	struct l3svc_pub *pub = (struct l3svc_pub *)((char *)rd - offsetof(struct l3svc_pub, rd));
	const struct kvt_ns *ns = ns_find_id(pub->s->namespaces, pub->ns_id);
	if (status || !ns) {
		COUNT(pub->s, publish_skipped, 1); /* lost above too (reclaimed, failed), or dropped */
		pub_release(pub);
		return;
	}
	COUNT(pub->s, published_from_l2, 1);
	publish_bytes(pub, ns, pub->bounce, length);
}

/* Gone from L1 before its turn: the part's way is through a tier above that holds it. */
static bool publish_from_above(struct l3svc *s, struct l3svc_pub *pub, const struct kvt_ns *ns)
{
	pub->bounce_len = arena_slot_size(ns->block_bytes);
	pub->rd = (struct tier_read){.cap = (uint32_t)pub->bounce_len, .target = read_back_target,
				     .done = read_back};
	return tiers_read_above(s->stack, &s->tier, ns, &pub->key, pub->rank, &pub->rd) == 0;
}

/* Takes the oldest pending part: publishes it on pub, or counts why not. */
static void publish_next(struct l3svc *s, struct l3svc_pub *pub)
{
	struct l3svc_pending e = s->pending[s->pending_head];
	s->pending_head = (s->pending_head + 1) % s->pending_cap;
	s->pending_count--;
	const struct kvt_ns *ns = ns_find_id(s->namespaces, e.ns_id);
	if (!ns) { /* dropped since */
		COUNT(s, publish_skipped, 1);
		return;
	}
	if (known_ranks(s->known, ns->digest, &e.key) & rank_bit(e.rank)) {
		atomic_fetch_add_explicit(&s->l3.stats.publish_present, 1, memory_order_relaxed);
		return;
	}
	pub->ns_id = ns->id;
	pub->ns_digest = ns->digest;
	pub->key = e.key;
	pub->rank = e.rank;
	pub->busy = true;
	if (l1_load_begin(s->l1, ns, &e.key, e.rank, &pub->ref) == 0) {
		pub->pinned = true; /* the pin keeps the namespace too (it has an item) */
		publish_bytes(pub, ns, pub->ref.data, pub->ref.length);
	} else if (!publish_from_above(s, pub, ns)) {
		COUNT(s, publish_skipped, 1); /* evicted before its turn, and not held above */
		pub_release(pub);
	}
}

/* After each round of the loop: publish what waits while slots are free, then submit. */
static int submit(struct tier *t)
{
	struct l3svc *s = of(t);
	for (uint32_t i = 0; i < s->npubs && s->pending_count; i++)
		if (!s->pubs[i].busy)
			publish_next(s, &s->pubs[i]);
	SET(s, publish_queued, s->pending_count);
	l3_submit(&s->l3);
	return -1;
}

static void on_ring(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct l3svc *s = (struct l3svc *)((char *)src - offsetof(struct l3svc, ring_src));
	l3_process(&s->l3);
}

static void on_hashed(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct l3svc *s = (struct l3svc *)((char *)src - offsetof(struct l3svc, hashed_src));
	offload_reap(&s->offload);
	l3_submit(&s->l3);
}

static void probe_tick(struct loop_timer *t)
{
	struct l3svc *s = (struct l3svc *)((char *)t - offsetof(struct l3svc, probe_timer));
	l3_probe(&s->l3);
	l3_abandon_stuck(&s->l3, kvt_now_ms());
	l3_submit(&s->l3);
}

/* --- open and close --- */

static int open_parts(struct l3svc *s, const struct kvtd_config *cfg)
{
	s->npubs = (uint32_t)cfg->l3_queue_depth;
	s->pending_cap = PENDING_MAX;
	s->pubs = calloc(s->npubs, sizeof(*s->pubs));
	s->pending = calloc(s->pending_cap, sizeof(*s->pending));
	s->recent = known_new();
	if (!s->pubs || !s->pending || !s->recent)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->npubs; i++)
		s->pubs[i].s = s;
	return 0;
}

static int open_tier(struct l3svc *s, const struct kvtd_config *cfg, struct loop *loop)
{
	char why[640];
	/* A test hook (docs/development.md): a file system whose waits the kernel cannot cancel. */
	bool no_cancel = getenv("KVTIERD_TEST_L3_NO_CANCEL") != NULL;
	if (no_cancel)
		log_warn("l3: KVTIERD_TEST_L3_NO_CANCEL is set: L3 steps carry no linked timeouts (a test hook)");
	if (cfg->l3_key_file && l3mac_load(cfg->l3_key_file, &s->key, why, sizeof(why))) {
		log_error("l3: %s", why);
		return -EINVAL;
	}
	struct l3_config lc = {.path = cfg->l3_path, .queue_depth = (uint32_t)cfg->l3_queue_depth,
			       .op_timeout_ms = (uint32_t)cfg->l3_op_timeout_ms, .no_cancel = no_cancel,
			       .key = cfg->l3_key_file ? &s->key : NULL};
	int err = l3_open(&s->l3, &lc, why, sizeof(why));
	if (err) {
		log_error("l3: l3-path %s", why);
		return err;
	}
	s->open = true;
	if ((err = open_parts(s, cfg))) {
		log_error("l3: out of memory");
		return err;
	}
	if ((err = offload_open(&s->offload))) {
		log_error("l3: cannot start the checksum thread: %s", strerror(-err));
		return err;
	}
	s->offload_open = true;
	s->l3.offload = &s->offload;
	s->hashed_src = (struct loop_source){.fd = s->offload.done.eventfd, .on_event = on_hashed};
	s->ring_src = (struct loop_source){.fd = l3_event_fd(&s->l3), .on_event = on_ring};
	err = handoff_init(&s->seen);
	s->seen_src = (struct loop_source){.fd = s->seen.eventfd, .on_event = on_seen};
	if (err || (err = loop_add(loop, &s->hashed_src, EPOLLIN)) ||
	    (err = loop_add(loop, &s->ring_src, EPOLLIN)) ||
	    (err = loop_add(loop, &s->seen_src, EPOLLIN)) ||
	    (err = loop_add_timer(loop, &s->probe_timer, 1000, probe_tick))) {
		log_error("l3: event loop: %s", kvt_strerror(err));
		return err;
	}
	struct l3scan_limits limits = {.cap = cfg->l3_size, .ns_quota = cfg->namespace_l3_quota,
				       .interval_ms = (uint32_t)cfg->l3_scan_ms};
	if ((err = l3scan_start(&s->scan, s->l3.root, &limits, walk_seen, s))) {
		log_error("l3: cannot start the keeper thread: %s", strerror(-err));
		return err;
	}
	return 0;
}

int l3svc_open(struct l3svc *s, const struct kvtd_config *cfg, struct l1 *l1,
	       struct tiers *stack, struct ns_registry *namespaces, struct loop *loop)
{
	*s = (struct l3svc){.tier = l3_tier, .loop = loop, .l1 = l1, .stack = stack,
			    .namespaces = namespaces, .seen.eventfd = -1,
			    .probe_timer.src.fd = -1};
	int err = open_tier(s, cfg, loop);
	if (!err && (err = tiers_add(stack, &s->tier)))
		log_error("l3: cannot join the tier stack: %s", kvt_strerror(err));
	if (err) {
		close_tier(&s->tier);
		return err;
	}
	log_info("l3: %s (node %s), cap %s, namespace quota %s, walked every %u ms", s->l3.root,
		 s->l3.node, cfg->l3_size ? "set" : "none", cfg->namespace_l3_quota ? "set" : "none",
		 (unsigned)cfg->l3_scan_ms);
	return 0;
}

static void close_tier(struct tier *t)
{
	struct l3svc *s = of(t);
	if (!s->open)
		return;
	l3scan_stop(&s->scan);
	if (s->offload_open) { /* the checksums queued run, and their operations go on */
		loop_del(s->loop, &s->hashed_src);
		offload_close(&s->offload);
	}
	l3_close(&s->l3); /* publishes in flight finish: their L1 pins are released */
	loop_del_timer(s->loop, &s->probe_timer);
	loop_del(s->loop, &s->ring_src);
	if (s->seen.eventfd >= 0) {
		loop_del(s->loop, &s->seen_src);
		known_free(newest_walk(s)); /* a walk the loop never took */
		handoff_destroy(&s->seen);
	}
	known_free(s->known);
	known_free(s->recent);
	free(s->pubs);
	free(s->pending);
	s->open = false;
}

/* --- stats --- */

#define STAT_LIVE struct l3svc_stats
static const struct stat_def l3svc_stat_defs[] = {L3SVC_STATS(STAT_DEF)};
#undef STAT_LIVE

/* What ns holds in L3 (every node's files, the keeper's last walk) and its quota. */
static void ns_usage(struct tier *t, const struct kvt_ns *ns, struct tier_usage *out)
{
	struct l3svc *s = of(t);
	l3scan_ns_usage(&s->scan, ns->digest, &out->items, &out->bytes);
	out->quota = s->scan.ns_quota;
}

static void summary(const struct tier *t, struct tier_summary *out)
{
	const struct l3svc *s = of(t);
	struct l3_stats_snapshot e;
	struct l3scan_stats_snapshot k;
	l3_stats_read(&s->l3, &e);
	l3scan_stats_read(&s->scan, &k);
	*out = (struct tier_summary){
		.state = l3_state(&s->l3), .degraded = atomic_load(&s->l3.stats.degraded),
		.path = s->l3.root, .reason = l3_fault_reason(&s->l3),
		.capacity_bytes = k.capacity_bytes, .used_bytes = k.used_bytes, .items = k.items,
		.hits = e.reads, .misses = e.read_misses + e.read_failures,
		.evictions = k.files_removed};
}

/* Every L3 stat (engine, keeper, service). */
static void stats_visit_tier(const struct tier *t, stat_visit_fn fn, void *ctx)
{
	const struct l3svc *s = of(t);
	l3_stats_visit(&s->l3, fn, ctx);
	l3scan_stats_visit(&s->scan, fn, ctx);
	stats_visit(l3svc_stat_defs, sizeof(l3svc_stat_defs) / sizeof(l3svc_stat_defs[0]),
		    &s->stats, fn, ctx);
}

static const struct tier_ops l3_ops = {
	.contains = contains, .readable = readable, .read_begin = read_begin, .stored = stored,
	.ns_usage = ns_usage, .submit = submit, .summary = summary,
	.stats_visit = stats_visit_tier, .close = close_tier,
};

static const struct tier l3_tier = {
	.ops = &l3_ops, .name = "l3", .wire = KVT_TIER_L3, .unit = "files",
	.usage_help = "L3 bytes a namespace holds, every node's files, at the last walk.",
	.quota_help = "A namespace's L3 quota, namespace-l3-quota (0: none).",
};
