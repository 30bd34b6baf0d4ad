/* arena.c — see arena.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "arena.h"
#include "prefault.h"

struct arena_region {
	struct arena_class *cls;    /* NULL while free */
	SLIST_ENTRY(arena_region) free_link;  /* in the arena's free list */
	LIST_ENTRY(arena_region) partial_link;  /* or in its class's partial list */
	uint32_t nslots;
	uint32_t nfree;             /* entries on the free-slot stack */
	bool on_partial;
};

static uint32_t *region_stack(const struct arena *a, uint32_t r)
{
	return a->slot_stacks + (size_t)r * a->max_slots;
}

static void **region_owners(const struct arena *a, uint32_t r)
{
	return a->slot_owners + (size_t)r * a->max_slots;
}

static uint32_t region_idx(const struct arena *a, const struct arena_region *reg)
{
	return (uint32_t)(reg - a->regions);
}

static uint8_t *region_base(const struct arena *a, uint32_t r)
{
	return a->base + (uint64_t)r * a->region_size;
}

/* hugetlb mappings must be whole huge pages; 2 MiB is the x86-64 and arm64 default. */
#define ARENA_HUGEPAGE_SIZE (UINT64_C(2) << 20)

static void *map_arena(uint64_t size, bool hugepages, bool *got_hugetlb)
{
	*got_hugetlb = false;
	if (hugepages && size % ARENA_HUGEPAGE_SIZE == 0) {
		void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		if (p != MAP_FAILED) {
			*got_hugetlb = true;
			return p;
		}
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (hugepages)
		(void)madvise(p, size, MADV_HUGEPAGE); /* best effort: THP */
	/* Fault every page in now: the memory is really there, and no store
	 * pays a page fault on the copy path. */
	if (madvise(p, size, MADV_POPULATE_WRITE))
		memset(p, 0, size); /* kernels before 5.14 */
	prefault_touch(p, size);
	return p;
}

int arena_init(struct arena *a, uint64_t size, uint64_t region_size, bool hugepages)
{
	memset(a, 0, sizeof(*a));
	if (region_size < ARENA_SLOT_ALIGN || region_size % ARENA_SLOT_ALIGN != 0 ||
	    region_size / ARENA_SLOT_ALIGN > UINT32_MAX)
		return -EINVAL;
	uint64_t nregions = size / region_size;
	if (nregions == 0 || nregions > UINT32_MAX)
		return -EINVAL;
	a->region_size = region_size;
	a->nregions = (uint32_t)nregions;
	a->size = nregions * region_size;
	a->max_slots = (uint32_t)(region_size / ARENA_SLOT_ALIGN);

	a->regions = calloc(nregions, sizeof(*a->regions));
	a->slot_stacks = calloc(nregions * a->max_slots, sizeof(*a->slot_stacks));
	a->slot_owners = calloc(nregions * a->max_slots, sizeof(*a->slot_owners));
	if (!a->regions || !a->slot_stacks || !a->slot_owners)
		goto nomem;
	a->base = map_arena(a->size, hugepages, &a->hugepages);
	if (!a->base)
		goto nomem;
	for (uint32_t r = a->nregions; r-- > 0;)
		SLIST_INSERT_HEAD(&a->free_list, &a->regions[r], free_link);
	a->free_regions = a->nregions;
	return 0;
nomem:
	arena_destroy(a);
	return -ENOMEM;
}

void arena_destroy(struct arena *a)
{
	if (a->base)
		munmap(a->base, a->size);
	free(a->regions);
	free(a->slot_stacks);
	free(a->slot_owners);
	memset(a, 0, sizeof(*a));
}

struct arena_class *arena_class_get(struct arena *a, uint64_t bytes, int *err)
{
	uint64_t slot = arena_slot_size(bytes ? bytes : 1);
	if (slot > a->region_size) {
		*err = -E2BIG;
		return NULL;
	}
	for (unsigned i = 0; i < a->nclasses; i++)
		if (a->classes[i].slot_size == slot)
			return &a->classes[i];
	if (a->nclasses == ARENA_MAX_CLASSES) {
		*err = -ENOSPC;
		return NULL;
	}
	struct arena_class *c = &a->classes[a->nclasses++];
	c->slot_size = slot;
	return c;
}

static void partial_push(struct arena_class *c, struct arena_region *reg)
{
	LIST_INSERT_HEAD(&c->partial, reg, partial_link);
	reg->on_partial = true;
}

static void partial_remove(struct arena_region *reg)
{
	LIST_REMOVE(reg, partial_link);
	reg->on_partial = false;
}

/* Takes a free region for class c and fills its free-slot stack. */
static struct arena_region *region_assign(struct arena *a, struct arena_class *c)
{
	struct arena_region *reg = SLIST_FIRST(&a->free_list);
	if (!reg)
		return NULL;
	SLIST_REMOVE_HEAD(&a->free_list, free_link);
	a->free_regions--;
	reg->cls = c;
	reg->nslots = (uint32_t)(a->region_size / c->slot_size);
	reg->nfree = reg->nslots;
	uint32_t *stack = region_stack(a, region_idx(a, reg));
	/* Push in reverse so slots are handed out from the region's start. */
	for (uint32_t i = 0; i < reg->nslots; i++)
		stack[i] = reg->nslots - 1 - i;
	c->regions++;
	partial_push(c, reg);
	return reg;
}

static void region_release(struct arena *a, struct arena_region *reg)
{
	struct arena_class *c = reg->cls;
	if (reg->on_partial)
		partial_remove(reg);
	c->regions--;
	reg->cls = NULL;
	reg->nslots = reg->nfree = 0;
	SLIST_INSERT_HEAD(&a->free_list, reg, free_link);
	a->free_regions++;
}

bool arena_can_alloc(const struct arena *a, const struct arena_class *c)
{
	return !LIST_EMPTY(&c->partial) || !SLIST_EMPTY(&a->free_list);
}

void *arena_alloc(struct arena *a, struct arena_class *c, void *owner)
{
	struct arena_region *reg = LIST_FIRST(&c->partial);
	if (!reg && !(reg = region_assign(a, c)))
		return NULL;
	uint32_t r = region_idx(a, reg);
	uint32_t slot = region_stack(a, r)[--reg->nfree];
	if (reg->nfree == 0)
		partial_remove(reg);
	region_owners(a, r)[slot] = owner;
	a->used_bytes += c->slot_size;
	return region_base(a, r) + (uint64_t)slot * c->slot_size;
}

uint32_t arena_region_index(const struct arena *a, const void *slot)
{
	return (uint32_t)(((const uint8_t *)slot - a->base) / a->region_size);
}

void arena_free(struct arena *a, void *p)
{
	uint32_t r = arena_region_index(a, p);
	struct arena_region *reg = &a->regions[r];
	struct arena_class *c = reg->cls;
	uint32_t slot = (uint32_t)(((uint8_t *)p - region_base(a, r)) / c->slot_size);
	region_owners(a, r)[slot] = NULL;
	region_stack(a, r)[reg->nfree++] = slot;
	a->used_bytes -= c->slot_size;
	if (reg->nfree == reg->nslots)
		region_release(a, reg);
	else if (!reg->on_partial)
		partial_push(c, reg);
}

void *arena_region_owner(const struct arena *a, uint32_t r, uint32_t i, uint32_t *nslots)
{
	*nslots = a->regions[r].nslots;
	return i < a->regions[r].nslots ? region_owners(a, r)[i] : NULL;
}

bool arena_region_is_free(const struct arena *a, uint32_t r)
{
	return a->regions[r].cls == NULL;
}
