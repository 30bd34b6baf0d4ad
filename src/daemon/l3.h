/*
 * l3.h — the L3 tier engine: one file per block part in a directory that the
 * kvtierd of many nodes share on a distributed POSIX file system
 * (docs/l3.md). The file system is the distributed engine; this engine
 * names, publishes, reads and verifies files, and knows nothing of L1, of
 * clients or of the other nodes.
 *
 *   ROOT/v1/NSDIGEST/AA/BB/KEY.RANK   a published part (AA, BB: the key's first bytes)
 *   ROOT/tmp/NODE.PID.SEQ             a publish in progress
 *   ROOT/quarantine/...               files that failed verification
 *
 * A file is an L2 record header block (l2fmt.h: namespace digest, key, rank,
 * length, XXH3-64 of the data) and the data padded to 4 KiB, so it can be
 * read and written with O_DIRECT (used where the file system takes it,
 * buffered I/O otherwise). A publish writes a temporary and links it to its
 * final name (link fails on a name that exists, so a node never rewrites a
 * file another published; a file system without hard links gets rename),
 * then unlinks the temporary: a reader never sees half a file.
 *
 * Every operation, metadata included (open, link, mkdir, rename, unlink),
 * goes through one io_uring, so a slow metadata server never blocks the
 * owner, and each step but a close carries a linked timeout (op_timeout_ms):
 * one that hangs past it is cancelled and fails with -ETIMEDOUT (a read is
 * then a miss, a publish or the probe degrades L3 as "hung"). A read whose
 * step the kernel will not let go (a hard NFS mount refuses the cancel) is
 * abandoned by l3_abandon_stuck: its caller answers without it and keeps its
 * memory until done comes, whenever the kernel returns. The XXH3-64
 * of a part (a publish's, a read's check) runs on an offload thread when
 * the owner gives one (l3->offload, reaped by the owner, who then calls
 * l3_submit). Owner: one thread (the event loop) for
 * every call but l3_stats_read, which any thread may call.
 */
#ifndef KVTD_L3_H
#define KVTD_L3_H

#include <liburing.h>
#include <stdatomic.h>
#include <sys/queue.h>
#include <stdbool.h>
#include <stdint.h>
#include <linux/openat2.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "kvtier/kvtier.h"
#include "l2fmt.h"
#include "l3mac.h"
#include "offload.h"
#include "ns.h"
#include "stat_table.h"

#define L3_STATS(X) \
	X(reads, COUNTER, "kvtier_l3_reads_total", "result=\"hit\"", \
	  "Part reads of L3, by result: hit (read and verified).") \
	X(read_misses, COUNTER, "kvtier_l3_reads_total", "result=\"miss\"", \
	  "Part reads of L3 that found no file (never published, or removed under the read).") \
	X(read_failures, COUNTER, "kvtier_l3_reads_total", "result=\"failed\"", \
	  "Part reads of L3 that failed: an I/O error, or a file that failed verification.") \
	X(bytes_read, COUNTER, "kvtier_loaded_bytes_total", "tier=\"l3\"", "Data bytes read from L3.") \
	X(checksum_failures, COUNTER, "kvtier_l3_checksum_failures_total", "", \
	  "L3 files whose header or data failed verification, or were truncated (each a miss).") \
	X(quarantined, COUNTER, "kvtier_l3_quarantined_total", "", \
	  "Files that failed verification moved into quarantine/ (never served again).") \
	X(published, COUNTER, "kvtier_l3_publishes_total", "result=\"published\"", \
	  "Parts offered to L3, by result: published (a new file).") \
	X(publish_present, COUNTER, "kvtier_l3_publishes_total", "result=\"present\"", \
	  "Parts offered to L3 that were there already (this or another node published them).") \
	X(publish_failed, COUNTER, "kvtier_l3_publishes_total", "result=\"failed\"", \
	  "Parts offered to L3 that failed to publish (I/O error, full, read-only).") \
	X(bytes_written, COUNTER, "kvtier_stored_bytes_total", "tier=\"l3\"", \
	  "Bytes written to L3 files, headers and padding included (and those of parts then found present).") \
	X(io_errors, COUNTER, "kvtier_l3_io_errors_total", "", \
	  "L3 operations that failed for another reason than a missing file.") \
	X(op_timeouts, COUNTER, "kvtier_l3_op_timeouts_total", "", \
	  "L3 file operations cancelled after l3-op-timeout-ms: a read fails (a miss), a publish or probe degrades L3 as hung.") \
	X(reads_abandoned, COUNTER, "kvtier_l3_reads_abandoned_total", "", \
	  "L3 reads whose step the kernel held past l3-op-timeout-ms and a grace second, its cancel refused (a hard NFS mount): answered as misses without them.") \
	X(reads_held, GAUGE, "kvtier_l3_reads_held", "", \
	  "Abandoned L3 reads the kernel still holds, each keeping its file open and its target memory (an L1 slot or a bounce buffer) until it returns.") \
	X(probes, COUNTER, "kvtier_l3_probes_total", "", \
	  "Probes of a degraded L3 (the mount's device, a file created and removed).") \
	X(unsigned_parts, COUNTER, "kvtier_l3_signature_failures_total", "reason=\"unsigned\"", \
	  "With l3-key-file: parts read that carry no signature (a miss, left in place: a node without the key wrote them).") \
	X(bad_signatures, COUNTER, "kvtier_l3_signature_failures_total", "reason=\"bad\"", \
	  "With l3-key-file: parts read whose signature does not verify (forged or corrupt: quarantined, a miss).") \
	X(degraded, GAUGE, "kvtier_l3_degraded", "", \
	  "1 while L3 is degraded (read-only, full, gone, failing): publishes stop, a probe retries.")

