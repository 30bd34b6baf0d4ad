/*
 * l2dev.h — opens the file or block device that holds L2: creates and sizes
 * a regular file, reads a device's size, and checks that O_DIRECT works
 * there with the 4 KiB blocks of the L2 format (statx STATX_DIOALIGN where
 * the kernel reports it, else the device's logical block size).
 */
#ifndef KVTD_L2DEV_H
#define KVTD_L2DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct l2dev {
	int fd;                 /* O_RDWR | O_DIRECT */
	uint64_t size;          /* bytes L2 may use */
	uint32_t mem_align;     /* O_DIRECT alignment of memory, of offsets */
	uint32_t offset_align;
	bool created;           /* this open made the file */
	uint64_t old_size;      /* a regular file's size before this open grew it */
	bool in_memory;         /* on tmpfs or ramfs: O_DIRECT works, but "L2" is RAM */
};

/*
 * size 0 takes the size of an existing file or device. 0 or -errno with the
 * reason in why; on failure the fd is closed and what the open did to the
 * file undone (a file it created is removed, one it grew is cut back).
 */
int l2dev_open(const char *path, uint64_t size, struct l2dev *dev, char *why, size_t whylen);

/*
 * Undoes what l2dev_open did to path, for a start that fails after it:
 * removes a file it created, cuts one it grew back to its old size. Does not
 * close dev->fd.
 */
void l2dev_undo(const char *path, const struct l2dev *dev);

#endif
