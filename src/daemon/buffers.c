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
#include "sigbus.h"


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
	sigbus_guard_install(); /* fault_in touches client pages under it */
	memset(t, 0, sizeof(*t));
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

/* A free slot, if session (when not 0) is under its buffer limit. */
static int free_slot_for(const struct buffer_table *t, uint64_t session, uint32_t *slot)
{
	uint32_t owned = 0;
	*slot = t->cap;
	for (uint32_t i = 0; i < t->cap; i++) {
		if (session && t->slots[i].session == session && t->slots[i].registered)
			owned++;
		else if (!t->slots[i].refs && *slot == t->cap)
			*slot = i;
	}
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
 * Faults a client's mapping in: registration is once, faults on the copy
 * path are every time. The file may shrink meanwhile (a path buffer cannot
 * be sealed): the kernel's populate then fails with EFAULT, and the touch
 * runs under the SIGBUS guard, so the registration fails, never the daemon.
 */
static int fault_in(void *base, uint64_t size)
{
	if (madvise(base, size, MADV_POPULATE_WRITE) && errno == EFAULT)
		return -EINVAL; /* shrank under the populate (other errors: an older kernel) */
	return sigbus_guarded_touch(base, size) ? -EINVAL : 0;
}

/* Maps fd and fills the slot; the caller has checked the file. */
static int map_into(struct buffer_table *t, uint32_t slot, int fd, uint64_t size,
		    uint64_t session, pid_t pid)
{
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	int err = fault_in(base, size);
	if (err) {
		munmap(base, size);
		return err;
	}
	return fill_slot(t, slot, &(struct stbuf){.session = session, .pid = pid,
						  .kind = KVT_BUFFER_SHM, .base = base,
						  .size = size});
}

static int register_gpu_mapped(struct buffer_table *t, uint64_t session, pid_t pid,
			       const struct gpu_mem *m)
{
	uint32_t slot;
	int err = free_slot_for(t, session, &slot);
	if (err)
		return err;
	return fill_slot(t, slot, &(struct stbuf){.session = session, .pid = pid,
						  .kind = m->kind, .gpu = *m, .base = m->ptr,
						  .size = m->size});
}

static bool big_enough(int fd, uint64_t size)
{
	struct stat st;
	return size > 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (uint64_t)st.st_size >= size;
}

static int register_memfd(struct buffer_table *t, uint64_t session, int fd, uint64_t size)
{
	uint32_t slot;
	/* Sealed first, then measured: a client cannot shrink it between the two. */
	int err = seal_against_shrink(fd);
	if (!err && !big_enough(fd, size))
		err = -EINVAL;
	if (!err)
		err = free_slot_for(t, session, &slot);
	return err ? err : map_into(t, slot, fd, size, session, 0);
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
	int err = big_enough(fd, size) ? free_slot_for(t, owner->session, &slot) : -EINVAL;
	if (!err)
		err = map_into(t, slot, fd, size, owner->session, owner->session ? 0 : owner->pid);
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
	int index = register_gpu_mapped(t, owner->session, owner->pid, &m);
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
		return spec->fd < 0 ? -EBADF : register_memfd(t, owner->session, spec->fd, spec->size);
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
