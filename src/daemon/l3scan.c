/* l3scan.c — see l3scan.h. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "l3.h"
#include "l3scan.h"
#include "log.h"

#define SET(s, field, v) atomic_store_explicit(&(s)->stats.field, (v), memory_order_relaxed)
#define ADD(s, field, v) atomic_fetch_add_explicit(&(s)->stats.field, (v), memory_order_relaxed)

struct file {
	struct timespec mtime;
	uint64_t bytes;
	struct l3scan_part part;     /* its path is l3_part_path's of these */
};

struct walk {
	struct file *files;
	uint64_t n, cap;
	uint64_t bytes;
};

static void scan_error(struct l3scan *s, const char *what, int err)
{
	if (err == ENOENT)
		return; /* removed by another node under the walk */
	ADD(s, scan_errors, 1);
	log_debug("l3: walk: %s: %s", what, strerror(err));
}

static bool push_file(struct walk *w, const struct file *f)
{
	if (w->n == w->cap) {
		uint64_t cap = w->cap ? 2 * w->cap : 4096;
		struct file *nf = realloc(w->files, cap * sizeof(*nf));
		if (!nf)
			return false;
		w->files = nf;
		w->cap = cap;
	}
	w->files[w->n++] = *f;
	w->bytes += f->bytes;
	return true;
}

/* Calls fn for each subdirectory name of path (not . and ..). */
static void each_subdir(struct l3scan *s, const char *path,
			void (*fn)(struct l3scan *s, struct walk *w, const char *path,
				   const char *rel, const char *name),
			struct walk *w, const char *rel)
{
	DIR *d = opendir(path);
	if (!d) {
		scan_error(s, path, errno);
		return;
	}
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			fn(s, w, path, rel, e->d_name);
	closedir(d);
}

/* A leaf directory's parts: files at the very path l3_part_path gives their name (no stray). */
static void walk_leaf(struct l3scan *s, struct walk *w, const char *path, const char *rel)
{
	DIR *d = opendir(path);
	if (!d) {
		scan_error(s, path, errno);
		return;
	}
	uint64_t digest = strtoull(rel, NULL, 16);
	char found[1024 + 256], canonical[L3_PATH_MAX];
	for (struct dirent *e; (e = readdir(d));) {
		struct file f = {.part.ns_digest = digest};
		struct stat st;
		if (e->d_name[0] == '.' || l3_name_parse(e->d_name, &f.part.key, &f.part.rank))
			continue;
		snprintf(found, sizeof(found), "%s/%s", path, e->d_name);
		if (l3_part_path(canonical, sizeof(canonical), s->root, digest, &f.part.key,
				 f.part.rank) ||
		    strcmp(found, canonical))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			scan_error(s, e->d_name, errno);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue; /* a symlink, FIFO or directory at a part's name: not a part */
		f.mtime = st.st_mtim;
		f.bytes = (uint64_t)st.st_size;
		if (!push_file(w, &f))
			break;
	}
	closedir(d);
}

static void walk_level(struct l3scan *s, struct walk *w, const char *path, const char *rel,
		       const char *name)
{
	char sub[1024], subrel[64];
	snprintf(sub, sizeof(sub), "%s/%s", path, name);
	snprintf(subrel, sizeof(subrel), "%s%s%s", rel, *rel ? "/" : "", name);
	unsigned depth = 0;
	for (const char *c = subrel; *c; c++)
		depth += *c == '/';
	if (depth == 2)
		walk_leaf(s, w, sub, subrel);
	else
		each_subdir(s, sub, walk_level, w, subrel);
}

