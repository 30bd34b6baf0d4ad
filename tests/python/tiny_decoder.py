"""tiny_decoder.py — a small decoder-only transformer on CPU torch for the
end-to-end correctness test: grouped-query attention over a cache of
transformers' per-layer layout (1, kv_heads, tokens, head_dim), rotary
positions, greedy decoding; and MiniCache, a stand-in of DynamicCache's
interface (update, layers[i].keys/.values, get_seq_length)."""

import torch


class _Layer:
    def __init__(self):
        self.keys = self.values = None


class MiniCache:
    """What kvtier.hf and this model use of transformers' DynamicCache."""

    def __init__(self):
        self.layers = []

    def update(self, k, v, layer_idx):
        while len(self.layers) <= layer_idx:
            self.layers.append(_Layer())
        lay = self.layers[layer_idx]
        if lay.keys is None:
            lay.keys, lay.values = k, v
        else:
            lay.keys = torch.cat([lay.keys, k], dim=2)
            lay.values = torch.cat([lay.values, v], dim=2)
        return lay.keys, lay.values

    def get_seq_length(self):
        return 0 if not self.layers or self.layers[0].keys is None else self.layers[0].keys.shape[2]


def rope(x, pos):
    d = x.shape[-1] // 2
    inv = 1.0 / (10000 ** (torch.arange(d, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class TinyDecoder(torch.nn.Module):
    def __init__(self, vocab=101, hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.num_layers = layers

        def w(*shape):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.2)

        self.embed = w(vocab, hidden)
        self.wq = torch.nn.ParameterList([w(hidden, heads * head_dim) for _ in range(layers)])
        self.wk = torch.nn.ParameterList([w(hidden, kv_heads * head_dim) for _ in range(layers)])
        self.wv = torch.nn.ParameterList([w(hidden, kv_heads * head_dim) for _ in range(layers)])
        self.wo = torch.nn.ParameterList([w(heads * head_dim, hidden) for _ in range(layers)])
        self.w1 = torch.nn.ParameterList([w(hidden, 2 * hidden) for _ in range(layers)])
        self.w2 = torch.nn.ParameterList([w(2 * hidden, hidden) for _ in range(layers)])
        self.head = w(hidden, vocab)

    @torch.no_grad()
    def forward(self, ids, cache):
        """Logits (T, vocab) of the new tokens ids, appending their K and V to cache."""
        past = cache.get_seq_length()
        t = len(ids)
        pos = torch.arange(past, past + t)
        x = self.embed[torch.tensor(ids)]
        for i in range(self.num_layers):
            h = torch.nn.functional.layer_norm(x, x.shape[-1:])
            q = (h @ self.wq[i]).view(t, self.heads, self.head_dim).transpose(0, 1)
            k = (h @ self.wk[i]).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
            v = (h @ self.wv[i]).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
            q, k = rope(q, pos), rope(k, pos)
            k, v = cache.update(k[None].contiguous(), v[None].contiguous(), i)
            k = k[0].repeat_interleave(self.heads // self.kv_heads, dim=0)
            v = v[0].repeat_interleave(self.heads // self.kv_heads, dim=0)
            att = (q @ k.transpose(1, 2)) / self.head_dim ** 0.5
            mask = torch.ones(t, past + t, dtype=torch.bool).tril(past)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            o = (att @ v).transpose(0, 1).reshape(t, -1)
            x = x + o @ self.wo[i]
            h = torch.nn.functional.layer_norm(x, x.shape[-1:])
            x = x + torch.relu(h @ self.w1[i]) @ self.w2[i]
        return torch.nn.functional.layer_norm(x, x.shape[-1:]) @ self.head


def greedy(model, cache, first_ids, steps):
    """Feeds first_ids, then `steps` greedy tokens: (every step's last logits, tokens)."""
    logits = [model(first_ids, cache)[-1]]
    tokens = []
    for _ in range(steps):
        tok = int(logits[-1].argmax())
        tokens.append(tok)
        logits.append(model([tok], cache)[-1])
    return logits, tokens
