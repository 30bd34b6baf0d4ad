"""hf.py — prefix caching for Hugging Face transformers across processes: a
prompt's KV (per layer K and V of shape (1, kv_heads, tokens, head_dim), as
in a DynamicCache or a StaticCache) saved into kvtierd by chunks of tokens
keyed by the token prefix (kvt_key_chain), and the longest cached prefix
loaded back, to the token. Imports torch (this is kvtier's torch helper);
caches are duck-typed (`update(k, v, layer)`, and `layers[i].keys/.values`
or `key_cache`/`value_cache` to read), so no transformers import either.

The bytes move in libkvtier, not in Python: each (layer, K or V, head) row
of the store's area is one "layer" of a kvt_kv_layout with one plane, a
chunk of tokens one block, so the pipeline's restore/gather kernels (GPU) or
its host copy move whole chunks. The area is the store's own tensors, or the
caller's (a StaticCache's, so a load lands where the model reads it).

Keys: chunk i of a prompt is keyed by the chain over its whole chunks; a
partial last chunk of r tokens is keyed by key_chain_next(the last whole
chunk's key, its r tokens + [TAIL_MARK]) and stored as a whole chunk's
block, zero past r, so a prefix comes back to the token.

Layer groups (layer_groups=G > 1): a chunk is G blocks, one per group of
L/G consecutive layers, keyed key_chain_next(chunk key, [GROUP_MARK - g]),
and a load is G requests in group order, so a model can compute layer
group g's part of the next token while later groups' KV still arrives
(load's on_group). The pipeline has one layout for all of them: group 0's
rows, group g being the same rows at a fixed offset, which an area from
grouped_area() (one tensor ordered layer, K|V, head, token, dim) has."""

import torch

from .client import key_chain, key_chain_each, key_chain_next
from .layout import KVLayout
from .pipeline import Pipeline

TAIL_MARK = -1  # no token id is negative: a tail key never equals a whole chunk's
GROUP_MARK = -2  # layer group g's block of a chunk: key_chain_next(chunk key, [GROUP_MARK - g])


def prefix_keys(tokens, chunk_tokens):
    """The keys of tokens: one per whole chunk, then one for a partial last chunk."""
    tokens = list(tokens)
    keys = key_chain(tokens, chunk_tokens)
    tail = tokens[len(keys) * chunk_tokens:]
    if tail:
        keys.append(key_chain_next(keys[-1] if keys else None, tail + [TAIL_MARK]))
    return keys


def group_block_keys(chunk_keys, group, groups):
    """The keys of layer group group's blocks of chunks keyed chunk_keys (the chunks' own keys
    when groups is 1), in one call into libkvtier."""
    return list(chunk_keys) if groups == 1 else key_chain_each(chunk_keys, [GROUP_MARK - group])


def block_key(chunk_key, group, groups):
    """The key of layer group group's block of a chunk."""
    return group_block_keys([chunk_key], group, groups)[0]


def grouped_area(num_layers, num_kv_heads, tokens, head_dim, dtype, device="cpu"):
    """Per-layer (K, V) views, each (1, kv_heads, tokens, head_dim), of one zeroed tensor
    ordered (layer, K|V, head, token, dim): an area any layer_groups dividing num_layers takes."""
    t = torch.zeros((num_layers, 2, num_kv_heads, tokens, head_dim), dtype=dtype, device=device)
    return [(t[i, 0].unsqueeze(0), t[i, 1].unsqueeze(0)) for i in range(num_layers)]


def _group_offset(bases, groups, chunk):
    """Blocks between group g's rows and group g+1's: every row of group g must sit at group 0's
    row plus g times one offset, a whole number of chunks."""
    rows = len(bases) // groups
    stride = bases[rows] - bases[0] if groups > 1 else 0
    if stride <= 0 or stride % chunk or any(
            bases[g * rows + r] != bases[r] + g * stride for g in range(groups)
            for r in range(rows)):
        raise ValueError(f"kvtier.hf: the area's layers are not {groups} groups at one offset "
                         f"(make it with grouped_area)")
    return stride // chunk