static int older(const void *a, const void *b)
{
	const struct file *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

static int by_namespace(const void *a, const void *b)
{
	const struct file *x = a, *y = b;
	return x->part.ns_digest < y->part.ns_digest ? -1 : x->part.ns_digest > y->part.ns_digest;
}

static int namespace_then_older(const void *a, const void *b)
{
	const struct file *x = a, *y = b;
	if (x->part.ns_digest != y->part.ns_digest)
		return x->part.ns_digest < y->part.ns_digest ? -1 : 1;
	return older(a, b);
}

/* The end of the run of w's files (sorted by namespace) that share file i's namespace;
 * *bytes: theirs together. */
static uint64_t namespace_run(const struct walk *w, uint64_t i, uint64_t *bytes)
{
	uint64_t end = i;
	*bytes = 0;
	for (; end < w->n && w->files[end].part.ns_digest == w->files[i].part.ns_digest; end++)
		*bytes += w->files[end].bytes;
	return end;
}

/* Unlinks the file of f, which the walk found; false (counted) when it cannot. */
static bool remove_file(struct l3scan *s, const struct file *f)
{
	char path[L3_PATH_MAX];
	(void)l3_part_path(path, sizeof(path), s->root, f->part.ns_digest, &f->part.key,
			   f->part.rank); /* it fit when the walk found the file */
	if (unlink(path) == 0)
		return true;
	scan_error(s, path, errno);
	return false;
}

/* A namespace past the quota loses its oldest files to L3SCAN_LOW of it; w keeps the rest. */
static void enforce_ns_quota(struct l3scan *s, struct walk *w)
{
	if (!s->ns_quota || !w->n)
		return; /* (qsort of no files: a NULL array) */
	qsort(w->files, w->n, sizeof(*w->files), namespace_then_older);
	uint64_t low = (uint64_t)((double)s->ns_quota * L3SCAN_LOW), kept = 0;
	for (uint64_t i = 0, end; i < w->n; i = end) {
		uint64_t bytes;
		end = namespace_run(w, i, &bytes);
		bool over = bytes > s->ns_quota;
		for (uint64_t j = i; j < end; j++) {
			const struct file *f = &w->files[j];
			if (!over || bytes <= low) {
				w->files[kept++] = *f;
				continue;
			}
			bytes -= f->bytes;
			w->bytes -= f->bytes;
			if (remove_file(s, f))
				ADD(s, quota_files_removed, 1);
		}
	}
	w->n = kept;
}

/* Past the cap: removes the oldest files to L3SCAN_LOW of it; the rest stay in w, newest last. */
static void enforce_cap(struct l3scan *s, struct walk *w)
{
	if (!s->cap || w->bytes <= s->cap)
		return;
	qsort(w->files, w->n, sizeof(*w->files), older);
	uint64_t low = (uint64_t)((double)s->cap * L3SCAN_LOW), i = 0;
	for (; i < w->n && w->bytes > low; i++) {
		w->bytes -= w->files[i].bytes;
		if (remove_file(s, &w->files[i]))
			ADD(s, files_removed, 1);
	}
	memmove(w->files, w->files + i, (w->n - i) * sizeof(*w->files));
	w->n -= i;
}

static void remove_stale_temporaries(struct l3scan *s)
{
	char dir[600], path[1024];
	snprintf(dir, sizeof(dir), "%s/tmp", s->root);
	DIR *d = opendir(dir);
	if (!d) {
		scan_error(s, dir, errno);
		return;
	}
	time_t now = time(NULL);
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st;
		if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    now - st.st_mtim.tv_sec < L3SCAN_STALE_S)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) == 0)
			ADD(s, temporaries_removed, 1);
		else
			scan_error(s, path, errno);
	}
	closedir(d);
}

/* What each namespace of w holds, as the new usage table (w sorted by namespace). */
static void keep_usage(struct l3scan *s, struct walk *w)
{
	if (w->n)
		qsort(w->files, w->n, sizeof(*w->files), by_namespace);
	uint64_t n = 0, bytes;
	for (uint64_t i = 0; i < w->n; i = namespace_run(w, i, &bytes))
		n++;
	struct l3scan_ns_usage *u = calloc(n ? n : 1, sizeof(*u));
	if (!u)
		return; /* the last table stays: one walk old */
	for (uint64_t i = 0, end, k = 0; i < w->n; i = end, k++) {
		end = namespace_run(w, i, &bytes);
		u[k] = (struct l3scan_ns_usage){.ns_digest = w->files[i].part.ns_digest,
						.files = end - i, .bytes = bytes};
	}
	pthread_mutex_lock(&s->lock);
	struct l3scan_ns_usage *old = s->usage;
	s->usage = u;
	s->nusage = n;
	pthread_mutex_unlock(&s->lock);
	free(old);
}

