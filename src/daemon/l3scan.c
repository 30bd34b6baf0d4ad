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
#include "l2fmt.h"
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

/*
 * The largest file a part can be: its header and a data length that fits
 * its u32. A file at a part's name claiming more (a sparse file of a
 * terabyte) is foreign: neither counted nor removed nor read as a part.
 */
#define PART_MAX_BYTES (L2FMT_BLOCK + (UINT64_C(1) << 32))

/* The bytes a file takes: what is allocated, never more than its size (a sparse file's holes cost nothing). */
static uint64_t file_bytes(const struct stat *st)
{
	uint64_t allocated = (uint64_t)st->st_blocks * 512;
	return allocated < (uint64_t)st->st_size ? allocated : (uint64_t)st->st_size;
}

/*
 * Opens directory name in dirfd, never through a symlink: the walk stays in
 * the L3 directory whatever a writer of the shared directory links into it.
 * NULL (counted, unless it vanished or is a symlink: foreign) when it cannot.
 */
static DIR *open_subdir(struct l3scan *s, int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd < 0 && errno != ELOOP && errno != ENOTDIR)
			scan_error(s, name, errno);
		if (fd >= 0)
			close(fd);
	}
	return d;
}

/*
 * Opens the directory at rel (a/b/c) beneath root, one component at a time,
 * none a symlink: what the walk removes is inside L3, whatever was renamed
 * or linked since it looked. -errno when it cannot.
 */
static int open_beneath(int rootfd, const char *rel)
{
	char part[L3_PATH_MAX];
	int fd = dup(rootfd);
	while (fd >= 0 && *rel) {
		size_t n = strcspn(rel, "/");
		if (n >= sizeof(part)) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(part, rel, n);
		part[n] = '\0';
		int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int err = errno;
		close(fd);
		if (next < 0)
			return -err;
		fd = next;
		rel += n + (rel[n] == '/');
	}
	return fd < 0 ? -errno : fd;
}

/* A leaf directory's parts: files at the very path l3_part_path gives their name (no stray). */
static void walk_leaf(struct l3scan *s, struct walk *w, DIR *d, const char *rel)
{
	uint64_t digest = strtoull(rel, NULL, 16);
	char found[1024 + 256], canonical[L3_PATH_MAX];
	for (struct dirent *e; (e = readdir(d));) {
		struct file f = {.part.ns_digest = digest};
		struct stat st;
		if (e->d_name[0] == '.' || l3_name_parse(e->d_name, &f.part.key, &f.part.rank))
			continue;
		snprintf(found, sizeof(found), "%s/v1/%s/%s", s->root, rel, e->d_name);
		if (l3_part_path(canonical, sizeof(canonical), s->root, digest, &f.part.key,
				 f.part.rank) ||
		    strcmp(found, canonical))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			scan_error(s, e->d_name, errno);
			continue;
		}
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > PART_MAX_BYTES)
			continue; /* a symlink, FIFO, directory or giant at a part's name: not a part */
		f.mtime = st.st_mtim;
		f.bytes = file_bytes(&st);
		if (!push_file(w, &f))
			break;
	}
}

/* Walks the directory d (at rel under v1/, depth levels down): its subdirectories, or its parts. */
static void walk_dir(struct l3scan *s, struct walk *w, DIR *d, const char *rel, unsigned depth)
{
	if (depth == 3) {
		walk_leaf(s, w, d, rel);
		return;
	}
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char subrel[64];
		if ((size_t)snprintf(subrel, sizeof(subrel), "%s%s%s", rel, *rel ? "/" : "", e->d_name) >=
		    sizeof(subrel))
			continue; /* no name of L3's is this long */
		DIR *sub = open_subdir(s, dirfd(d), e->d_name);
		if (sub) {
			walk_dir(s, w, sub, subrel, depth + 1);
			closedir(sub);
		}
	}
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

/* Unlinks the file of f, which the walk found, beneath root; false (counted) when it cannot. */
static bool remove_file(struct l3scan *s, int rootfd, const struct file *f)
{
	char rel[L3_PATH_MAX];
	(void)l3_part_path(rel, sizeof(rel), ".", f->part.ns_digest, &f->part.key,
			   f->part.rank); /* "./v1/NS/AA/BB/NAME": it fit when the walk found the file */
	char *name = strrchr(rel, '/');
	*name++ = '\0';
	int dfd = open_beneath(rootfd, rel);
	int err = dfd < 0 ? -dfd : unlinkat(dfd, name, 0) ? errno : 0;
	if (dfd >= 0)
		close(dfd);
	if (!err)
		return true;
	scan_error(s, name, err);
	return false;
}

/* A namespace past the quota loses its oldest files to L3SCAN_LOW of it; w keeps the rest. */
static void enforce_ns_quota(struct l3scan *s, int rootfd, struct walk *w)
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
			if (remove_file(s, rootfd, f))
				ADD(s, quota_files_removed, 1);
		}
	}
	w->n = kept;
}

