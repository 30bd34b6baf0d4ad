/*
 * lru.h — least recently used first: L1's eviction policy (evict_policy.h).
 * A doubly linked list, most recent at the head; track and touch put a node
 * at the head, candidates come from the tail.
 *
 * Owner: L1's owner thread.
 */
#ifndef KVTD_LRU_H
#define KVTD_LRU_H

#include "evict_policy.h"

extern const struct evict_policy_ops lru_policy;

#endif
