/*
 * buffers.h — the staging-buffer registry: buffers that clients register
 * once and then name by a small index on every STORE and LOAD.
 *
 * A buffer belongs to the client session that registered it; any other
 * session naming its index gets -EPERM. A registered shm buffer is a memfd
 * mapped shared and sealed against shrinking (so a client cannot truncate it
 * under a copy and fault the daemon). References keep the mapping alive while
 * copies run, so unregistering (or the owner dying) never unmaps under a copy.
 * Owned by the data-plane thread; the counts are readable from any thread.
 */
#ifndef KVTD_BUFFERS_H
#define KVTD_BUFFERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct stbuf {
	uint64_t session;       /* owner; 0 while the slot is free */
	uint32_t kind;
	uint32_t refs;          /* 1 while registered, plus one per copy in flight */
	bool registered;
	uint8_t *base;
	uint64_t size;
	uint64_t last_use_ms;
};

struct buffer_table {
	struct stbuf *slots;
	uint32_t cap;
	_Atomic uint64_t registered;      /* gauge */
	_Atomic uint64_t registered_bytes; /* gauge */
};

int buffers_init(struct buffer_table *t, uint32_t cap);
/* Unmaps everything, in use or not: only when no copy can run. */
void buffers_destroy(struct buffer_table *t);

/*
 * Maps fd (a memfd of at least size bytes) for session and seals it against
 * shrinking. Does not close fd. Returns the index, or -EINVAL (size 0, not a
 * sealable memfd, smaller than size), -ENOSPC (the session has
 * KVT_MAX_BUFFERS, or the table is full), or a mapping error.
 */
int buffers_register_shm(struct buffer_table *t, uint64_t session, int fd, uint64_t size);

/* The buffer index names for session: -ENOENT unknown, -EPERM another's. */
int buffers_get(struct buffer_table *t, uint64_t session, uint32_t index, struct stbuf **out);
void buffers_hold(struct stbuf *b);
void buffers_put(struct stbuf *b);

/* -ENOENT / -EPERM as buffers_get. */
int buffers_unregister(struct buffer_table *t, uint64_t session, uint32_t index);
/* Unregisters every buffer of session; returns how many. */
unsigned buffers_drop_session(struct buffer_table *t, uint64_t session);

#endif
