/* l2ring.c — see l2ring.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "l2fmt.h"
#include "l2ring.h"
#include "log.h"
#include "owner_stats.h"

/* Retries of one read or write (-EAGAIN, short transfers) before it fails. */
#define L2RING_MAX_RETRIES 16

void l2ring_queue(struct l2_ring *r, struct l2_io *io)
{
	STAILQ_INSERT_TAIL(&r->queued, io, queue);
	STATS_SET(r->stats, ios_queued, ++r->nqueued);
}

/*
 * The registered buffer holding [p, p + len), or -1. A search: a handful of
 * buffers (the write buffers and L1's 1 GiB pieces) against I/Os of MiBs.
 */
static int fixed_index(const struct l2_ring *r, const uint8_t *p, uint64_t len)
{
	for (unsigned i = 0; i < r->nfixed; i++) {
		const uint8_t *base = r->fixed[i].iov_base;
		if (p >= base && p + len <= base + r->fixed[i].iov_len)
			return (int)i;
	}
	return -1;
}

static void prep(struct l2_ring *r, struct io_uring_sqe *sqe, struct l2_io *io)
{
	uint8_t *buf = io->buf + io->done;
	uint32_t len = io->len - io->done;
	uint64_t off = io->offset + io->done;
	int fd = r->fixed_file ? 0 : r->fd;
	int fixed = fixed_index(r, buf, len);
	if (io->write && fixed >= 0)
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, fixed);
	else if (io->write)
		io_uring_prep_write(sqe, fd, buf, len, off);
	else if (fixed >= 0)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, fixed);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	if (r->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, io);
}

void l2ring_submit(struct l2_ring *r)
{
	bool queued = false;
	while (!STAILQ_EMPTY(&r->queued) && r->inflight < r->depth) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
		if (!sqe)
			break;
		struct l2_io *io = STAILQ_FIRST(&r->queued);
		STAILQ_REMOVE_HEAD(&r->queued, queue);
		prep(r, sqe, io);
		r->nqueued--;
		r->inflight++;
		queued = true;
	}
	/* In flight first: a reader of queued, then in flight, never misses a moved I/O. */
	STATS_SET(r->stats, ios_inflight, r->inflight);
	atomic_thread_fence(memory_order_release);
	STATS_SET(r->stats, ios_queued, r->nqueued);
	/*
	 * -EBUSY / -EAGAIN: the kernel has completions to hand back first (CQ
	 * overflow) or no memory now; the SQEs stay in the ring and go with the
	 * next submit, after the next reap.
	 */
	if (queued || io_uring_sq_ready(&r->uring))
		io_uring_submit(&r->uring);
}

/* One completion: continue short transfers, retry -EAGAIN, else finish. */
static void handle(struct l2_ring *r, struct l2_io *io, int res)
{
	if (r->fault)
		res = r->fault(r->fault_ctx, io->write, io->len - io->done, res);
	if (res == -EAGAIN && io->retries < L2RING_MAX_RETRIES) {
		io->retries++;
		STATS_ADD(r->stats, eagain_retries, 1);
		l2ring_queue(r, io);
		return;
	}
	if (res < 0) {
		io->complete(io, res);
		return;
	}
	/* O_DIRECT moves whole blocks; a count short of one is redone from the last block. */
	io->done += (uint32_t)res & ~(L2FMT_BLOCK - 1);
	if (io->done >= io->len) {
		io->complete(io, 0);
		return;
	}
	if (res == 0 || io->retries >= L2RING_MAX_RETRIES) {
		io->complete(io, -EIO);
		return;
	}
	io->retries++;
	STATS_ADD(r->stats, short_ios, 1);
	l2ring_queue(r, io);
}

/* Takes one completion off the ring and handles it. */
static void complete_cqe(struct l2_ring *r, struct io_uring_cqe *cqe)
{
	struct l2_io *io = io_uring_cqe_get_data(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&r->uring, cqe);
	r->inflight--;
	handle(r, io, res);
}

/* Takes every completion the ring holds; returns how many. */
static unsigned reap(struct l2_ring *r)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;
	for (; io_uring_peek_cqe(&r->uring, &cqe) == 0; n++)
		complete_cqe(r, cqe);
	return n;
}

uint32_t l2ring_poll(struct l2_ring *r)
{
	/* Nothing in the ring while I/O is out: a completion may still wait as
	 * the kernel's task work for this thread; entering the kernel runs it. */
	if (!reap(r) && r->inflight) {
		io_uring_get_events(&r->uring);
		reap(r);
	}
	l2ring_submit(r);
	return r->inflight;
}

void l2ring_process(struct l2_ring *r)
{
	uint64_t ticks;
	if (read(r->eventfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		log_warn("l2: eventfd: %s", strerror(errno));
	reap(r);
	l2ring_submit(r);
}

int l2ring_event_fd(const struct l2_ring *r)
{
	return r->eventfd;
}

bool l2ring_idle(const struct l2_ring *r)
{
	return !r->inflight && STAILQ_EMPTY(&r->queued);
}

int l2ring_open(struct l2_ring *r, int fd, uint32_t depth, struct l2ring_stats *stats, char *why,
		size_t whylen)
{
	*r = (struct l2_ring){.fd = fd, .eventfd = -1, .depth = depth, .stats = stats};
	STAILQ_INIT(&r->queued);
	int err = io_uring_queue_init(depth, &r->uring, 0);
	if (err)
		return kvt_fail(why, whylen, err,
			    "io_uring_setup: %s (io_uring is blocked by a seccomp profile, "
			    "disabled by the kernel.io_uring_disabled sysctl, or the kernel is "
			    "older than 5.6); run without l2-path to use L1 only",
			    strerror(-err));
	r->open = true;
	r->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->eventfd < 0)
		return kvt_fail(why, whylen, -errno, "eventfd: %s", strerror(errno));
	if ((err = io_uring_register_eventfd(&r->uring, r->eventfd)))
		return kvt_fail(why, whylen, err, "io_uring_register_eventfd: %s", strerror(-err));
	r->fixed_file = io_uring_register_files(&r->uring, &r->fd, 1) == 0;
	return 0;
}

int l2ring_register(struct l2_ring *r, const struct iovec *bufs, unsigned n)
{
	struct iovec *copy = malloc(n * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, bufs, n * sizeof(*copy));
	int err = io_uring_register_buffers(&r->uring, copy, n);
	if (err) {
		free(copy);
		return err;
	}
	r->fixed = copy;
	r->nfixed = n;
	return 0;
}

void l2ring_close(struct l2_ring *r)
{
	if (r->open) {
		l2ring_submit(r);
		while (!l2ring_idle(r)) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&r->uring, &cqe) == 0)
				complete_cqe(r, cqe);
			l2ring_submit(r);
		}
		io_uring_queue_exit(&r->uring);
		r->open = false;
	}
	free(r->fixed);
	r->fixed = NULL;
	if (r->eventfd >= 0)
		close(r->eventfd);
	r->eventfd = -1;
}

#define STAT_LIVE struct l2ring_stats
static const struct stat_def l2ring_stat_defs[] = {L2RING_STATS(STAT_DEF)};
#undef STAT_LIVE

void l2ring_stats_visit(const struct l2ring_stats *stats, stat_visit_fn fn, void *ctx)
{
	stats_visit(l2ring_stat_defs, sizeof(l2ring_stat_defs) / sizeof(l2ring_stat_defs[0]), stats,
		    fn, ctx);
}
