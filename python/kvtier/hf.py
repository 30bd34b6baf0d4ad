"""hf.py — prefix caching for Hugging Face transformers across processes: a
prompt's KV (a DynamicCache: per layer K and V of shape (1, kv_heads,
tokens, head_dim)) saved into kvtierd by chunks of tokens keyed by the token
prefix (kvt_key_chain), and the longest cached prefix restored into a fresh
cache. Imports torch (this is kvtier's torch helper); the cache is
duck-typed (`update(k, v, layer)`, and `layers[i].keys/.values` or
`key_cache`/`value_cache` to read), so no transformers import either.

The bytes move in libkvtier, not in Python: each (layer, K or V, head) row
of the cache is one "layer" of a kvt_kv_layout with one plane, a chunk of
tokens one block, so the pipeline's restore/gather kernels (GPU) or its host
copy move whole chunks. A restored cache's tensors are contiguous copies of
the store's restore area (copy=False: views of it, valid until the next
restore)."""

import torch

from .client import key_chain
from .layout import KVLayout
from .pipeline import Pipeline


def _layer_kv(cache, i):
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]


def rows_layout(kv, num_heads, head_dim, chunk_tokens):
    """The layout of per-layer (K, V) tensors of shape (1, heads, tokens, head_dim): a row per
    (layer, K|V, head), a block per chunk of tokens."""
    bases = []
    tokens = None
    for k, v in kv:
        for t in (k, v):
            if t.dim() != 4 or t.shape[0] != 1 or t.shape[1] != num_heads or \
                    t.shape[3] != head_dim or t.stride(3) != 1 or t.stride(2) != head_dim:
                raise ValueError(f"kvtier.hf: a cache tensor of shape {tuple(t.shape)} and "
                                 f"strides {t.stride()} is not (1, {num_heads}, tokens, "
                                 f"{head_dim}) with each head's tokens contiguous")
            tokens = t.shape[2] if tokens is None else min(tokens, t.shape[2])
            es = t.element_size()
            bases += [t.data_ptr() + h * t.stride(1) * es for h in range(num_heads)]
    es = kv[0][0].element_size()
    chunk = chunk_tokens * head_dim * es
    return KVLayout(len(bases), 1, chunk, 0, chunk, bases, tokens // chunk_tokens, chunk_tokens)


class PrefixStore:
    """Save and restore prompt prefixes of one model in kvtierd."""

    def __init__(self, socket_path, model_id, *, num_layers, num_kv_heads, head_dim, dtype,
                 device="cpu", chunk_tokens=128, max_tokens=32768, staging_chunks=16, depth=2,
                 cache_salt=None):
        self.socket, self.salt = socket_path, cache_salt
        self.L, self.H, self.D, self.C = num_layers, num_kv_heads, head_dim, chunk_tokens
        self.device = torch.device(device)
        self.gpu = self.device.type == "cuda"
        self.opts = dict(cache_salt=cache_salt, gpu=self.gpu, device=self.device.index or 0,
                         depth=depth, buffer_blocks=staging_chunks)
        shape = (1, num_kv_heads, max_tokens - max_tokens % chunk_tokens, head_dim)
        self.area = [(torch.empty(shape, dtype=dtype, device=self.device),
                      torch.empty(shape, dtype=dtype, device=self.device))
                     for _ in range(num_layers)]
        layout = rows_layout(self.area, num_kv_heads, head_dim, chunk_tokens)
        self.model = f"{model_id}#hf-L{num_layers}H{num_kv_heads}D{head_dim}{dtype}C{chunk_tokens}"
        self.loader = Pipeline(socket_path, self.model, layout, **self.opts)
        self.stats = {"saved_tokens": 0, "restored_tokens": 0, "failed_chunks": 0}

    def close(self):
        self.loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def save(self, tokens, cache):
        """Stores the whole chunks of tokens' KV from cache; returns the tokens stored."""
        keys = key_chain(list(tokens), self.C)
        if not keys:
            return 0
        kv = [_layer_kv(cache, i) for i in range(self.L)]
        layout = rows_layout(kv, self.H, self.D, self.C)
        n = min(len(keys), layout.num_blocks)
        self._sync()  # the forward pass that wrote the cache is done
        with Pipeline(self.socket, self.model, layout, **self.opts) as p:
            p.submit_store(1, keys[:n], list(range(n)))
            p.drain()
            (f,) = p.finished(load=False)
        stored = n - len(f.failed) if not f.failed else min(f.failed)
        self.stats["saved_tokens"] += stored * self.C
        return stored * self.C

    def cached_tokens(self, tokens):
        """Tokens of tokens' prefix kvtierd holds (whole chunks; a LOOKUP, no lease)."""
        keys = key_chain(list(tokens), self.C)
        return self.loader.client.lookup(keys).hits * self.C if keys else 0

    def restore(self, tokens, cache_cls, copy=True):
        """(a new cache_cls() holding the longest cached prefix of tokens, its length), or
        (None, 0). A chunk that fails to load (a miss, a checksum failure) ends the prefix.
        copy=False hands out views of the restore area (valid until the next restore)."""
        keys = key_chain(list(tokens), self.C)[:self.area[0][0].shape[2] // self.C]
        if not keys:
            return None, 0
        hits = self.loader.client.lookup(keys).hits
        if not hits:
            return None, 0
        self.loader.submit_load(1, keys[:hits], list(range(hits)))
        self.loader.drain()
        (f,) = self.loader.finished(load=True)
        good = min(f.failed) if f.failed else hits
        self.stats["failed_chunks"] += len(f.failed)
        if not good:
            return None, 0
        n = good * self.C
        cache = cache_cls()
        for i, (k, v) in enumerate(self.area):
            k, v = k[:, :, :n], v[:, :, :n]
            cache.update(k.clone() if copy else k, v.clone() if copy else v, i)
        self.stats["restored_tokens"] += n
        return cache, n
