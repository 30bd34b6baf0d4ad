/*
 * prefault.h — fault a mapping in before the copy path uses it.
 *
 * The kernel populates the page tables (MADV_POPULATE_WRITE, or MAP_POPULATE
 * at mmap); then one write per page from user space, an atomic add of zero,
 * which changes no byte even while another process writes the same page. On
 * bare metal that costs next to nothing; under a hypervisor that shadows
 * guest page tables (as on our CI machines) it is what makes the first copy
 * into a page run at memcpy speed instead of ~30x slower (docs/benchmarks.md).
 */
#ifndef KVTD_PREFAULT_H
#define KVTD_PREFAULT_H

#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

static inline void prefault_touch(void *p, size_t len)
{
	uint8_t *b = p;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < len; off += page)
		__atomic_fetch_add(&b[off], 0, __ATOMIC_RELAXED);
}

#endif