struct l3_stats {
	L3_STATS(STAT_LIVE_FIELD)
};

struct l3_stats_snapshot {
	L3_STATS(STAT_SNAP_FIELD)
};

/* Why L3 is degraded (l3_state_reason). */
enum l3_fault {
	L3_OK,
	L3_FAULT_READ_ONLY,   /* EROFS, EACCES, EPERM on a create */
	L3_FAULT_FULL,        /* ENOSPC, EDQUOT */
	L3_FAULT_GONE,        /* the root's device changed (unmounted), or the root vanished */
	L3_FAULT_IO,          /* EIO, ESTALE, ENOTCONN, and other errors */
	L3_FAULT_HUNG,        /* an operation ran past op_timeout_ms (ETIMEDOUT) */
};

#define L3_PATH_MAX 512

struct l3;
struct l3_op;

enum l3_op_kind { L3_OP_READ, L3_OP_PUBLISH, L3_OP_PROBE };

/* One read or publish in flight: embed it in the caller's object (l3_read, l3_publish). */
struct l3_op {
	struct l3 *l3;
	enum l3_op_kind kind;
	int step;                    /* l3.c's state machine */
	int fd;
	bool direct;                 /* opened with O_DIRECT */
	int status;                  /* the outcome, once the file is closed */
	uint32_t length;             /* data bytes */
	uint32_t cap;                /* read: room at data */
	uint8_t *data;
	uint8_t *hdr;                /* one aligned L2FMT_BLOCK, from begin to finish */
	uint64_t checksum;           /* read: the header's data checksum */
	int verdict;                 /* read: 0 verified, -EBADMSG bad (quarantine), -ENOENT unsigned */
	bool signed_part;            /* read: its header has L2FMT_RECORD_MAC (header_check) */
	struct offload_job job;      /* the checksum, on l3->offload's thread when there is one */
	struct iovec iov[2];         /* publish: header and data, one write */
	unsigned mkdir_level;        /* publish: parents being made */
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank, tp_size;
	char path[L3_PATH_MAX];
	char tmp[L3_PATH_MAX];
	char dir[L3_PATH_MAX];       /* publish: the parent being made (read by the kernel at submit) */
	struct open_how how;         /* read: how its open resolves (read by the kernel at submit) */
	STAILQ_ENTRY(l3_op) queue;   /* waiting for a submission slot */
	LIST_ENTRY(l3_op) read_link; /* a read, from begin to done (l3->reads) */
	uint64_t waiting_since_ms;   /* read: its step's submission (queued or in the ring),
					until it completes; 0 otherwise (CLOCK_MONOTONIC) */
	bool abandoned;              /* read: answered without it (l3_abandon_stuck) */
	void (*finished)(struct l3_op *op);
};

/*
 * A read of one part. target(rd, length) runs once the header is verified:
 * it returns where the length data bytes go (4 KiB aligned, room for length
 * rounded up to 4 KiB) or NULL to stop; done(rd, status) runs last, with 0
 * (the bytes are in place and verified), -ENOENT (no such file, or target
 * gave NULL), -EBADMSG (failed verification: quarantined), -ERANGE (longer
 * than cap) or another -errno. abandoned(rd), when set, runs when
 * l3_abandon_stuck gives the read up (target does not run after it): the
 * caller answers without it but keeps rd and the target memory until done,
 * which then comes with -ETIMEDOUT.
 */
struct l3_read {
	uint8_t *(*target)(struct l3_read *rd, uint32_t length);
	void (*abandoned)(struct l3_read *rd);
	void (*done)(struct l3_read *rd, int status);
	struct l3_op op;
};

/* A publish: done(p, status) with 0 (published), -EEXIST (present) or -errno. */
struct l3_publish {
	void (*done)(struct l3_publish *p, int status);
	struct l3_op op;
};

struct l3_config {
	const char *path;            /* the shared directory */
	uint32_t queue_depth;        /* io_uring entries */
	const char *node;            /* names this node's temporaries (NULL: the host name) */
	uint32_t op_timeout_ms;      /* an operation's step is cancelled past it; 0: never */
	bool no_cancel;              /* tests: no linked timeouts, as where the kernel refuses
					the cancel (l3_abandon_stuck still counts op_timeout_ms) */
	const struct l3mac_key *key; /* signs publishes, and only signed parts are served;
					NULL: none (outlives the l3) */
};

