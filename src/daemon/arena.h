/*
 * arena.h — the L1 DRAM arena: one mapping made at start, cut into regions,
 * each region cut into equal slots of one size class.
 *
 * Owns the memory and the slot bookkeeping, nothing about keys or items:
 * alloc and free are O(1); a region that becomes empty goes back to the free
 * pool at once, so memory moves between size classes as the mix changes. Each
 * slot records an opaque owner pointer so the caller can reclaim a region.
 * Not thread-safe: one owner thread.
 */
#ifndef KVTD_ARENA_H
#define KVTD_ARENA_H

#include <sys/queue.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARENA_SLOT_ALIGN 4096u
#define ARENA_MAX_CLASSES 64

struct arena_region;

struct arena_class {
	uint64_t slot_size;
	uint32_t regions;              /* regions currently assigned */
	LIST_HEAD(, arena_region) partial;  /* regions of this class with a free slot */
};

struct arena {
	uint8_t *base;
	uint64_t size;           /* bytes usable: nregions * region_size */
	uint64_t region_size;
	uint32_t nregions;
	uint32_t free_regions;
	uint64_t used_bytes;     /* sum of slot sizes handed out */
	bool hugepages;          /* the mapping is backed by hugetlb pages */
	struct arena_region *regions;
	SLIST_HEAD(, arena_region) free_list;
	uint32_t *slot_stacks;   /* per region, the free-slot stack */
	void **slot_owners;      /* per region, the owner of each slot */
	uint32_t max_slots;      /* slots of the smallest class in one region */
	struct arena_class classes[ARENA_MAX_CLASSES];
	unsigned nclasses;
};

/*
 * Maps size bytes (rounded down to whole regions). With hugepages, tries
 * MAP_HUGETLB and falls back to transparent hugepages (a->hugepages tells
 * which). Returns 0, -EINVAL (sizes), -ENOMEM.
 */
int arena_init(struct arena *a, uint64_t size, uint64_t region_size, bool hugepages);
void arena_destroy(struct arena *a);

/* Rounds bytes up to the slot alignment. */
static inline uint64_t arena_slot_size(uint64_t bytes)
{
	return (bytes + ARENA_SLOT_ALIGN - 1) & ~(uint64_t)(ARENA_SLOT_ALIGN - 1);
}

/*
 * The class for objects of bytes (rounded up to ARENA_SLOT_ALIGN). Returns
 * NULL with *err = -E2BIG when a slot would not fit in a region, -ENOSPC
 * when ARENA_MAX_CLASSES are in use.
 */
struct arena_class *arena_class_get(struct arena *a, uint64_t bytes, int *err);

/* A slot of class c owned by owner, or NULL when no slot or free region is left. */
void *arena_alloc(struct arena *a, struct arena_class *c, void *owner);
void arena_free(struct arena *a, void *slot);

/* True when a slot of c can be had without eviction. */
bool arena_can_alloc(const struct arena *a, const struct arena_class *c);

/* Region bookkeeping for reclaim: the region index of a slot, and its owners. */
uint32_t arena_region_index(const struct arena *a, const void *slot);
/* Owner of slot i of region r (NULL when free); *nslots gets the slot count. */
void *arena_region_owner(const struct arena *a, uint32_t r, uint32_t i, uint32_t *nslots);
bool arena_region_is_free(const struct arena *a, uint32_t r);

#endif
