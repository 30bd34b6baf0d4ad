/*
 * l2ring.h — L2's io_uring: the reads and writes of one O_DIRECT file, each
 * of whole 4 KiB blocks, queued in order while the ring is full, continued
 * when the kernel moves fewer bytes than asked, retried on -EAGAIN, and
 * finished through each I/O's complete callback; the file and the memory
 * registered with the ring (fixed I/O where a buffer lies inside one); an
 * eventfd that turns readable when completions wait. It knows nothing of
 * regions, items or the L2 format (l2.c).
 *
 * Owner: the L2 engine's, one thread at a time (l2_open's, then the owner
 * thread's from l2_start on), every call. Its counters (L2RING_STATS) live
 * where its owner keeps them (in struct l2_stats, for L2), readable from
 * any thread.
 */
#ifndef KVTD_L2RING_H
#define KVTD_L2RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include "stat_table.h"

/* The ring's counters and gauges (stat_table.h's shape), part of L2's. */
#define L2RING_STATS(X) \
	X(short_ios, COUNTER, "kvtier_l2_retries_total", "reason=\"short\"", \
	  "Reads and writes continued, by reason: short.") \
	X(eagain_retries, COUNTER, "kvtier_l2_retries_total", "reason=\"eagain\"", \
	  "Reads or writes retried after -EAGAIN.") \
	X(ios_queued, GAUGE, "kvtier_l2_ios_queued", "", \
	  "L2 reads and writes waiting to be submitted (ring full, or until the loop's next round).") \
	X(ios_inflight, GAUGE, "kvtier_l2_ios_inflight", "", "L2 reads and writes submitted, not completed.")

struct l2ring_stats {
	L2RING_STATS(STAT_LIVE_FIELD)
};

/* Calls fn with each stat of L2RING_STATS in stats and its value now (any thread). */
void l2ring_stats_visit(const struct l2ring_stats *stats, stat_visit_fn fn, void *ctx);

/* The kernel's limit on one registered buffer. */
#define L2RING_MAX_BUFFER (UINT64_C(1) << 30)

/* One read or write on the ring, embedded in its caller's request. */
struct l2_io {
	struct l2 *l2;            /* the engine it is for (may be NULL): the ring does not look at it */
	/* Called once, on the owner thread: 0 when every byte moved, else -errno. */
	void (*complete)(struct l2_io *io, int res);
	STAILQ_ENTRY(l2_io) queue;    /* waiting for room on the ring */
	uint8_t *buf;
	uint64_t offset;          /* in the file */
	uint32_t len;             /* aligned bytes wanted */
	uint32_t done;            /* bytes transferred so far */
	uint32_t retries;
	bool write;
};

/*
 * Fault injection for tests: called with each completion's result before the
 * ring sees it; returns the result to use (an error, a shorter count).
 */
typedef int (*l2_fault_fn)(void *ctx, bool write, uint32_t wanted, int res);

struct l2_ring {
	struct io_uring uring;
	bool open;
	int fd;                   /* the file, not owned */
	int eventfd;
	bool fixed_file;
	uint32_t depth;           /* at most this many I/Os submitted at once */
	uint32_t inflight;
	uint32_t nqueued;
	STAILQ_HEAD(, l2_io) queued;  /* waiting for room on the ring */
	struct iovec *fixed;      /* the registered buffers, in their index order */
	unsigned nfixed;
	l2_fault_fn fault;
	void *fault_ctx;
	struct l2ring_stats *stats;
};

/*
 * Sets up a ring of depth entries for fd, with its eventfd, and registers
 * fd (fixed file where the kernel allows). 0 or -errno with the reason in
 * why (io_uring blocked or missing, no eventfd). l2ring_close undoes a
 * failed open too.
 */
int l2ring_open(struct l2_ring *r, int fd, uint32_t depth, struct l2ring_stats *stats, char *why,
		size_t whylen);
/*
 * Registers n buffers (each at most 1 GiB, the kernel's limit); I/O inside
 * one of them is then fixed I/O. 0, or -errno (memlock limit, say) with
 * nothing registered: I/O still works, unregistered.
 */
int l2ring_register(struct l2_ring *r, const struct iovec *bufs, unsigned n);
/* Waits for every queued and in-flight I/O to complete, then frees the ring. */
void l2ring_close(struct l2_ring *r);

/* Queues io: its buf, offset, len, write, complete and l2 set, done and retries 0. */
void l2ring_queue(struct l2_ring *r, struct l2_io *io);
/* Hands queued I/O to the kernel, as much as the depth allows. */
void l2ring_submit(struct l2_ring *r);
/* Readable when completions wait: call l2ring_process. */
int l2ring_event_fd(const struct l2_ring *r);
/* Clears the eventfd, completes what has finished, submits what is queued. */
void l2ring_process(struct l2_ring *r);
/*
 * Completes what has finished without waiting for the eventfd (when nothing
 * has while I/O is out, after entering the kernel to run what it holds for
 * this thread), then submits; returns the I/O still in flight.
 */
uint32_t l2ring_poll(struct l2_ring *r);
/* Nothing queued and nothing in flight. */
bool l2ring_idle(const struct l2_ring *r);

#endif
