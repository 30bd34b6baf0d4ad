/* l3.c — see l3.h. Each operation is a small state machine, one SQE in flight at a time. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "l3.h"
#include "log.h"

#define COUNT(l3, field, n) atomic_fetch_add_explicit(&(l3)->stats.field, (n), memory_order_relaxed)

enum step {
	READ_OPEN, READ_HEADER, READ_DATA, READ_QUARANTINE,
	PUB_OPEN, PUB_WRITE, PUB_LINK, PUB_MKDIR, PUB_RENAME, PUB_UNLINK,
	PROBE_STATX, PROBE_OPEN, PROBE_UNLINK,
	CLOSE,
};

static const char *const fault_reason[] = {
	[L3_OK] = NULL, [L3_FAULT_READ_ONLY] = "read-only", [L3_FAULT_FULL] = "full",
	[L3_FAULT_GONE] = "gone", [L3_FAULT_IO] = "I/O errors", [L3_FAULT_HUNG] = "hung",
};

/* --- names --- */

static void hex(char *out, const uint8_t *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = 0;
}

int l3_part_path(char *buf, size_t len, const char *root, uint64_t ns_digest,
		 const struct kvt_key *key, uint16_t rank)
{
	char k[2 * KVT_KEY_BYTES + 1];
	hex(k, key->bytes, KVT_KEY_BYTES);
	int n = snprintf(buf, len, "%s/v1/%016" PRIx64 "/%.2s/%.2s/%s.%u", root, ns_digest, k,
			 k + 2, k, rank);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int unhex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int l3_name_parse(const char *name, struct kvt_key *key, uint16_t *rank)
{
	for (size_t i = 0; i < KVT_KEY_BYTES; i++) {
		int hi = unhex(name[2 * i]), lo = hi < 0 ? -1 : unhex(name[2 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		key->bytes[i] = (uint8_t)(hi << 4 | lo);
	}
	const char *r = name + 2 * KVT_KEY_BYTES;
	if (*r != '.' || r[1] < '0' || r[1] > '9' || (r[1] == '0' && r[2]))
		return -EINVAL; /* what l3_part_path writes, no other spelling (no leading zero) */
	char *end;
	unsigned long v = strtoul(r + 1, &end, 10);
	if (*end || v > UINT16_MAX)
		return -EINVAL;
	*rank = (uint16_t)v;
	return 0;
}

/* The parent directories of a part's file, level 0 (NSDIGEST) to 2 (BB): their path. */
static void parent_path(char *buf, size_t len, const char *file, unsigned level)
{
	/* file = ROOT/v1/NS/AA/BB/NAME: cut after the (level+1)-th of the last four '/'. */
	snprintf(buf, len, "%s", file);
	for (unsigned cut = 3 - level; cut > 0; cut--)
		*strrchr(buf, '/') = 0;
}

/* --- faults --- */

static enum l3_fault fault_of(int err)
{
	switch (err) {
	case -EROFS: case -EACCES: case -EPERM:
		return L3_FAULT_READ_ONLY;
	case -ENOSPC: case -EDQUOT:
		return L3_FAULT_FULL;
	case -ENODEV: case -ENXIO:
		return L3_FAULT_GONE;
	case -ETIMEDOUT:
		return L3_FAULT_HUNG;
	default:
		return L3_FAULT_IO;
	}
}

/* err: what caused it (0 when clearing), and the path it hit. */
static void set_fault(struct l3 *l3, enum l3_fault f, int err, const char *path)
{
	if (err)
		log_debug("l3: %s: %s", path, strerror(-err));
	if (l3->fault == f)
		return;
	if (f == L3_OK)
		log_info("l3: %s: writable again", l3->root);
	else
		log_warn("l3: %s: degraded (%s: %s on %s): publishes stop, a probe retries",
			 l3->root, fault_reason[f], strerror(-err), path);
	l3->fault = f;
	atomic_store_explicit(&l3->stats.degraded, f != L3_OK, memory_order_relaxed);
}

/* --- the ring --- */

/* An aligned block for O_DIRECT: a page of its own (a few us against the file I/O it serves). */
static void *header_block(void)
{
	void *p = mmap(NULL, L2FMT_BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void header_free(uint8_t *hdr)
{
	if (hdr)
		munmap(hdr, L2FMT_BLOCK);
}


static void op_submit(struct l3 *l3, struct l3_op *op);

static struct io_uring_sqe *get_sqe(struct l3 *l3)
{
	return l3->in_ring < l3->queue_depth ? io_uring_get_sqe(&l3->ring) : NULL;
}

/*
 * Links a timeout to sqe, op's step, unless that is a close (nothing to gain:
 * a close is not cancelled). Its own completion carries no op and is only
 * seen: the op's step ends with -ECANCELED when the timeout cancelled it.
 * The ring has two entries per operation, so this SQE is always there.
 */
static void link_timeout(struct l3 *l3, const struct l3_op *op, struct io_uring_sqe *sqe)
{
	if (op->step == CLOSE || (!l3->op_timeout.tv_sec && !l3->op_timeout.tv_nsec))
		return;
	sqe->flags |= IOSQE_IO_LINK;
	struct io_uring_sqe *t = io_uring_get_sqe(&l3->ring);
	io_uring_prep_link_timeout(t, &l3->op_timeout, 0);
	io_uring_sqe_set_data(t, NULL);
}

/* A read begun: l3_abandon_stuck watches it until it is finished. */
static void read_listed(struct l3 *l3, struct l3_op *op)
{
	LIST_INSERT_HEAD(&l3->reads, op, read_link);
}

static void read_unlisted(struct l3_op *op)
{
	LIST_REMOVE(op, read_link);
}

/* Prepares op's SQE for its step; false when the ring is full (op waits in the queue). */
static bool prep(struct l3 *l3, struct l3_op *op)
{
	struct io_uring_sqe *sqe = get_sqe(l3);
	if (!sqe)
		return false;
	int wflags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (op->direct ? O_DIRECT : 0);
	switch ((enum step)op->step) {
	case READ_OPEN:
		/*
		 * Beneath the root, through no symlink: a published part is never
		 * one, nor is a directory of L3's; a writer of the shared directory
		 * who links one elsewhere gets a failed read (-ELOOP), not a read
		 * (and a quarantine) of a file outside L3.
		 */
		op->how = (struct open_how){
			.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (op->direct ? O_DIRECT : 0),
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
		io_uring_prep_openat2(sqe, l3->root_fd, op->path + strlen(l3->root) + 1, &op->how);
		break;
	case READ_HEADER:
		io_uring_prep_read(sqe, op->fd, op->hdr, L2FMT_BLOCK, 0);
		break;
	case READ_DATA:
		io_uring_prep_read(sqe, op->fd, op->data, (unsigned)l2fmt_align(op->length),
				   L2FMT_BLOCK);
		break;
	case READ_QUARANTINE:
		io_uring_prep_renameat(sqe, AT_FDCWD, op->path, AT_FDCWD, op->tmp, 0);
		break;
	case PUB_OPEN:
	case PROBE_OPEN:
		io_uring_prep_openat(sqe, AT_FDCWD, op->tmp, wflags, 0644);
		break;
	case PUB_WRITE:
		op->iov[0] = (struct iovec){op->hdr, L2FMT_BLOCK};
		op->iov[1] = (struct iovec){op->data, (size_t)l2fmt_align(op->length)};
		io_uring_prep_writev(sqe, op->fd, op->iov, 2, 0);
		break;
	case PUB_LINK:
		io_uring_prep_linkat(sqe, AT_FDCWD, op->tmp, AT_FDCWD, op->path, 0);
		break;
	case PUB_MKDIR:
		parent_path(op->dir, sizeof(op->dir), op->path, op->mkdir_level);
		io_uring_prep_mkdirat(sqe, AT_FDCWD, op->dir, 0755);
		break;
	case PUB_RENAME:
		io_uring_prep_renameat(sqe, AT_FDCWD, op->tmp, AT_FDCWD, op->path, 0);
		break;
	case PUB_UNLINK:
	case PROBE_UNLINK:
		io_uring_prep_unlinkat(sqe, AT_FDCWD, op->tmp, 0);
		break;
	case PROBE_STATX:
		io_uring_prep_statx(sqe, AT_FDCWD, l3->root, 0, STATX_BASIC_STATS,
				    (struct statx *)op->hdr);
		break;
	case CLOSE:
		io_uring_prep_close(sqe, op->fd);
		break;
	}
	io_uring_sqe_set_data(sqe, op);
	l3->in_ring++;
	link_timeout(l3, op, sqe);
	return true;
}

static void op_submit(struct l3 *l3, struct l3_op *op)
{
	if (op->kind == L3_OP_READ) /* for l3_abandon_stuck: on the kernel, or on room in the ring */
		op->waiting_since_ms = kvt_now_ms();
	if (!STAILQ_EMPTY(&l3->queued) || !prep(l3, op))
		STAILQ_INSERT_TAIL(&l3->queued, op, queue);
}

static void submit_queued(struct l3 *l3)
{
	while (!STAILQ_EMPTY(&l3->queued) && prep(l3, STAILQ_FIRST(&l3->queued)))
		STAILQ_REMOVE_HEAD(&l3->queued, queue);
	if (io_uring_sq_ready(&l3->ring))
		io_uring_submit(&l3->ring);
}

static void go(struct l3_op *op, int step)
{
	op->step = step;
	op_submit(op->l3, op);
}

/* The operation is over: close the file if open, then its owner hears the status. */
static void finish(struct l3_op *op, int status)
{
	op->status = status;
	if (op->fd >= 0) {
		go(op, CLOSE);
		return;
	}
	header_free(op->hdr);
	op->hdr = NULL;
	op->l3->ops_active--;
	op->finished(op);
}

/* --- reads --- */

static void quarantine(struct l3_op *op)
{
	struct l3 *l3 = op->l3;
	COUNT(l3, checksum_failures, 1);
	const char *name = strrchr(op->path, '/') + 1;
	snprintf(op->tmp, sizeof(op->tmp), "%s/quarantine/%016" PRIx64 ".%s.%s.%" PRIu64, l3->root,
		 op->ns_digest, name, l3->node, l3->tmp_seq++);
	log_warn("l3: %s failed verification: quarantined", op->path);
	go(op, READ_QUARANTINE);
}

static int header_check(struct l3_op *op)
{
	struct l2fmt_record r;
	if (l2fmt_record_decode(op->hdr, &r) || r.ns_digest != op->ns_digest ||
	    memcmp(&r.key, &op->key, sizeof(r.key)) || r.rank != op->rank)
		return -EBADMSG;
	if (r.length > op->cap)
		return -ERANGE;
	op->length = r.length;
	op->tp_size = r.tp_size;
	op->checksum = r.data_checksum;
	op->signed_part = r.flags & L2FMT_RECORD_MAC;
	return 0;
}

/* An open refused O_DIRECT (EINVAL: the file system does not take it): again, buffered. */
static bool reopen_buffered(struct l3_op *op, int res)
{
	if (res != -EINVAL || !op->direct)
		return false;
	op->direct = false;
	go(op, op->step);
	return true;
}

static struct l3_op *op_of_job(struct offload_job *job)
{
	return (struct l3_op *)((char *)job - offsetof(struct l3_op, job));
}

/* --- checksums: on the offload thread when there is one --- */

/* A read's data against its header: the XXH3, then (with a key) the signature. */
static void verify_run(struct offload_job *job)
{
	struct l3_op *op = op_of_job(job);
	const struct l3mac_key *key = op->l3->key;
	if (XXH3_64bits(op->data, op->length) != op->checksum)
		op->verdict = -EBADMSG;
	else if (key && !op->signed_part)
		op->verdict = -ENOENT;
	else if (key && !l3mac_verify(key, op->hdr, op->data, op->length))
		op->verdict = -EKEYREJECTED;
	else
		op->verdict = 0;
}

/* A publish's header: the data's XXH3, the fields, then (with a key) the signature. */
static void seal_run(struct offload_job *job)
{
	struct l3_op *op = op_of_job(job);
	const struct l3mac_key *key = op->l3->key;
	struct l2fmt_record r = {.ns_digest = op->ns_digest, .key = op->key, .rank = op->rank,
				 .tp_size = op->tp_size, .length = op->length,
				 .flags = key ? L2FMT_RECORD_MAC : 0,
				 .data_checksum = XXH3_64bits(op->data, op->length)};
	l2fmt_record_encode(op->hdr, &r);
	if (key)
		l3mac_sign(key, op->hdr, op->data, op->length);
}

/* Runs run(op) (a hash over its data), then then(op) on the owner's thread. */
static void hash(struct l3_op *op, void (*run)(struct offload_job *job),
		 void (*then)(struct offload_job *job))
{
	op->job = (struct offload_job){.run = run, .done = then};
	if (op->l3->offload) {
		offload_submit(op->l3->offload, &op->job);
	} else {
		run(&op->job);
		then(&op->job);
	}
}

static void data_checked(struct offload_job *job)
{
	struct l3_op *op = op_of_job(job);
	if (op->verdict == -ENOENT) { /* unsigned: a keyless node's, left for it */
		COUNT(op->l3, unsigned_parts, 1);
		finish(op, -ENOENT);
	} else if (op->verdict == -EKEYREJECTED) {
		COUNT(op->l3, bad_signatures, 1);
		quarantine(op);
	} else if (op->verdict) {
		quarantine(op);
	} else {
		finish(op, 0);
	}
}

static void read_step(struct l3_op *op, int res)
{
	struct l3_read *rd = (struct l3_read *)((char *)op - offsetof(struct l3_read, op));
	struct l3 *l3 = op->l3;
	if (op->abandoned) { /* the kernel let go at last: close what it opened, then done */
		if (op->step == READ_OPEN && res >= 0)
			op->fd = res;
		finish(op, -ETIMEDOUT);
		return;
	}
	switch ((enum step)op->step) {
	case READ_OPEN:
		if (reopen_buffered(op, res))
			return;
		if (res < 0) { /* -ELOOP: a symlink at the part's name or on the way */
			if (res != -ENOENT)
				COUNT(l3, io_errors, 1);
			finish(op, res);
		} else {
			op->fd = res;
			go(op, READ_HEADER);
		}
		return;
	case READ_HEADER: {
		int err = res < 0 ? res : res < (int)L2FMT_BLOCK ? -EBADMSG : header_check(op);
		if (err == -EBADMSG) {
			quarantine(op);
		} else if (err) {
			if (err != -ERANGE)
				COUNT(l3, io_errors, 1);
			finish(op, err);
		} else if (!(op->data = rd->target(rd, op->length))) {
			finish(op, -ENOENT);
		} else {
			go(op, READ_DATA);
		}
		return;
	}
	case READ_DATA:
		if (res < 0) {
			COUNT(l3, io_errors, 1);
			finish(op, res);
		} else if ((uint32_t)res < op->length) {
			quarantine(op); /* truncated */
		} else {
			hash(op, verify_run, data_checked);
		}
		return;
	case READ_QUARANTINE:
		if (res == 0)
			COUNT(l3, quarantined, 1);
		finish(op, -EBADMSG); /* not moved (another node did, or cannot): still a miss */
		return;
	default:
		return;
	}
}

static void read_finished(struct l3_op *op)
{
	struct l3_read *rd = (struct l3_read *)((char *)op - offsetof(struct l3_read, op));
	struct l3 *l3 = op->l3;
	if (op->status == 0) {
		COUNT(l3, reads, 1);
		COUNT(l3, bytes_read, op->length);
	} else if (op->status == -ENOENT) {
		COUNT(l3, read_misses, 1);
	} else {
		COUNT(l3, read_failures, 1);
	}
	if (op->abandoned)
		atomic_fetch_sub_explicit(&l3->stats.reads_held, 1, memory_order_relaxed);
	read_unlisted(op);
	rd->op.length = op->length;
	rd->done(rd, op->status);
}

unsigned l3_abandon_stuck(struct l3 *l3, uint64_t now_ms)
{
	if (!l3->op_timeout_ms)
		return 0;
	uint64_t limit = (uint64_t)l3->op_timeout_ms + L3_ABANDON_GRACE_MS;
	unsigned n = 0;
	for (struct l3_op *op = LIST_FIRST(&l3->reads), *next; op; op = next) {
		next = LIST_NEXT(op, read_link); /* the callback may begin reads: they go in at the head */
		struct l3_read *rd = (struct l3_read *)((char *)op - offsetof(struct l3_read, op));
		if (op->abandoned || op->step == CLOSE || !rd->abandoned || !op->waiting_since_ms ||
		    now_ms - op->waiting_since_ms < limit)
			continue;
		op->abandoned = true;
		COUNT(l3, reads_abandoned, 1);
		COUNT(l3, reads_held, 1);
		log_warn("l3: %s: a read has waited %" PRIu64 " ms, past l3-op-timeout-ms and its "
			 "cancel (a hard mount?): its LOAD answered without it; its memory is kept "
			 "until the kernel returns", op->path, now_ms - op->waiting_since_ms);
		rd->abandoned(rd);
		n++;
	}
	return n;
}

static void op_init(struct l3 *l3, struct l3_op *op, enum l3_op_kind kind,
		    const struct kvt_ns *ns, const struct kvt_key *key, uint16_t rank)
{
	*op = (struct l3_op){.l3 = l3, .kind = kind, .fd = -1, .direct = true,
			     .hdr = header_block(), .rank = rank};
	if (ns) {
		op->ns_digest = ns->digest;
		op->tp_size = ns->tp_size;
		op->key = *key;
	}
	l3->ops_active++;
}

int l3_read_begin(struct l3 *l3, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, uint32_t cap, struct l3_read *rd)
{
	op_init(l3, &rd->op, L3_OP_READ, ns, key, rank);
	rd->op.cap = cap;
	rd->op.finished = read_finished;
	int err = !rd->op.hdr ? -ENOMEM
			      : l3_part_path(rd->op.path, sizeof(rd->op.path), l3->root, ns->digest,
					     key, rank);
	if (err) {
		header_free(rd->op.hdr);
		rd->op.hdr = NULL;
		l3->ops_active--;
		return err;
	}
	read_listed(l3, &rd->op);
	go(&rd->op, READ_OPEN);
	return 0;
}

/* --- publishes --- */

/* A publish failed on path: counted, and L3 degraded for the reason err gives. */
static void publish_fault(struct l3_op *op, int err, const char *path)
{
	COUNT(op->l3, io_errors, 1);
	set_fault(op->l3, fault_of(err), err, path);
}

static void publish_fail(struct l3_op *op, int err)
{
	if (err != -EEXIST)
		publish_fault(op, err, op->path);
	op->status = err;
	go(op, PUB_UNLINK);
}

static void publish_step(struct l3_op *op, int res)
{
	struct l3 *l3 = op->l3;
	switch ((enum step)op->step) {
	case PUB_OPEN:
		if (reopen_buffered(op, res))
			return;
		if (res < 0) {
			publish_fault(op, res, op->tmp);
			finish(op, res);
		} else {
			op->fd = res;
			go(op, PUB_WRITE);
		}
		return;
	case PUB_WRITE:
		if (res < 0 || (uint64_t)res < L2FMT_BLOCK + l2fmt_align(op->length)) {
			op->status = res < 0 ? res : -ENOSPC; /* a short write: the file system is full */
			publish_fault(op, op->status, op->tmp);
			go(op, CLOSE); /* then PUB_UNLINK: see publish_closed */
			return;
		}
		COUNT(l3, bytes_written, L2FMT_BLOCK + l2fmt_align(op->length));
		go(op, CLOSE);
		return;
	case PUB_LINK:
		if (res == -ENOENT && op->mkdir_level < 3) {
			go(op, PUB_MKDIR);
		} else if (res == -EPERM || res == -EOPNOTSUPP || res == -EMLINK) {
			go(op, PUB_RENAME); /* no hard links here: rename (it may replace a twin) */
		} else if (res < 0) {
			publish_fail(op, res);
		} else {
			op->status = 0;
			go(op, PUB_UNLINK);
		}
		return;
	case PUB_MKDIR:
		if (res < 0 && res != -EEXIST) {
			publish_fail(op, res);
		} else if (++op->mkdir_level == 3) {
			go(op, PUB_LINK);
		} else {
			go(op, PUB_MKDIR);
		}
		return;
	case PUB_RENAME:
		if (res < 0)
			publish_fail(op, res);
		else
			finish(op, 0);
		return;
	case PUB_UNLINK:
		if (res < 0 && res != -ENOENT)
			COUNT(l3, io_errors, 1);
		finish(op, op->status);
		return;
	default:
		return;
	}
}

/* The temporary is closed: link it under its name, or, after a failed write, remove it. */
static void publish_closed(struct l3_op *op)
{
	if (op->status)
		go(op, PUB_UNLINK);
	else
		go(op, PUB_LINK);
}

static void publish_finished(struct l3_op *op)
{
	struct l3_publish *p = (struct l3_publish *)((char *)op - offsetof(struct l3_publish, op));
	struct l3 *l3 = op->l3;
	if (op->status == 0)
		COUNT(l3, published, 1);
	else if (op->status == -EEXIST)
		COUNT(l3, publish_present, 1);
	else
		COUNT(l3, publish_failed, 1);
	p->done(p, op->status);
}

static void tmp_name(struct l3 *l3, struct l3_op *op, const char *what)
{
	snprintf(op->tmp, sizeof(op->tmp), "%s/tmp/%s.%d.%s%" PRIu64, l3->root, l3->node,
		 (int)getpid(), what, l3->tmp_seq++);
}

/* The header is sealed (and signed): the temporary. */
static void publish_sealed(struct offload_job *job)
{
	go(op_of_job(job), PUB_OPEN);
}

int l3_publish_begin(struct l3 *l3, const struct kvt_ns *ns, const struct kvt_key *key,
		     uint16_t rank, const uint8_t *data, uint32_t length, struct l3_publish *p)
{
	if (l3->fault != L3_OK)
		return -EROFS;
	struct l3_op *op = &p->op;
	op_init(l3, op, L3_OP_PUBLISH, ns, key, rank);
	int err = !op->hdr ? -ENOMEM
			   : l3_part_path(op->path, sizeof(op->path), l3->root, ns->digest, key, rank);
	if (err) {
		header_free(op->hdr);
		op->hdr = NULL;
		l3->ops_active--;
		return err;
	}
	op->finished = publish_finished;
	op->data = (uint8_t *)data;
	op->length = length;
	tmp_name(l3, op, "");
	hash(op, seal_run, publish_sealed);
	return 0;
}

/* --- the probe --- */

static void probe_step(struct l3_op *op, int res)
{
	struct l3 *l3 = op->l3;
	switch ((enum step)op->step) {
	case PROBE_STATX: {
		const struct statx *st = (const struct statx *)op->hdr;
		if (res == -ETIMEDOUT)
			finish(op, res); /* the file system does not answer: hung, not gone */
		else if (res < 0 || makedev(st->stx_dev_major, st->stx_dev_minor) != l3->root_dev)
			finish(op, -ENODEV);
		else if (l3->fault == L3_OK)
			finish(op, 0); /* the mount is there; publishes tell the rest */
		else
			go(op, PROBE_OPEN);
		return;
	}
	case PROBE_OPEN:
		if (reopen_buffered(op, res))
			return;
		if (res < 0) {
			finish(op, res);
		} else {
			op->fd = res;
			op->status = 0;
			go(op, CLOSE);
		}
		return;
	case PROBE_UNLINK:
		finish(op, res < 0 && res != -ENOENT ? res : 0);
		return;
	default:
		return;
	}
}

static void probe_finished(struct l3_op *op)
{
	struct l3 *l3 = op->l3;
	if (op->status == 0)
		set_fault(l3, L3_OK, 0, l3->root);
	else if (op->status == -ENODEV)
		set_fault(l3, L3_FAULT_GONE, op->status, l3->root);
	else
		set_fault(l3, fault_of(op->status), op->status, op->tmp);
	l3->probing = false;
}

void l3_probe(struct l3 *l3)
{
	if (l3->probing)
		return;
	if (l3->fault != L3_OK)
		COUNT(l3, probes, 1);
	l3->probing = true;
	op_init(l3, &l3->probe, L3_OP_PROBE, NULL, NULL, 0);
	l3->probe.finished = probe_finished;
	if (!l3->probe.hdr) {
		finish(&l3->probe, -ENOMEM);
		return;
	}
	tmp_name(l3, &l3->probe, "probe");
	go(&l3->probe, PROBE_STATX);
}

/* --- completions --- */

static void closed(struct l3_op *op, int res)
{
	(void)res; /* a close error after a complete write: the link publishes what was written */
	op->fd = -1;
	if (op->kind == L3_OP_PUBLISH && op->step == CLOSE)
		publish_closed(op);
	else if (op->kind == L3_OP_PROBE)
		go(op, PROBE_UNLINK);
	else
		finish(op, op->status);
}

static void complete(struct l3 *l3, struct io_uring_cqe *cqe)
{
	struct l3_op *op = io_uring_cqe_get_data(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&l3->ring, cqe);
	if (!op)
		return; /* a linked timeout's own completion */
	l3->in_ring--;
	op->waiting_since_ms = 0;
	if (res == -ECANCELED) { /* only a linked timeout cancels */
		COUNT(l3, op_timeouts, 1);
		log_debug("l3: %s: no answer in time: cancelled", op->path[0] ? op->path : op->tmp);
		res = -ETIMEDOUT;
	}
	if (op->step == CLOSE)
		closed(op, res);
	else if (op->kind == L3_OP_READ)
		read_step(op, res);
	else if (op->kind == L3_OP_PUBLISH)
		publish_step(op, res);
	else
		probe_step(op, res);
}

void l3_process(struct l3 *l3)
{
	uint64_t ticks;
	if (read(l3->eventfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		log_warn("l3: eventfd: %s", strerror(errno));
	struct io_uring_cqe *cqe;
	while (io_uring_peek_cqe(&l3->ring, &cqe) == 0)
		complete(l3, cqe);
	submit_queued(l3);
}

void l3_submit(struct l3 *l3)
{
	submit_queued(l3);
}

int l3_event_fd(const struct l3 *l3)
{
	return l3->eventfd;
}

uint32_t l3_active(const struct l3 *l3)
{
	return l3->ops_active;
}

const char *l3_state(const struct l3 *l3)
{
	return l3->fault == L3_OK ? "ready" : "degraded";
}

const char *l3_fault_reason(const struct l3 *l3)
{
	return fault_reason[l3->fault];
}

/* --- open and close --- */

/* Removes tmp/NODE.PID.* of processes of this node that no longer run. */
static void remove_dead_temporaries(struct l3 *l3)
{
	char dir[L3_PATH_MAX], path[L3_PATH_MAX + 256];
	snprintf(dir, sizeof(dir), "%s/tmp", l3->root);
	DIR *d = opendir(dir);
	if (!d)
		return;
	size_t nlen = strlen(l3->node);
	uint64_t removed = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (strncmp(e->d_name, l3->node, nlen) || e->d_name[nlen] != '.')
			continue;
		long pid = strtol(e->d_name + nlen + 1, NULL, 10);
		if (pid > 0 && pid != getpid() && kill((pid_t)pid, 0) == 0)
			continue; /* a live kvtierd of this node (another runtime dir) */
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		removed += unlink(path) == 0;
	}
	closedir(d);
	if (removed)
		log_info("l3: removed %" PRIu64 " temporaries of dead publishers of node %s", removed,
			 l3->node);
}

const char *const l3_dirs[L3_NDIRS] = {"tmp", "quarantine", "v1"};

static int make_dirs(struct l3 *l3, char *why, size_t whylen)
{
	for (size_t i = 0; i < L3_NDIRS; i++)
		if (mkdirat(l3->root_fd, l3_dirs[i], 0755) && errno != EEXIST)
			return kvt_fail(why, whylen, -errno, "%s/%s: cannot create: %s", l3->root,
					l3_dirs[i], strerror(errno));
	/* The probe of writability: a file created and removed in tmp/. */
	char probe[L3_PATH_MAX + 64];
	snprintf(probe, sizeof(probe), "%s/tmp/%s.%d.start", l3->root, l3->node, (int)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return kvt_fail(why, whylen, -errno, "%s: not writable: %s", l3->root,
				strerror(errno));
	close(fd);
	unlink(probe);
	return 0;
}

static int open_root(struct l3 *l3, const struct l3_config *cfg, char *why, size_t whylen)
{
	if (strlen(cfg->path) >= sizeof(l3->root))
		return kvt_fail(why, whylen, -ENAMETOOLONG, "%s: path too long", cfg->path);
	snprintf(l3->root, sizeof(l3->root), "%s", cfg->path);
	if (cfg->node)
		snprintf(l3->node, sizeof(l3->node), "%s", cfg->node);
	else if (gethostname(l3->node, sizeof(l3->node) - 1))
		snprintf(l3->node, sizeof(l3->node), "node");
	for (char *c = l3->node; *c; c++)
		if (*c == '/' || *c == '.')
			*c = '_';
	struct stat st;
	if (stat(l3->root, &st))
		return kvt_fail(why, whylen, -errno, "%s: %s", l3->root, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return kvt_fail(why, whylen, -ENOTDIR, "%s: not a directory", l3->root);
	l3->root_dev = st.st_dev;
	l3->root_fd = open(l3->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (l3->root_fd < 0)
		return kvt_fail(why, whylen, -errno, "%s: %s", l3->root, strerror(errno));
	return make_dirs(l3, why, whylen);
}

static int open_ring(struct l3 *l3, char *why, size_t whylen)
{
	int err = io_uring_queue_init(l3->queue_depth * 2, &l3->ring, 0);
	if (err)
		return kvt_fail(why, whylen, err, "io_uring_setup: %s", strerror(-err));
	l3->ring_open = true;
	l3->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l3->eventfd < 0)
		return kvt_fail(why, whylen, -errno, "eventfd: %s", strerror(errno));
	if ((err = io_uring_register_eventfd(&l3->ring, l3->eventfd)))
		return kvt_fail(why, whylen, err, "io_uring_register_eventfd: %s", strerror(-err));
	return 0;
}

int l3_open(struct l3 *l3, const struct l3_config *cfg, char *why, size_t whylen)
{
	/* no_cancel: no linked timeouts, while op_timeout_ms still paces abandonment. */
	uint32_t link_ms = cfg->no_cancel ? 0 : cfg->op_timeout_ms;
	*l3 = (struct l3){.root_fd = -1, .eventfd = -1,
			  .queue_depth = cfg->queue_depth ? cfg->queue_depth : 64,
			  .op_timeout = {.tv_sec = link_ms / 1000,
					 .tv_nsec = (long long)(link_ms % 1000) * 1000000},
			  .op_timeout_ms = cfg->op_timeout_ms, .key = cfg->key};
	STAILQ_INIT(&l3->queued);
	LIST_INIT(&l3->reads);
	int err = open_root(l3, cfg, why, whylen);
	if (!err)
		err = open_ring(l3, why, whylen);
	if (err) {
		l3_close(l3);
		return err;
	}
	remove_dead_temporaries(l3);
	return 0;
}

void l3_close(struct l3 *l3)
{
	l3->offload = NULL; /* its owner closed it: what is left hashes here */
	while (l3->ring_open && l3->ops_active) {
		submit_queued(l3);
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&l3->ring, &cqe))
			break;
		complete(l3, cqe);
	}
	if (l3->ring_open)
		io_uring_queue_exit(&l3->ring);
	l3->ring_open = false;
	if (l3->eventfd >= 0)
		close(l3->eventfd);
	if (l3->root_fd >= 0)
		close(l3->root_fd);
	l3->eventfd = l3->root_fd = -1;
}

/* --- stats --- */

#define STAT_LIVE struct l3_stats
static const struct stat_def l3_stat_defs[] = {L3_STATS(STAT_DEF)};
#undef STAT_LIVE

void l3_stats_read(const struct l3 *l3, struct l3_stats_snapshot *s)
{
	stats_copy(&l3->stats, s, sizeof(*s));
}

void l3_stats_visit(const struct l3 *l3, stat_visit_fn fn, void *ctx)
{
	stats_visit(l3_stat_defs, sizeof(l3_stat_defs) / sizeof(l3_stat_defs[0]), &l3->stats, fn,
		    ctx);
}
