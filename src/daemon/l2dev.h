/*
 * l2dev.h — opens the file or block device that holds L2: creates and sizes
 * a regular file, reads a device's size, and checks that O_DIRECT works
 * there with the 4 KiB blocks of the L2 format (statx STATX_DIOALIGN where
 * the kernel reports it, else the device's logical block size).
 */
#ifndef KVTD_L2DEV_H
#define KVTD_L2DEV_H

#include <stddef.h>
#include <stdint.h>

struct l2dev {
	int fd;                 /* O_RDWR | O_DIRECT */
	uint64_t size;          /* bytes L2 may use */
	uint32_t mem_align;     /* O_DIRECT alignment of memory, of offsets */
	uint32_t offset_align;
};

/*
 * size 0 takes the size of an existing file or device. 0 or -errno with the
 * reason in why; the fd is closed on failure.
 */
int l2dev_open(const char *path, uint64_t size, struct l2dev *dev, char *why, size_t whylen);

#endif