static void walk_once(struct l3scan *s)
{
	uint64_t t0 = kvt_now_ms();
	struct walk w = {0};
	char top[600];
	snprintf(top, sizeof(top), "%s/v1", s->root);
	each_subdir(s, top, walk_level, &w, "");
	enforce_ns_quota(s, &w);
	enforce_cap(s, &w);
	keep_usage(s, &w);
	remove_stale_temporaries(s);
	SET(s, used_bytes, w.bytes);
	SET(s, items, w.n);
	SET(s, last_scan_ms, kvt_now_ms() - t0);
	struct l3scan_part *parts = malloc((w.n ? w.n : 1) * sizeof(*parts));
	for (uint64_t i = 0; parts && i < w.n; i++)
		parts[i] = w.files[i].part;
	free(w.files);
	ADD(s, scans, 1);
	if (parts)
		s->seen(s->ctx, parts, w.n);
}

static void *keeper(void *arg)
{
	struct l3scan *s = arg;
	pthread_mutex_lock(&s->lock);
	while (!s->stopping) {
		s->kicked = false;
		pthread_mutex_unlock(&s->lock);
		walk_once(s);
		pthread_mutex_lock(&s->lock);
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)s->interval_ms * 1000000u;
		until.tv_sec += (time_t)(ns / 1000000000u);
		until.tv_nsec = (long)(ns % 1000000000u);
		while (!s->stopping && !s->kicked &&
		       pthread_cond_timedwait(&s->wake, &s->lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int l3scan_start(struct l3scan *s, const char *root, const struct l3scan_limits *limits,
		 void (*seen)(void *ctx, struct l3scan_part *parts, uint64_t n), void *ctx)
{
	snprintf(s->root, sizeof(s->root), "%s", root);
	s->cap = limits->cap;
	s->ns_quota = limits->ns_quota;
	s->interval_ms = limits->interval_ms;
	s->seen = seen;
	s->ctx = ctx;
	SET(s, capacity_bytes, s->cap);
	SET(s, namespace_quota_bytes, s->ns_quota);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, &ca);
	pthread_condattr_destroy(&ca);
	int err = pthread_create(&s->thread, NULL, keeper, s);
	if (err) {
		pthread_cond_destroy(&s->wake);
		pthread_mutex_destroy(&s->lock);
		return -err;
	}
	s->running = true;
	return 0;
}

void l3scan_kick(struct l3scan *s)
{
	pthread_mutex_lock(&s->lock);
	s->kicked = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

void l3scan_stop(struct l3scan *s)
{
	if (!s->running)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	free(s->usage);
	s->usage = NULL;
	s->nusage = 0;
	s->running = false;
}

static int usage_digest_cmp(const void *key, const void *elem)
{
	uint64_t d = *(const uint64_t *)key, e = ((const struct l3scan_ns_usage *)elem)->ns_digest;
	return d < e ? -1 : d > e;
}

void l3scan_ns_usage(struct l3scan *s, uint64_t ns_digest, uint64_t *files, uint64_t *bytes)
{
	*files = *bytes = 0;
	if (!s->running)
		return;
	pthread_mutex_lock(&s->lock);
	const struct l3scan_ns_usage *u =
		s->usage ? bsearch(&ns_digest, s->usage, s->nusage, sizeof(*s->usage),
				   usage_digest_cmp)
			 : NULL;
	if (u) {
		*files = u->files;
		*bytes = u->bytes;
	}
	pthread_mutex_unlock(&s->lock);
}

#define STAT_LIVE struct l3scan_stats
static const struct stat_def l3scan_stat_defs[] = {L3SCAN_STATS(STAT_DEF)};
#undef STAT_LIVE

void l3scan_stats_read(const struct l3scan *s, struct l3scan_stats_snapshot *out)
{
	stats_copy(&s->stats, out, sizeof(*out));
}

void l3scan_stats_visit(const struct l3scan *s, stat_visit_fn fn, void *ctx)
{
	stats_visit(l3scan_stat_defs, sizeof(l3scan_stat_defs) / sizeof(l3scan_stat_defs[0]),
		    &s->stats, fn, ctx);
}
