/* buffers.c — see buffers.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffers.h"
#include "owner_stats.h"
#include "kvtier/protocol.h"


const char *buffers_kind_name(uint32_t kind)
{
	switch (kind) {
	case KVT_BUFFER_SHM:
		return "shm";
	case KVT_BUFFER_CUDA_VMM:
		return "cuda_vmm";
	case KVT_BUFFER_CUDA_IPC:
		return "cuda_ipc";
	}
	return "unknown";
}

int buffers_init(struct buffer_table *t, uint32_t cap)
{
	memset(t, 0, sizeof(*t));
	t->limits = (struct buffer_limits){UINT32_MAX, UINT64_MAX, UINT64_MAX};
	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots)
		return -ENOMEM;
	t->cap = cap;
	return 0;
}

static void slot_free(struct stbuf *b)
{
	if (b->kind == KVT_BUFFER_SHM)
		munmap(b->base, b->size);
	else
		gpu_close(&b->gpu);
	memset(b, 0, sizeof(*b));
}

void buffers_destroy(struct buffer_table *t)
{
	for (uint32_t i = 0; i < t->cap; i++)
		if (t->slots[i].refs)
			slot_free(&t->slots[i]);
	free(t->slots);
	t->slots = NULL;
}

/* A seal against shrinking makes the mapping safe from the client's ftruncate. */
static int seal_against_shrink(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EINVAL; /* not a memfd (or a file system without seals) */
	if (seals & F_SEAL_SHRINK)
		return 0;
	return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) ? -EINVAL : 0;
}

/*
 * A free slot for a buffer of owner of size bytes (shm: host memory), within
 * the session's KVT_MAX_BUFFERS and its uid's limits.
 */
static int free_slot_for(const struct buffer_table *t, const struct buffer_user *owner,
			 uint32_t kind, uint64_t size, uint32_t *slot)
{
	bool host = kind == KVT_BUFFER_SHM, uid_limited = owner->uid != BUFFER_NO_UID;
	if (host && size > t->limits.max_size)
		return -EFBIG;
	uint32_t owned = 0, uid_count = 0;
	uint64_t uid_bytes = 0;
	*slot = t->cap;
	for (uint32_t i = 0; i < t->cap; i++) {
		const struct stbuf *b = &t->slots[i];
		if (!b->refs && *slot == t->cap)
			*slot = i;
		if (!b->registered)
			continue;
		owned += owner->session && b->session == owner->session;
		if (uid_limited && b->uid == owner->uid) {
			uid_count++;
			uid_bytes += b->kind == KVT_BUFFER_SHM ? b->size : 0;
		}
	}
	if (uid_limited && (uid_count >= t->limits.per_uid ||
			    (host && size > t->limits.bytes_per_uid - uid_bytes)))
		return -EDQUOT;
	return owned >= KVT_MAX_BUFFERS || *slot == t->cap ? -ENOSPC : 0;
}

static int fill_slot(struct buffer_table *t, uint32_t slot, const struct stbuf *b)
{
	t->slots[slot] = *b;
	t->slots[slot].refs = 1;
	t->slots[slot].registered = true;
	STATS_ADD(t, kind_registered[b->kind], 1);
	STATS_ADD(t, kind_bytes[b->kind], b->size);
	return (int)slot;
}

/*
 * Maps fd and fills the slot; the caller has checked the file. Nothing is
 * faulted in here: a client's (perhaps sparse) memory would be charged to
 * the daemon, on the loop, for as long as that takes. The copy threads fault
 * in what they touch, under the SIGBUS guard.
 */
static int map_into(struct buffer_table *t, uint32_t slot, int fd, uint64_t size,
		    const struct buffer_user *owner)
{
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	return fill_slot(t, slot, &(struct stbuf){.session = owner->session,
						  .pid = owner->session ? 0 : owner->pid,
						  .uid = owner->uid, .kind = KVT_BUFFER_SHM,
						  .base = base, .size = size});
}

static int register_gpu_mapped(struct buffer_table *t, const struct buffer_user *owner,
			       const struct gpu_mem *m)
{
	uint32_t slot;
	int err = free_slot_for(t, owner, m->kind, m->size, &slot);
	if (err)
		return err;
	return fill_slot(t, slot, &(struct stbuf){.session = owner->session, .pid = owner->pid,
						  .uid = owner->uid, .kind = m->kind, .gpu = *m,
						  .base = m->ptr, .size = m->size});
}

static bool big_enough(int fd, uint64_t size)
{
	struct stat st;
	return size > 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (uint64_t)st.st_size >= size;
}

