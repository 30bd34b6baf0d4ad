/*
 * model_geometry.h — the model geometry the GPU and pipeline benchmarks
 * share: its command-line options (defaults: Qwen3-8B in bf16, 8192-token
 * requests of 128-token blocks) and the sizes that follow from it.
 */
#ifndef KVT_MODEL_GEOMETRY_H
#define KVT_MODEL_GEOMETRY_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct model_geometry {
	unsigned layers, kv_heads, head_dim, dtype_bytes, block_tokens, tokens;
};

#define MODEL_GEOMETRY_DEFAULTS {.layers = 36, .kv_heads = 8, .head_dim = 128, \
				 .dtype_bytes = 2, .block_tokens = 128, .tokens = 8192}
/* getopt_long entries; their short codes are the cases model_geometry_option takes. */
#define MODEL_GEOMETRY_OPTIONS                                                   \
	{"layers", 1, 0, 'L'}, {"kv-heads", 1, 0, 'H'}, {"head-dim", 1, 0, 'D'}, \
	{"dtype-bytes", 1, 0, 'B'}, {"block-tokens", 1, 0, 'b'}, {"tokens", 1, 0, 't'}
#define MODEL_GEOMETRY_USAGE \
	"[--layers 36] [--kv-heads 8] [--head-dim 128] [--dtype-bytes 2]\n" \
	"       [--block-tokens 128] [--tokens 8192]"

/* Takes option c with arg when it is a geometry option; false otherwise. */
static inline bool model_geometry_option(struct model_geometry *g, int c, const char *arg)
{
	unsigned v = arg ? (unsigned)strtoul(arg, NULL, 10) : 0;
	switch (c) {
	case 'L': g->layers = v; return true;
	case 'H': g->kv_heads = v; return true;
	case 'D': g->head_dim = v; return true;
	case 'B': g->dtype_bytes = v; return true;
	case 'b': g->block_tokens = v; return true;
	case 't': g->tokens = v; return true;
	}
	return false;
}

static inline bool model_geometry_valid(const struct model_geometry *g)
{
	return g->layers && g->kv_heads && g->head_dim && g->dtype_bytes && g->block_tokens &&
	       g->tokens >= g->block_tokens;
}

/* One (layer, K or V) slice of a block: block_tokens x kv_heads x head_dim x dtype. */
static inline uint64_t model_chunk_bytes(const struct model_geometry *g)
{
	return (uint64_t)g->block_tokens * g->kv_heads * g->head_dim * g->dtype_bytes;
}

static inline uint64_t model_block_bytes(const struct model_geometry *g)
{
	return model_chunk_bytes(g) * 2 * g->layers;
}

static inline uint32_t model_blocks_per_request(const struct model_geometry *g)
{
	return g->tokens / g->block_tokens;
}

#endif
