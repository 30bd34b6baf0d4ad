/* l2dev.c — see l2dev.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/stat.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "l2dev.h"
#include "l2fmt.h"

/* statx by syscall: glibc's struct statx may predate the DIO alignment fields. */
static int statx_fd(int fd, unsigned mask, struct statx *stx)
{
	return syscall(SYS_statx, fd, "", AT_EMPTY_PATH, mask, stx) ? -errno : 0;
}

static int size_file(int fd, const struct statx *stx, uint64_t *size, const char *path,
		     char *why, size_t whylen)
{
	if (*size == 0) {
		if (stx->stx_size == 0) {
			snprintf(why, whylen, "l2-path %s: a new file needs l2-size", path);
			return -EINVAL;
		}
		*size = stx->stx_size;
		return 0;
	}
	if (stx->stx_size >= *size)
		return 0;
	/* Grown from here on: a failure undoes it (l2dev_undo). */
	int err = posix_fallocate(fd, 0, (off_t)*size);
	if (err == EOPNOTSUPP || err == EINVAL)
		err = ftruncate(fd, (off_t)*size) ? errno : 0;
	if (err) {
		snprintf(why, whylen, "l2-path %s: cannot grow to %" PRIu64 " bytes: %s", path,
			 *size, strerror(err));
		return -err;
	}
	return 0;
}

static int size_device(int fd, uint64_t *size, const char *path, char *why, size_t whylen)
{
	uint64_t dev_size;
	if (ioctl(fd, BLKGETSIZE64, &dev_size)) {
		snprintf(why, whylen, "l2-path %s: cannot read the device size: %s", path,
			 strerror(errno));
		return -errno;
	}
	if (*size > dev_size) {
		snprintf(why, whylen, "l2-size %" PRIu64 " is larger than the device %s (%" PRIu64
			 " bytes)", *size, path, dev_size);
		return -EINVAL;
	}
	if (*size == 0)
		*size = dev_size;
	return 0;
}

static int check_alignment(int fd, bool device, struct l2dev *dev, const char *path, char *why,
			   size_t whylen)
{
	struct statx stx;
	int sector = 512;
	if (statx_fd(fd, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
	    stx.stx_dio_offset_align) {
		dev->mem_align = stx.stx_dio_mem_align;
		dev->offset_align = stx.stx_dio_offset_align;
	} else {
		if (device && ioctl(fd, BLKSSZGET, &sector))
			sector = 4096;
		dev->mem_align = dev->offset_align = (uint32_t)sector;
	}
	if (dev->mem_align > L2FMT_BLOCK || dev->offset_align > L2FMT_BLOCK) {
		snprintf(why, whylen, "l2-path %s: O_DIRECT there needs %u-byte alignment; kvtier "
			 "writes %u-byte blocks", path, dev->offset_align, L2FMT_BLOCK);
		return -EINVAL;
	}
	return 0;
}

void l2dev_undo(const char *path, const struct l2dev *dev)
{
	if (dev->created)
		unlink(path);
	else if (dev->fd >= 0 && dev->old_size < dev->size)
		(void)!ftruncate(dev->fd, (off_t)dev->old_size);
}

/* What is at path before it is opened: nothing, a regular file or a block device. */
static int check_type(const char *path, bool *exists, char *why, size_t whylen)
{
	struct stat st;
	*exists = stat(path, &st) == 0;
	if (!*exists && errno != ENOENT) {
		int err = -errno;
		snprintf(why, whylen, "l2-path %s: %s", path, strerror(errno));
		return err;
	}
	if (*exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		snprintf(why, whylen, "l2-path %s: is a %s, not a regular file or a block device",
			 path, S_ISDIR(st.st_mode) ? "directory" : S_ISCHR(st.st_mode) ?
			 "character device" : "special file");
		return -EINVAL;
	}
	return 0;
}

static bool on_memory_fs(int fd)
{
	struct statfs sf;
	return fstatfs(fd, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
}

int l2dev_open(const char *path, uint64_t size, struct l2dev *dev, char *why, size_t whylen)
{
	*dev = (struct l2dev){.fd = -1, .size = size};
	bool exists;
	int err = check_type(path, &exists, why, whylen);
	if (err)
		return err;
	int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "l2-path %s: %s%s", path, strerror(errno),
			 errno == EINVAL ? " (the file system does not support O_DIRECT)" : "");
		if (!exists)
			unlink(path); /* O_CREAT may have made it before O_DIRECT was refused */
		return err;
	}
	dev->created = !exists;
	dev->fd = fd;
	struct statx stx;
	err = statx_fd(fd, STATX_TYPE | STATX_SIZE, &stx);
	dev->old_size = err ? 0 : stx.stx_size;
	dev->in_memory = on_memory_fs(fd);
	if (err) {
		snprintf(why, whylen, "l2-path %s: statx: %s", path, strerror(-err));
	} else if ((stx.stx_mode & S_IFMT) == S_IFBLK) {
		err = size_device(fd, &dev->size, path, why, whylen);
	} else if ((stx.stx_mode & S_IFMT) == S_IFREG) {
		err = size_file(fd, &stx, &dev->size, path, why, whylen);
	} else {
		snprintf(why, whylen, "l2-path %s: not a regular file or a block device", path);
		err = -EINVAL;
	}
	if (!err)
		err = check_alignment(fd, (stx.stx_mode & S_IFMT) == S_IFBLK, dev, path, why, whylen);
	if (err) {
		l2dev_undo(path, dev);
		close(fd);
		dev->fd = -1;
		return err;
	}
	return 0;
}
