/*
 * mem_tier.h — a lower tier kept in memory, for tests of the tier stack
 * (tiers.h): what a third tier needs, one file and one registration line
 * (docs/development.md, "How to add a tier"). Not shipped in the daemon.
 *
 * Owner: the test's thread.
 */
#ifndef KVT_MEM_TIER_H
#define KVT_MEM_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "tier.h"

#define MEM_TIER_PARTS 32
#define MEM_TIER_PART_BYTES 64

struct mem_part {
	uint64_t ns_digest;
	struct kvt_key key;
	uint16_t rank;
	uint32_t length;
	uint8_t bytes[MEM_TIER_PART_BYTES];
};

struct mem_tier {
	struct tier tier;
	bool readable;
	bool writable;             /* a victim tier taking writes (true until told not to) */
	struct mem_part parts[MEM_TIER_PARTS];
	unsigned nparts;
	unsigned offered;          /* parts the stored op was offered */
	unsigned flushed, closed;  /* the order they ran in, from 1 (a shared clock) */
	unsigned *clock;
	struct stat_def def;       /* one stat of its own: parts held */
	_Atomic uint64_t held;
};

/*
 * A memory tier named name, answering as wire; a victim tier (its victims
 * op set, taking nothing) when victims. Readable until told not to be.
 */
void mem_tier_init(struct mem_tier *m, const char *name, uint8_t wire, bool victims,
		   unsigned *clock);
/* Holds rank's part of (ns, key): length bytes (at most MEM_TIER_PART_BYTES). */
void mem_tier_put(struct mem_tier *m, const struct kvt_ns *ns, const struct kvt_key *key,
		  uint16_t rank, const uint8_t *bytes, uint32_t length);

#endif