/* Past the cap: removes the oldest files to L3SCAN_LOW of it; the rest stay in w, newest last. */
static void enforce_cap(struct l3scan *s, int rootfd, struct walk *w)
{
	if (!s->cap || w->bytes <= s->cap)
		return;
	qsort(w->files, w->n, sizeof(*w->files), older);
	uint64_t low = (uint64_t)((double)s->cap * L3SCAN_LOW), i = 0;
	for (; i < w->n && w->bytes > low; i++) {
		w->bytes -= w->files[i].bytes;
		if (remove_file(s, rootfd, &w->files[i]))
			ADD(s, files_removed, 1);
	}
	memmove(w->files, w->files + i, (w->n - i) * sizeof(*w->files));
	w->n -= i;
}

/* A regular file of a flat directory of L3's (tmp/, quarantine/): its name, time and bytes. */
struct entry {
	char name[256];
	time_t mtime;
	uint64_t bytes;
};

/* The regular files of directory name under root; *n of them (malloc'd; NULL when none or on error). */
static struct entry *list_flat(struct l3scan *s, int rootfd, const char *name, DIR **dir,
			       uint64_t *n)
{
	*n = 0;
	*dir = open_subdir(s, rootfd, name);
	if (!*dir)
		return NULL;
	struct entry *list = NULL;
	uint64_t cap = 0;
	for (struct dirent *e; (e = readdir(*dir));) {
		struct stat st;
		if (e->d_name[0] == '.' || fstatat(dirfd(*dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			struct entry *more = realloc(list, cap * sizeof(*list));
			if (!more)
				break;
			list = more;
		}
		struct entry *en = &list[(*n)++];
		snprintf(en->name, sizeof(en->name), "%s", e->d_name);
		en->mtime = st.st_mtim.tv_sec;
		en->bytes = file_bytes(&st);
	}
	return list;
}

static void remove_stale_temporaries(struct l3scan *s, int rootfd)
{
	DIR *d;
	uint64_t n;
	struct entry *list = list_flat(s, rootfd, "tmp", &d, &n);
	time_t now = time(NULL);
	for (uint64_t i = 0; i < n; i++) {
		if (now - list[i].mtime < L3SCAN_STALE_S)
			continue;
		if (unlinkat(dirfd(d), list[i].name, 0) == 0)
			ADD(s, temporaries_removed, 1);
		else
			scan_error(s, list[i].name, errno);
	}
	free(list);
	if (d)
		closedir(d);
}

static int entry_older(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/*
 * quarantine/ holds the files that failed verification, for an operator to
 * look at: each goes after L3SCAN_QUARANTINE_S, and the oldest go first
 * while they hold more than a sixteenth of the cap. What stays counts in
 * L3's bytes. Returns those bytes.
 */
static uint64_t expire_quarantine(struct l3scan *s, int rootfd)
{
	DIR *d;
	uint64_t n, bytes = 0;
	struct entry *list = list_flat(s, rootfd, "quarantine", &d, &n);
	if (n)
		qsort(list, n, sizeof(*list), entry_older);
	for (uint64_t i = 0; i < n; i++)
		bytes += list[i].bytes;
	time_t now = time(NULL);
	for (uint64_t i = 0; i < n; i++) {
		bool crowded = s->cap && bytes > s->cap / 16;
		if (!crowded && now - list[i].mtime < L3SCAN_QUARANTINE_S)
			continue;
		if (unlinkat(dirfd(d), list[i].name, 0) == 0) {
			bytes -= list[i].bytes;
			ADD(s, quarantine_removed, 1);
		} else {
			scan_error(s, list[i].name, errno);
		}
	}
	free(list);
	if (d)
		closedir(d);
	SET(s, quarantine_bytes, bytes);
	return bytes;
}

/*
 * L3's own directories, made again when gone (an operator emptied the shared
 * directory): publishes and quarantines need them. Counted when made.
 */
static void keep_skeleton(struct l3scan *s, int rootfd)
{
	for (size_t i = 0; i < L3_NDIRS; i++) {
		if (mkdirat(rootfd, l3_dirs[i], 0755) == 0) {
			ADD(s, dirs_remade, 1);
			log_warn("l3: %s/%s was gone: made again", s->root, l3_dirs[i]);
		} else if (errno != EEXIST) {
			scan_error(s, l3_dirs[i], errno);
		}
	}
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
	int rootfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		scan_error(s, s->root, errno);
		return;
	}
	keep_skeleton(s, rootfd);
	DIR *top = open_subdir(s, rootfd, "v1");
	if (top) {
		walk_dir(s, &w, top, "", 0);
		closedir(top);
	}
	w.bytes += expire_quarantine(s, rootfd);
	enforce_ns_quota(s, rootfd, &w);
	enforce_cap(s, rootfd, &w);
	keep_usage(s, &w);
	remove_stale_temporaries(s, rootfd);
	close(rootfd);
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
		kvt_deadline_ms(&until, s->interval_ms);
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
