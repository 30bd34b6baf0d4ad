/* ns.c — see ns.h. A linear table: namespaces are few and found at HELLO only. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvtier/kvtier.h"
#include "ns.h"

void ns_registry_init(struct ns_registry *reg)
{
	memset(reg, 0, sizeof(*reg));
	reg->next_id = 1;
}

void ns_registry_destroy(struct ns_registry *reg)
{
	for (uint32_t i = 0; i < reg->count; i++)
		free(reg->ns[i]);
	reg->count = 0;
}

uint64_t ns_digest(const char *model, const char *salt, uint64_t block_bytes,
		   uint16_t tp_size)
{
	/* model and salt with their terminators, then the sizes, little-endian. */
	uint8_t buf[KVT_NS_MODEL_MAX + KVT_NS_SALT_MAX + 2 + 10];
	size_t n = 0, ml = strlen(model) + 1, sl = strlen(salt) + 1;
	memcpy(buf, model, ml);
	n += ml;
	memcpy(buf + n, salt, sl);
	n += sl;
	for (unsigned i = 0; i < 8; i++)
		buf[n++] = (uint8_t)(block_bytes >> (8 * i));
	buf[n++] = (uint8_t)tp_size;
	buf[n++] = (uint8_t)(tp_size >> 8);
	return XXH3_64bits(buf, n);
}

int ns_get(struct ns_registry *reg, const char *model, const char *salt,
	   uint64_t block_bytes, uint16_t tp_size, struct kvt_ns **out)
{
	if (!salt)
		salt = "";
	if (!model || !*model || strlen(model) > KVT_NS_MODEL_MAX ||
	    strlen(salt) > KVT_NS_SALT_MAX || block_bytes == 0 || tp_size == 0 ||
	    tp_size > KVT_TP_MAX)
		return -EINVAL;
	struct kvt_ns *found = ns_find(reg, model, salt);
	if (found) {
		if (found->block_bytes != block_bytes || found->tp_size != tp_size)
			return -KVT_ENSCONFLICT;
		*out = found;
		return 0;
	}
	if (reg->count == KVT_NS_MAX)
		return -ENOSPC;
	struct kvt_ns *ns = calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	ns->id = reg->next_id++;
	ns->block_bytes = block_bytes;
	ns->tp_size = tp_size;
	strcpy(ns->model, model);
	strcpy(ns->salt, salt);
	ns->digest = ns_digest(model, salt, block_bytes, tp_size);
	reg->ns[reg->count++] = ns;
	*out = ns;
	return 1;
}

struct kvt_ns *ns_find(const struct ns_registry *reg, const char *model, const char *salt)
{
	if (!salt)
		salt = "";
	for (uint32_t i = 0; i < reg->count; i++)
		if (strcmp(reg->ns[i]->model, model) == 0 && strcmp(reg->ns[i]->salt, salt) == 0)
			return reg->ns[i];
	return NULL;
}

struct kvt_ns *ns_find_id(const struct ns_registry *reg, uint32_t id)
{
	for (uint32_t i = 0; i < reg->count; i++)
		if (reg->ns[i]->id == id)
			return reg->ns[i];
	return NULL;
}

void ns_remove(struct ns_registry *reg, struct kvt_ns *ns)
{
	for (uint32_t i = 0; i < reg->count; i++) {
		if (reg->ns[i] == ns) {
			reg->ns[i] = reg->ns[--reg->count];
			free(ns);
			return;
		}
	}
}
