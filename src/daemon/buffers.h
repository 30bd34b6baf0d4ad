/*
 * buffers.h — the staging-buffer registry: buffers that clients register
 * once and then name by a small index on every STORE and LOAD.
 *
 * A buffer belongs to a client session: the one that registered it over the
 * data plane, or the one the control plane names by its secret. The control
 * plane may instead name a process id (where kvtierd sees its clients' pids:
 * no PID namespace between them); any other client naming its index gets
 * -EPERM. A memfd registered over
 * the data plane is sealed against shrinking; a /dev/shm file registered by
 * path cannot be, so copies run under the copy engine's SIGBUS guard (copy.h).
 * References keep the mapping alive while copies run, so unregistering (or the
 * owner dying) never unmaps under a copy.
 * Owned by the data-plane thread; the counts are readable from any thread.
 */
#ifndef KVTD_BUFFERS_H
#define KVTD_BUFFERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu.h"
#include "kvtier/protocol.h"

struct stbuf {
	uint64_t session;       /* owning client session; 0 when owned by pid */
	pid_t pid;              /* owning process, for buffers registered by path */
	uid_t uid;              /* its client's uid; BUFFER_NO_UID: the admin's (by pid) */
	uint32_t kind;          /* KVT_BUFFER_* */
	struct gpu_mem gpu;     /* GPU kinds: the mapping, closed with the slot */
	uint32_t refs;          /* 1 while registered, plus one per copy in flight; 0: free */
	bool registered;
	uint8_t *base;          /* host address, or device address (unified) */
	uint64_t size;
	uint64_t last_use_ms;
};

/* The CUDA device of a GPU buffer; -1 for shm. */
static inline int stbuf_device(const struct stbuf *b)
{
	return b->kind == KVT_BUFFER_SHM ? -1 : b->gpu.device;
}

/* Buffer kinds are KVT_BUFFER_SHM .. KVT_BUFFER_CUDA_IPC; index 0 is unused. */
#define BUFFER_KINDS (KVT_BUFFER_CUDA_IPC + 1)

/* The uid of buffers the control plane registered for a pid: no uid's limits count them. */
#define BUFFER_NO_UID ((uid_t)-1)

/* What one uid's clients may hold (SO_PEERCRED's uid: right across PID namespaces). */
struct buffer_limits {
	uint32_t per_uid;           /* buffers */
	uint64_t max_size;          /* bytes of one shm buffer */
	uint64_t bytes_per_uid;     /* bytes of shm buffers */
};

struct buffer_table {
	struct stbuf *slots;
	uint32_t cap;
	struct buffer_limits limits;  /* no limit until set */
	_Atomic uint64_t kind_registered[BUFFER_KINDS];  /* gauges, by kind */
	_Atomic uint64_t kind_bytes[BUFFER_KINDS];
};

/* "shm", "cuda_vmm", "cuda_ipc" (the names of the control plane and metrics). */
const char *buffers_kind_name(uint32_t kind);

int buffers_init(struct buffer_table *t, uint32_t cap);
/* Unmaps everything, in use or not: only when no copy can run. */
void buffers_destroy(struct buffer_table *t);

/* Who is asking, or who owns: a client session (its id) and its uid, else a process id. */
struct buffer_user {
	uint64_t session;
	pid_t pid;
	uid_t uid;                  /* BUFFER_NO_UID for a pid's buffer */
};

/* A buffer to register, as REGISTER (data plane) or POST /v1/buffers (control plane) names it. */
struct buffer_spec {
	uint32_t kind;              /* KVT_BUFFER_* */
	uint64_t size;
	int fd;                     /* shm over the data plane: a memfd; cuda_vmm: its handle; else -1 */
	const char *path;           /* shm by path (control plane): a file directly under /dev/shm */
	uint8_t device_uuid[KVT_UUID_BYTES];      /* GPU kinds */
	uint8_t ipc_handle[KVT_IPC_HANDLE_BYTES]; /* cuda_ipc */
	uint64_t offset;                          /* cuda_ipc: into the allocation */
};

/*
 * The one registration path, for every kind, for owner (a session over the
 * data plane, a pid through the control plane). shm by fd: a sealable memfd
 * of at least size bytes, sealed against shrinking here (fd stays the
 * caller's); shm by path: a regular file directly under /dev/shm, no
 * symlink; cuda_vmm: the fd imported on the device; cuda_ipc: the handle
 * opened. Returns the index, or -EBADF (no fd where one is needed), -EINVAL
 * (size 0, not a sealable memfd or a file under /dev/shm, smaller than
 * size, a handle that does not open), -ENOENT, -ENODEV (no such GPU),
 * -KVT_ENOCUDA, -ENOSPC (the session has KVT_MAX_BUFFERS, or the table is
 * full), -EFBIG (an shm buffer over limits.max_size), -EDQUOT (the owner's
 * uid at limits.per_uid buffers or limits.bytes_per_uid shm bytes),
 * -EOPNOTSUPP (unknown kind), or a mapping error. Nothing of the client's
 * memory is touched here: the copies fault its pages in, under the SIGBUS
 * guard (copy.h).
 */
int buffers_register(struct buffer_table *t, const struct buffer_user *owner,
		     const struct buffer_spec *spec);

/* The buffer index names for user: -ENOENT unknown, -EPERM another's. */
int buffers_get(struct buffer_table *t, const struct buffer_user *user, uint32_t index,
		struct stbuf **out);
void buffers_hold(struct stbuf *b);
void buffers_put(struct stbuf *b);

/* -ENOENT / -EPERM as buffers_get. */
int buffers_unregister(struct buffer_table *t, const struct buffer_user *user, uint32_t index);
/* Unregisters index whoever owns it (the control plane): -ENOENT when none. */
int buffers_unregister_any(struct buffer_table *t, uint32_t index);
/* Unregisters every buffer of session; returns how many. */
unsigned buffers_drop_session(struct buffer_table *t, uint64_t session);

#endif