static int register_memfd(struct buffer_table *t, const struct buffer_user *owner, int fd,
			  uint64_t size)
{
	uint32_t slot;
	/* Sealed first, then measured: a client cannot shrink it between the two. */
	int err = seal_against_shrink(fd);
	if (!err && !big_enough(fd, size))
		err = -EINVAL;
	if (!err)
		err = free_slot_for(t, owner, KVT_BUFFER_SHM, size, &slot);
	return err ? err : map_into(t, slot, fd, size, owner);
}

static int register_path(struct buffer_table *t, const struct buffer_user *owner,
			 const char *path, uint64_t size)
{
	static const char dir[] = "/dev/shm/";
	if ((!owner->session && owner->pid <= 0) || strncmp(path, dir, sizeof(dir) - 1) != 0 ||
	    strchr(path + sizeof(dir) - 1, '/') || path[sizeof(dir) - 1] == '\0' ||
	    strcmp(path + sizeof(dir) - 1, "..") == 0 || strcmp(path + sizeof(dir) - 1, ".") == 0)
		return -EINVAL;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ELOOP ? -EINVAL : -errno;
	uint32_t slot;
	int err = big_enough(fd, size) ? free_slot_for(t, owner, KVT_BUFFER_SHM, size, &slot)
				       : -EINVAL;
	if (!err)
		err = map_into(t, slot, fd, size, owner);
	close(fd);
	return err;
}

/* Maps the GPU memory spec names (importing a VMM handle, or opening an IPC handle). */
static int register_gpu(struct buffer_table *t, const struct buffer_user *owner,
			const struct buffer_spec *spec)
{
	struct gpu_mem m;
	int err = spec->kind == KVT_BUFFER_CUDA_VMM
			  ? gpu_import_vmm(spec->fd, spec->device_uuid, spec->size, &m)
			  : gpu_open_ipc(spec->device_uuid, spec->ipc_handle, spec->offset, spec->size,
					 &m);
	if (err)
		return err;
	int index = register_gpu_mapped(t, owner, &m);
	if (index < 0)
		gpu_close(&m);
	return index;
}

int buffers_register(struct buffer_table *t, const struct buffer_user *owner,
		     const struct buffer_spec *spec)
{
	switch (spec->kind) {
	case KVT_BUFFER_SHM:
		if (spec->path)
			return register_path(t, owner, spec->path, spec->size);
		return spec->fd < 0 ? -EBADF : register_memfd(t, owner, spec->fd, spec->size);
	case KVT_BUFFER_CUDA_VMM:
		if (spec->fd < 0)
			return -EBADF;
		return register_gpu(t, owner, spec);
	case KVT_BUFFER_CUDA_IPC:
		return register_gpu(t, owner, spec);
	default:
		return -EOPNOTSUPP;
	}
}

int buffers_get(struct buffer_table *t, const struct buffer_user *user, uint32_t index,
		struct stbuf **out)
{
	if (index >= t->cap || !t->slots[index].registered)
		return -ENOENT;
	const struct stbuf *b = &t->slots[index];
	bool mine = b->session ? b->session == user->session : b->pid == user->pid;
	if (!mine)
		return -EPERM;
	*out = &t->slots[index];
	return 0;
}

void buffers_hold(struct stbuf *b)
{
	b->refs++;
}

void buffers_put(struct stbuf *b)
{
	if (--b->refs == 0)
		slot_free(b);
}

static void unregister_slot(struct buffer_table *t, struct stbuf *b)
{
	b->registered = false;
	STATS_ADD(t, kind_registered[b->kind], -(uint64_t)1);
	STATS_ADD(t, kind_bytes[b->kind], -b->size);
	buffers_put(b);
}

int buffers_unregister(struct buffer_table *t, const struct buffer_user *user, uint32_t index)
{
	struct stbuf *b;
	int err = buffers_get(t, user, index, &b);
	if (!err)
		unregister_slot(t, b);
	return err;
}

int buffers_unregister_any(struct buffer_table *t, uint32_t index)
{
	if (index >= t->cap || !t->slots[index].registered)
		return -ENOENT;
	unregister_slot(t, &t->slots[index]);
	return 0;
}

unsigned buffers_drop_session(struct buffer_table *t, uint64_t session)
{
	unsigned n = 0;
	for (uint32_t i = 0; i < t->cap; i++) {
		if (session && t->slots[i].session == session && t->slots[i].registered) {
			unregister_slot(t, &t->slots[i]);
			n++;
		}
	}
	return n;
}