def _layer_kv(cache, i):
    if isinstance(cache, (list, tuple)):
        return cache[i]
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]


def rows_layout(kv, num_heads, head_dim, chunk_tokens):
    """The layout of per-layer (K, V) tensors of shape (1, heads, tokens, head_dim): a row per
    (layer, K|V, head), a block per whole chunk of tokens."""
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
    """Save and load prompt prefixes of one model in kvtierd, through one area.

    area: per layer (K, V) tensors of shape (1, kv_heads, capacity, head_dim) that
    loads land in and saves leave from (a StaticCache's layers, say); None makes the
    store's own, of max_tokens rounded up to a chunk. Prefixes up to the area's whole
    chunks are kept."""

    def __init__(self, socket_path, model_id, *, num_layers, num_kv_heads, head_dim, dtype,
                 device="cpu", chunk_tokens=128, max_tokens=32768, staging_chunks=16, depth=2,
                 cache_salt=None, area=None, layer_groups=1):
        self.L, self.H, self.D, self.C = num_layers, num_kv_heads, head_dim, chunk_tokens
        self.G = layer_groups
        if layer_groups < 1 or num_layers % layer_groups:
            raise ValueError(f"kvtier.hf: {layer_groups} layer groups do not divide "
                             f"{num_layers} layers")
        self.device = torch.device(device)
        self.gpu = self.device.type == "cuda"
        if area is None:
            area = grouped_area(num_layers, num_kv_heads,
                                -(-max_tokens // chunk_tokens) * chunk_tokens, head_dim, dtype,
                                self.device)
        if len(area) != num_layers:
            raise ValueError(f"kvtier.hf: an area of {len(area)} layers for {num_layers}")
        self.area = area
        full = rows_layout(area, num_kv_heads, head_dim, chunk_tokens)
        self.blocks = full.num_blocks
        layout = full
        self.group_blocks = 0
        if layer_groups > 1:
            chunk = full.c.chunk_bytes
            bases = [full.c.layer_bases[i] for i in range(full.num_layers)]
            self.group_blocks = _group_offset(bases, layer_groups, chunk)
            layout = KVLayout(len(bases) // layer_groups, 1, chunk, 0, chunk,
                              bases[:len(bases) // layer_groups], self.blocks, chunk_tokens)
        self.model = f"{model_id}#hf-L{num_layers}H{num_kv_heads}D{head_dim}{dtype}C{chunk_tokens}"
        if layer_groups > 1:
            self.model += f"G{layer_groups}"
        self.pipeline = Pipeline(socket_path, self.model, layout, cache_salt=cache_salt,
                                 gpu=self.gpu, device=self.device.index or 0, depth=depth,
                                 buffer_blocks=staging_chunks)
        self._req = 0
        self.stats = {"saved_tokens": 0, "restored_tokens": 0, "failed_chunks": 0}

    @property
    def capacity(self):
        """The most tokens of a prefix the area holds."""
        return self.blocks * self.C

    def close(self):
        self.pipeline.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def _group_keys(self, keys):
        """Per layer group, the block keys of the chunks keyed keys."""
        return [group_block_keys(keys, g, self.G) for g in range(self.G)]

    def _transfer(self, load, group_keys, on_group=None):
        """Moves the chunks of group_keys (per group, as _group_keys gives) between kvtierd and
        the area's first chunks, one request per layer group in group order; the chunks that
        came through in every group before the first failure. on_group(g) runs as group g
        lands, in group order, while every group so far landed whole."""
        submit = self.pipeline.submit_load if load else self.pipeline.submit_store
        first = self._req + 1
        nkeys = len(group_keys[0])
        for g, keys in enumerate(group_keys):
            self._req += 1
            submit(self._req, keys, [g * self.group_blocks + c for c in range(nkeys)])
        landed, good, whole, next_g = {}, nkeys, True, 0
        while next_g < self.G:
            if next_g not in landed:
                self.pipeline.wait_finished(load)
                for f in self.pipeline.finished(load=load):
                    self.stats["failed_chunks"] += len(f.failed)
                    landed[f.req_id - first] = min(f.failed) if f.failed else nkeys
                continue
            good = min(good, landed[next_g])
            whole = whole and landed[next_g] == nkeys
            if whole and on_group:
                on_group(next_g)
            next_g += 1
        return good

    def save(self, tokens, cache):
        """Stores the KV of tokens, a partial last chunk included: the first len(tokens)
        positions of cache (a cache, or per-layer (K, V) pairs like the area), through the
        area; returns the tokens stored. A tail block holds zeros past its tokens, or,
        when cache is the area itself, what the area holds there."""
        tokens = list(tokens)[:self.capacity]
        keys = prefix_keys(tokens, self.C)
        if not keys:
            return 0
        n = len(tokens)
        for i, (ak, av) in enumerate(self.area):
            for dst, src in zip((ak, av), _layer_kv(cache, i)):
                if src.shape[2] < n:
                    raise ValueError(f"kvtier.hf: layer {i} holds {src.shape[2]} tokens, "
                                     f"fewer than the {n} to save")
                if src.data_ptr() != dst.data_ptr():
                    dst[:, :, :n].copy_(src[:, :, :n])
                    dst[:, :, n:len(keys) * self.C].zero_()  # a tail block past its tokens
        self._sync()  # the forward pass that wrote the cache, and the copies, are done
        good = self._transfer(False, self._group_keys(keys))
        stored = min(good * self.C, n)
        self.stats["saved_tokens"] += stored
        return stored

    def _keys(self, tokens):
        return prefix_keys(list(tokens)[:self.capacity], self.C)

    def _cached_chunks(self, group_keys):
        """Leading chunks kvtierd holds in every layer group (a LOOKUP, no lease)."""
        blocks = [k for chunk in zip(*group_keys) for k in chunk]
        return self.pipeline.client.lookup(blocks).hits // self.G if blocks else 0

    def cached_tokens(self, tokens):
        """Tokens of tokens' prefix kvtierd holds (a LOOKUP, no lease)."""
        tokens = list(tokens)
        return min(self._cached_chunks(self._group_keys(self._keys(tokens))) * self.C,
                   len(tokens))

    def load(self, tokens, on_group=None):
        """Loads the longest cached prefix of tokens into the area's first positions and
        returns its length (0: nothing cached). Whole chunks land: a tail chunk also writes
        the area's positions after the prefix up to the chunk's end. A chunk that fails to
        load (a miss, a checksum failure) ends the prefix: the caller computes the rest.
        on_group(g, n): layer group g's KV of the first n tokens (the LOOKUP's prefix) has
        landed; called in group order, and only while every group before g landed whole,
        so that a model may compute group g's layers at position n at once. When load
        returns less than that n, what was computed from it is to be thrown away."""
        tokens = list(tokens)
        group_keys = self._group_keys(self._keys(tokens))
        hits = self._cached_chunks(group_keys)
        if not hits:
            return 0
        planned = min(hits * self.C, len(tokens))
        cb = (lambda g: on_group(g, planned)) if on_group else None
        n = min(self._transfer(True, [keys[:hits] for keys in group_keys], cb) * self.C,
                len(tokens))
        self.stats["restored_tokens"] += n
        return n

    def restore(self, tokens, cache_cls, copy=True):
        """(a new cache_cls() holding the longest cached prefix of tokens, its length), or
        (None, 0). copy=False hands out views of the area (valid until the next load or save)."""
        n = self.load(tokens)
        if not n:
            return None, 0
        cache = cache_cls()
        for i, (k, v) in enumerate(self.area):
            k, v = k[:, :, :n], v[:, :, :n]
            cache.update(k.clone() if copy else k, v.clone() if copy else v, i)
        return cache, n