struct l3 {
	int root_fd;                 /* O_PATH of the root, for the probe */
	dev_t root_dev;              /* the device the root is on at start */
	char root[L3_PATH_MAX - 128];
	char node[64];
	struct io_uring ring;
	bool ring_open;
	int eventfd;
	uint32_t in_ring;            /* operations' SQEs submitted, not completed (their
					linked timeouts not counted: the ring has room for both) */
	uint32_t queue_depth;
	struct __kernel_timespec op_timeout; /* of the linked timeouts; zero: none */
	uint32_t op_timeout_ms;      /* the config's, for l3_abandon_stuck */
	LIST_HEAD(, l3_op) reads;    /* reads begun, not done: for l3_abandon_stuck */
	STAILQ_HEAD(, l3_op) queued;
	uint64_t tmp_seq;
	uint32_t ops_active;
	_Atomic enum l3_fault fault; /* written by the owner; read by the control plane */
	struct l3_op probe;
	bool probing;
	struct offload *offload;     /* checksums run there (NULL: on the owner); its owner reaps */
	const struct l3mac_key *key; /* the config's */
	struct l3_stats stats;
};

/*
 * Opens the root: it must be a directory this process can create files in
 * (a probe file is made and removed), and tmp/, quarantine/ and v1/ are made
 * there when missing; this node's temporaries left by a dead process
 * (NODE.PID.* of a PID that no longer runs) are removed. 0, or -errno with
 * the reason in why ("not a directory", "not writable: Read-only file
 * system", ...).
 */
int l3_open(struct l3 *l3, const struct l3_config *cfg, char *why, size_t whylen);
/* Waits for every operation in flight, then frees the ring. */
void l3_close(struct l3 *l3);

/* Readable when completions are waiting: then call l3_process. */
int l3_event_fd(const struct l3 *l3);
/* Runs completions (callbacks included) and submits what they queued. */
void l3_process(struct l3 *l3);
/* Submits what begin calls queued (after each round of the owner's loop). */
void l3_submit(struct l3 *l3);
/* Operations in flight. */
uint32_t l3_active(const struct l3 *l3);

/* Starts reading (ns, key, rank): 0, and done runs later from l3_process; or -ENOMEM. */
int l3_read_begin(struct l3 *l3, const struct kvt_ns *ns, const struct kvt_key *key,
		   uint16_t rank, uint32_t cap, struct l3_read *rd);
/*
 * Starts publishing length bytes of data (valid, and zero from length to the
 * next 4 KiB, until done) as (ns, key, rank); its done always runs, from
 * l3_process. -EROFS at once while L3 is degraded (done does not run then).
 */
int l3_publish_begin(struct l3 *l3, const struct kvt_ns *ns, const struct kvt_key *key,
		     uint16_t rank, const uint8_t *data, uint32_t length, struct l3_publish *p);

/*
 * Gives up the reads whose step has waited op_timeout_ms and
 * L3_ABANDON_GRACE_MS more at now_ms (kvt_now_ms, clock.h), in the kernel (their
 * linked timeout fired and the kernel did not let go) or for room in a ring
 * such reads fill. Each runs its abandoned callback once (reads without one
 * wait). Nothing with op_timeout_ms 0. Returns how many.
 * Once a second (l3svc).
 */
#define L3_ABANDON_GRACE_MS 1000
unsigned l3_abandon_stuck(struct l3 *l3, uint64_t now_ms);

/*
 * Checks the root is still the device it was at start (a statx: an unmounted
 * file system shows another); while degraded, also makes and removes a file
 * in tmp/, which clears the fault when it works. Once a second (l3svc).
 */
void l3_probe(struct l3 *l3);

/* "ready" or "degraded"; the reason ("read-only", "full", "gone", "I/O errors") or NULL. */
const char *l3_state(const struct l3 *l3);
const char *l3_fault_reason(const struct l3 *l3);

/* L3's own directories under the root: temporaries, quarantined files, parts. */
#define L3_NDIRS 3
extern const char *const l3_dirs[L3_NDIRS];

/* The path of (ns digest, key, rank)'s file under root (l3_name_parse reads it back). */
int l3_part_path(char *buf, size_t len, const char *root, uint64_t ns_digest,
		 const struct kvt_key *key, uint16_t rank);
/* Reads "KEY.RANK" (a leaf file's name, as l3_part_path spells it: lowercase hex, a
 * decimal rank without leading zeros); 0 or -EINVAL for anything else. */
int l3_name_parse(const char *name, struct kvt_key *key, uint16_t *rank);

void l3_stats_read(const struct l3 *l3, struct l3_stats_snapshot *s);
void l3_stats_visit(const struct l3 *l3, stat_visit_fn fn, void *ctx);

#endif
