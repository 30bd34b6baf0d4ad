"""e2e_bench.py — kvtier on a real model: time to first token restoring the
prompt prefix from kvtierd against recomputing it, and the tokens bit-exact.

  store    process A: for each N, prefill the first N-1 tokens of a seeded
           prompt and save their KV (kvtier.hf, a partial last chunk included);
           with --l2-port, then evict L1 into L2
  ttft     process B, fresh: correctness (the restored prefix, then the last
           token and DECODE_STEPS greedy steps, against B computing the same
           way, bit for bit; against one prefill of all N, within bf16
           tolerance), then TTFT medians of REPEATS: recompute (one prefill of
           N tokens) against kvtier (LOOKUP + load of N-1 tokens' KV into a
           static cache + the one-token forward), from L1 and, with --l2-port,
           from L2 (L1 evicted before each repetition); the pinned H2D ceiling
  flip     (daemon stopped) flips one byte of chunk 2 of the first length's
           prefix in the L2 file
  corrupt  process C, after a restart on that file: the load stops at the
           corrupt chunk (a miss), the rest is computed, the greedy tokens are
           those of computing everything
One JSON line per N on stdout. --model qwen3-8b (transformers, seeded random
bf16 weights, sdpa) on the GPU machine, where the one-token forward is a CUDA
graph captured once per static cache (as serving engines capture decode);
--model tiny (tests/python's CPU decoder, eager) checks this flow anywhere."""

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from kvtier.hf import PrefixStore, block_key, grouped_area, prefix_keys  # noqa: E402

DECODE_STEPS = 16
SEGMENT = 1024  # tokens of a cache segment in the one-token attention; capacities are multiples
CORRUPT_CHUNK = 2
VOCAB = {"qwen3-8b": 151936, "tiny": 101}


class Qwen3:
    """Qwen3-8B's architecture with seeded random bf16 weights (no weights can be fetched)."""

    def __init__(self, seed):
        from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM
        self.cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                               num_hidden_layers=36, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128,
                               max_position_embeddings=40960, rope_theta=1000000.0,
                               tie_word_embeddings=False)
        self.cfg._attn_implementation = "sdpa"
        torch.manual_seed(seed)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            self.m = Qwen3ForCausalLM(self.cfg).eval().requires_grad_(False)
        torch.set_default_dtype(torch.float32)
        self.cache_cls = DynamicCache
        self.layers, self.kv_heads, self.head_dim = 36, 8, 128
        self.dtype, self.device, self.vocab = torch.bfloat16, "cuda", self.cfg.vocab_size

    @torch.no_grad()
    def forward(self, ids, cache):
        """The last position's logits (all of 32k would be 20 GB) of ids appended to cache
        (a static cache appends at its layers' cumulative_length: GraphSession.seek)."""
        x = ids if torch.is_tensor(ids) else torch.tensor([ids], device=self.device)
        out = self.m(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]

    def __call__(self, ids, cache):
        return self.forward(ids, cache).float()

    def session(self, capacity, groups):
        return GraphSession(self, capacity, groups)

    def sync(self):
        torch.cuda.synchronize()


class GraphSession:
    """A StaticCache of capacity tokens over a grouped area (kvtier.hf.grouped_area: the
    PrefixStore's, so a load lands where the model reads) and the one-token forward as
    one CUDA graph per layer group, so that group g computes while later groups' KV still
    loads (PrefixStore.load's on_group); without graphs (capture refused), the same
    forward eagerly. The one-token forward calls the model's own modules in Qwen3's order;
    only its attention is written here: transformers' eager attention (QK^T, scaling, the
    mask of the positions after pos, a float32 softmax, PV) with each KV head's 4 query
    heads as 4 rows of one product (transformers expands the 8 KV heads to 32, and with a
    mask its sdpa path falls back to the math kernel), PV split by cache segments. Multi-token computing (resume) is transformers' forward: it appends
    at the static cache's cumulative_length, which seek() sets."""

    def __init__(self, model, capacity, groups):
        from transformers import StaticCache
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
        self.rotary = apply_rotary_pos_emb
        self.model, self.groups = model, groups
        self.cache = StaticCache(config=model.cfg, max_cache_len=capacity)
        self.ids = torch.zeros((1, 1), dtype=torch.long, device="cuda")
        self.pos = torch.zeros((), dtype=torch.long, device="cuda")
        model.forward(self.ids, self.cache)             # allocates the cache's layers
        self.area = grouped_area(model.layers, model.kv_heads, capacity, model.head_dim,
                                 model.dtype, "cuda")
        for lay, (k, v) in zip(self.cache.layers, self.area):
            lay.keys, lay.values = k, v
        m = model.m.model
        hidden = model.cfg.hidden_size
        self.h = torch.zeros((1, 1, hidden), dtype=model.dtype, device="cuda")
        self.cos = torch.zeros((1, 1, model.head_dim), dtype=model.dtype, device="cuda")
        self.sin = torch.zeros_like(self.cos)
        self.bias = torch.zeros((1, 1, 1, capacity), dtype=torch.float32, device="cuda")
        self.segments = capacity // SEGMENT
        self.positions = torch.arange(capacity, device="cuda").view(1, 1, 1, capacity)
        per = model.layers // groups
        self.bounds = [(g * per, (g + 1) * per) for g in range(groups)]
        self.mods = m
        self.graphs, self.how, self.ran = [], "eager", 0
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                    # warm-up off the capture stream
            for _ in range(3):
                for g in range(groups):
                    self._group(g)
        torch.cuda.current_stream().wait_stream(side)
        try:
            pool = None
            for g in range(groups):                      # replayed in this order, one pool
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = self._group(g)
                pool = graph.pool()
                self.graphs.append(graph)
            self.out = out
            self.how = f"cuda_graph x{groups}"
        except RuntimeError as e:
            self.graphs = []
            print(f"e2e_bench: graph capture refused ({str(e)[:300]}); eager forward",
                  file=sys.stderr)
        torch.cuda.synchronize()

    def _layer(self, i, h):
        lay = self.mods.layers[i]
        at = lay.self_attn
        x = lay.input_layernorm(h)
        shape = (1, 1, -1, self.model.head_dim)
        q = at.q_norm(at.q_proj(x).view(shape)).transpose(1, 2)
        k = at.k_norm(at.k_proj(x).view(shape)).transpose(1, 2)
        v = at.v_proj(x).view(shape).transpose(1, 2)
        q, k = self.rotary(q, k, self.cos, self.sin)
        keys, values = self.area[i]
        keys.index_copy_(2, self.pos.view(1), k)
        values.index_copy_(2, self.pos.view(1), v)
        kvh, d = self.model.kv_heads, self.model.head_dim
        q = q.reshape(1, kvh, -1, d)                     # (1, 8, 4, D): query head = kv * 4 + r
        scores = torch.matmul(q, keys.transpose(2, 3)).float() * at.scaling + self.bias
        probs = scores.softmax(-1).to(values.dtype)      # (1, 8, 4, capacity)
        # P @ V split over the cache's segments (as flash-decoding splits it), so that the
        # GPU gets 8 x segments small products instead of 8 long ones; then their sum.
        parts = torch.matmul(probs.view(1, kvh, q.shape[2], self.segments, -1).transpose(2, 3),
                             values.view(1, kvh, self.segments, -1, d))
        o = parts.float().sum(2).to(values.dtype)        # (1, 8, 4, D)
        h = h + at.o_proj(o.reshape(1, 1, -1))
        return h + lay.mlp(lay.post_attention_layernorm(h))

    @torch.no_grad()
    def _group(self, g):
        """Layer group g of the forward of ids at pos; the last group returns the logits."""
        m = self.mods
        if g == 0:
            h = m.embed_tokens(self.ids)
            cos, sin = m.rotary_emb(h, self.pos.view(1, 1))
            self.cos.copy_(cos)
            self.sin.copy_(sin)
            self.bias.zero_()
            self.bias.masked_fill_(self.positions > self.pos, float("-inf"))
            self.h.copy_(h)
        h = self.h
        a, b = self.bounds[g]
        for i in range(a, b):
            h = self._layer(i, h)
        self.h.copy_(h)
        if g == self.groups - 1:
            return self.model.m.lm_head(m.norm(self.h))[0, -1]
        return None

    def begin(self, token, pos):
        """The next run_group calls compute token at position pos."""
        self.ids.fill_(token)
        self.pos.fill_(pos)
        self.ran = 0

    def run_group(self, g, eager=False):
        if self.graphs and not eager:
            self.graphs[g].replay()
            out = self.out
        else:
            out = self._group(g)
        self.ran = g + 1
        return out

    def seek(self, pos):
        """The next multi-token forward appends at position pos."""
        for lay in self.cache.layers:
            lay.cumulative_length.fill_(pos)

    def step(self, token, pos, eager=False):
        """The logits of token at position pos over the cache's first pos positions."""
        self.begin(token, pos)
        for g in range(self.groups):
            out = self.run_group(g, eager)
        return out.float()

    def resume(self, start, ids):
        """Computes ids at positions start.. (the rest eagerly, the last token by step)."""
        if len(ids) > 1:
            self.seek(start)
            self.model.forward(ids[:-1], self.cache)
        return self.step(ids[-1], start + len(ids) - 1)


class Tiny:
    def __init__(self, seed):
        from tiny_decoder import MiniCache, TinyDecoder
        self.m = TinyDecoder(seed=seed)
        self.cache_cls = MiniCache
        self.layers, self.kv_heads, self.head_dim = 3, 2, 16
        self.dtype, self.device, self.vocab = torch.float32, "cpu", 101
        self.cfg = None

    def __call__(self, ids, cache):
        return self.m(ids, cache)[-1]

    def session(self, capacity, groups):
        return TinySession(self, capacity)

    def sync(self):
        pass


class TinySession:
    """GraphSession's interface on CPU: a plain area, the cache rebuilt from it on resume."""

    how = "eager"
    graphs = ()

    def __init__(self, model, capacity):
        self.model = model
        self.area = grouped_area(model.layers, model.kv_heads, capacity, model.head_dim,
                                 model.dtype)

    def resume(self, start, ids):
        self.cache = self.model.cache_cls()
        if start:
            for i, (k, v) in enumerate(self.area):
                self.cache.update(k[:, :, :start], v[:, :, :start], i)
        return self.model(ids, self.cache)

    def step(self, token, pos, eager=True):
        """As GraphSession.step: token at pos over the first pos positions, however often
        it runs (the cache is cut back to pos first, as the static cache overwrites pos)."""
        for lay in self.cache.layers:
            lay.keys, lay.values = lay.keys[:, :, :pos], lay.values[:, :, :pos]
        return self.model([token], self.cache)


def prompt(args, n):
    g = torch.Generator().manual_seed(args.seed + n)
    return torch.randint(0, VOCAB[args.model], (n,), generator=g).tolist()


def capacity(args, n):
    """Tokens of a session's static cache: the prompt, the decode steps, whole segments
    (whole chunks: SEGMENT is a multiple of every chunk size the bench takes)."""
    if SEGMENT % args.chunk:
        raise SystemExit(f"e2e_bench: --chunk {args.chunk} does not divide {SEGMENT}")
    return -(-(n + DECODE_STEPS + 1) // SEGMENT) * SEGMENT


def greedy(sess, start, ids):
    """Computes ids after a prefix of start tokens, then DECODE_STEPS greedy tokens:
    (every step's logits, the tokens)."""
    logits, toks = [sess.resume(start, ids)], []
    pos = start + len(ids)
    for _ in range(DECODE_STEPS):
        toks.append(int(logits[-1].argmax()))
        logits.append(sess.step(toks[-1], pos))
        pos += 1
    return logits, toks


def kv_of(model, cache):
    return [(cache.layers[i].keys, cache.layers[i].values) for i in range(model.layers)]


def fill_area(sess, kv, n):
    """A prefill's KV of n tokens into the session's area: computing it without kvtier."""
    for (ak, av), (k, v) in zip(sess.area, kv):
        ak[:, :, :n].copy_(k[:, :, :n])
        av[:, :, :n].copy_(v[:, :, :n])


def computed(model, sess, toks):
    """B computing it the same way as A and the restored run: the prefill of all but the
    last token (a DynamicCache, as A), its KV into the static cache, then greedy."""
    cache = model.cache_cls()
    model(toks[:-1], cache)
    kv = kv_of(model, cache)
    fill_area(sess, kv, len(toks) - 1)
    return greedy(sess, len(toks) - 1, toks[-1:]), kv


def new_store(args, model, area=None, max_tokens=0):
    return PrefixStore(args.socket, args.model, num_layers=model.layers,
                       num_kv_heads=model.kv_heads, head_dim=model.head_dim, dtype=model.dtype,
                       device=model.device, chunk_tokens=args.chunk, max_tokens=max_tokens,
                       staging_chunks=args.staging_chunks * args.layer_groups, depth=args.depth,
                       area=area, layer_groups=args.layer_groups)


def store_all(args, model):
    for n in args.lengths:
        toks = prompt(args, n)
        cache = model.cache_cls()
        model(toks[:-1], cache)
        model.sync()
        with new_store(args, model, max_tokens=n) as s:
            saved = s.save(toks[:-1], cache)
        print(json.dumps({"mode": "store", "tokens": n, "saved_tokens": saved}), flush=True)
        del cache
    if args.l2_port:
        evict_l1(args.l2_port)  # all of it on disk for a restart


def http(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def evict_l1(port):
    for _ in range(10000):
        done = http(port, "/v1/tiers/l1/evict", {"all": True})["complete"]
        st = http(port, "/v1/stats")
        if done and st["l1"]["items"] == 0 and not st["l2"]["ios_inflight"] and \
                not st["l2"]["ios_queued"]:
            return
        time.sleep(0.01)
    raise RuntimeError("L1 did not empty into L2")


def h2d_ceiling(nbytes):
    n = min(nbytes, 1 << 30)
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, n / (time.perf_counter() - t) / 1e9)
    return best


def timed(model, fn, repeats):
    out = []
    for _ in range(repeats):
        model.sync()
        t = time.perf_counter()
        fn()
        model.sync()
        out.append(time.perf_counter() - t)
    return round(statistics.median(out) * 1e3, 2)


def max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def check(model, s, sess, toks, out):
    """Correctness: the restored prefix and the logits after it, bit for bit."""
    p = len(toks) - 1
    got = s.load(toks[:-1])
    out["restored_tokens"] = got
    logits, rtoks = greedy(sess, got, toks[got:])
    (wlogits, wtoks), kv = computed(model, sess, toks)
    # The captured forward against the same forward run eagerly, at the last prompt token.
    out["graph_vs_eager_max_abs_diff"] = float((sess.step(toks[-1], p, eager=True) -
                                                wlogits[0]).abs().max())
    got2 = s.load(toks[:-1])
    out["kv_restored_equal_prefill"] = got2 == p and all(
        torch.equal(ak[:, :, :p], k) and torch.equal(av[:, :, :p], v)
        for (ak, av), (k, v) in zip(sess.area, kv))
    del kv
    (w2logits, _), kv = computed(model, sess, toks)    # the forward against itself
    del kv
    out["recompute_twice_max_abs_diff"] = max_diff(w2logits, wlogits)
    out["logits_max_abs_diff"] = max_diff(logits, wlogits)
    out["same_tokens"] = rtoks == wtoks
    out["bit_exact"] = got == p and out["same_tokens"] and all(
        torch.equal(a, b) for a, b in zip(logits, wlogits))
    one = model(toks, model.cache_cls())
    out["one_pass_max_abs_diff"] = float((one - wlogits[0]).abs().max())
    out["one_pass_same_first_token"] = int(one.argmax()) == wtoks[0]


def time_it(args, model, s, sess, toks, out):
    """TTFT: recompute against LOOKUP + load + the one-token forward; and its parts."""
    p = len(toks) - 1

    def overlap(g, n):
        """Layer group g of the last token's forward, as soon as its KV has landed."""
        if n == p:
            if g == 0:
                sess.begin(toks[-1], p)
            sess.run_group(g)

    def from_kvtier():
        sess.ran = 0
        n = s.load(toks[:-1], on_group=overlap if sess.graphs else None)
        if n != p or sess.ran != len(sess.graphs) or not sess.graphs:
            sess.resume(n, toks[n:])               # a shorter prefix: the groups' work is redone

    steps = ("_keys", "_group_keys", "_cached_chunks")

    def marks():
        """When, from the call, load's steps ended (its keys, its layer groups' block keys,
        its LOOKUP) and each layer group landed, in ms."""
        got = []

        def timed_step(fn):
            def step(*a):
                r = fn(*a)
                got.append(time.perf_counter())
                return r
            return step
        for name in steps:
            setattr(s, name, timed_step(getattr(s, name)))
        model.sync()
        t = time.perf_counter()
        s.load(toks[:-1], on_group=lambda g, n: got.append(time.perf_counter()))
        for name in steps:
            delattr(s, name)
        return [(m - t) * 1e3 for m in got]

    out["ttft_recompute_ms"] = timed(model, lambda: model(toks, model.cache_cls()), args.repeats)
    out["ttft_l1_ms"] = timed(model, from_kvtier, args.repeats)
    out["load_l1_ms"] = timed(model, lambda: s.load(toks[:-1]), args.repeats)
    def median_marks(runs):
        median = [round(statistics.median(r[i] for r in runs), 2) for i in range(len(runs[0]))]
        return {"keys": median[0], "group_keys": median[1], "lookup": median[2],
                "groups": median[len(steps):]}

    out["load_marks_ms"] = median_marks([marks() for _ in range(args.repeats)])
    out["step_ms"] = timed(model, lambda: sess.step(toks[-1], p), args.repeats)
    out["step_eager_ms"] = timed(model, lambda: sess.step(toks[-1], p, eager=True), args.repeats)
    out["forward"] = sess.how
    out["layer_groups"] = args.layer_groups
    out["kv_bytes"] = kv_bytes = 2 * model.layers * model.kv_heads * model.head_dim * p * \
        torch.tensor([], dtype=model.dtype).element_size()
    if model.device == "cuda":
        ceil = h2d_ceiling(kv_bytes)
        out["h2d_ceiling_gbs"] = round(ceil, 2)
        out["load_l1_gbs"] = round(kv_bytes / out["load_l1_ms"] / 1e6, 2)
        out["load_l1_ratio"] = round(out["load_l1_gbs"] / ceil, 3)
        out["l1_bound_ms"] = round(1.2 * kv_bytes / ceil / 1e6 + out["step_ms"], 2)
    out["speedup_l1"] = round(out["ttft_recompute_ms"] / out["ttft_l1_ms"], 2)
    if args.l2_port:
        l2, load = [], []
        for _ in range(args.repeats):
            evict_l1(args.l2_port)
            l2.append(timed(model, from_kvtier, 1))
            evict_l1(args.l2_port)
            load.append(timed(model, lambda: s.load(toks[:-1]), 1))
        out["ttft_l2_ms"] = round(statistics.median(l2), 2)
        out["load_l2_ms"] = round(statistics.median(load), 2)
        runs = []
        for _ in range(args.repeats):
            evict_l1(args.l2_port)
            runs.append(marks())
        out["load_l2_marks_ms"] = median_marks(runs)
        out["load_l2_gbs"] = round(kv_bytes / out["load_l2_ms"] / 1e6, 2)
        if args.disk_gbs:
            out["disk_ceiling_gbs"] = args.disk_gbs
            out["load_l2_ratio"] = round(out["load_l2_gbs"] / args.disk_gbs, 3)
        out["speedup_l2"] = round(out["ttft_recompute_ms"] / out["ttft_l2_ms"], 2)


def ttft_all(args, model):
    for n in args.lengths:
        toks = prompt(args, n)
        out = {"mode": "ttft", "tokens": n, "prefix_tokens": n - 1}
        sess = model.session(capacity(args, n), args.layer_groups)
        with new_store(args, model, sess.area) as s:
            if not args.no_check:
                check(model, s, sess, toks, out)
            if not args.no_timing:
                out["gpu"] = torch.cuda.get_device_name() if model.device == "cuda" else "CPU"
                time_it(args, model, s, sess, toks, out)
            out["store_stats"] = s.stats
        print(json.dumps(out), flush=True)
        del sess


def flip(args):
    """No model: a byte of the newest (and any older) record of the chunk, flipped."""
    from l2file import flip_data_byte
    key = block_key(prefix_keys(prompt(args, args.lengths[0])[:-1], args.chunk)[CORRUPT_CHUNK],
                    0, args.layer_groups)
    n = flip_data_byte(args.l2_file, key, args.l2_region_size)
    print(json.dumps({"mode": "flip", "tokens": args.lengths[0], "chunk": CORRUPT_CHUNK,
                      "records_flipped": n}), flush=True)
    return n >= 1


def corrupt(args, model):
    """The load stops at the corrupt chunk and the rest is computed: the logits, bit for bit,
    of the same schedule over a good copy of the chunks before it (A's prefill, recomputed
    here); the tokens also against computing it all. Then the prefix is saved again, as a
    server would after recomputing."""
    n = args.lengths[0]
    toks = prompt(args, n)
    sess = model.session(capacity(args, n), args.layer_groups)
    with new_store(args, model, sess.area) as s:
        got = s.load(toks[:-1])
        logits, rtoks = greedy(sess, got, toks[got:])
        cache = model.cache_cls()
        model(toks[:-1], cache)                             # what A computed
        fill_area(sess, kv_of(model, cache), got)
        del cache
        wlogits, wtoks = greedy(sess, got, toks[got:])      # the good copy, the same schedule
        (_, full_toks), _ = computed(model, sess, toks)     # the area holds B's prefill
        s.save(toks[:-1], sess.area)
        stats = s.stats
    l2 = http(args.l2_port, "/v1/stats")["l2"] if args.l2_port else {}
    out = {"mode": "corrupt", "tokens": n, "restored_tokens": got,
           "miss_at_corrupt_chunk": got == CORRUPT_CHUNK * args.chunk,
           "checksum_failures": l2.get("checksum_failures"),
           "recovery_dropped": l2.get("recovery_dropped"),
           "same_tokens": rtoks == wtoks, "logits_max_abs_diff": max_diff(logits, wlogits),
           "bit_exact": all(torch.equal(a, b) for a, b in zip(logits, wlogits)),
           "same_tokens_as_computing_all": rtoks == full_toks, "store_stats": stats}
    print(json.dumps(out), flush=True)
    return out["miss_at_corrupt_chunk"] and out["bit_exact"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["store", "ttft", "flip", "corrupt"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--model", default="qwen3-8b", choices=["qwen3-8b", "tiny"])
    ap.add_argument("--lengths", default="2048,8192,32768")
    ap.add_argument("--chunk", type=int, default=256,
                    help="tokens per chunk (256: 9.4 MB blocks with 4 groups of Qwen3-8B)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--staging-chunks", type=int, default=4,
                    help="chunks a staging buffer holds (times the layer groups in blocks); "
                         "with every buffer busy, one larger than a layer group's share of the "
                         "load takes the start of the next group into the same batch, and the "
                         "group lands only with it")
    ap.add_argument("--layer-groups", type=int, default=0,
                    help="a chunk is one block per group of layers, loaded group by group while "
                         "the last token's forward computes the groups landed (default: 4 for "
                         "qwen3-8b, 3 for tiny; 1: no groups, the forward after the load)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l2-port", type=int, default=0, help="control-plane port: also from L2")
    ap.add_argument("--l2-file", help="flip: the L2 file")
    ap.add_argument("--l2-region-size", type=int, default=256 << 20)
    ap.add_argument("--disk-gbs", type=float, default=0.0,
                    help="the disk's read ceiling measured next to L2, for the L2 ratio")
    ap.add_argument("--no-check", action="store_true",
                    help="ttft: the timing only (the checks are another run's, deterministic)")
    ap.add_argument("--no-timing", action="store_true", help="ttft: the correctness checks only")
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.use_deterministic_algorithms (and cuBLAS's workspace config)")
    args = ap.parse_args()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.layer_groups = args.layer_groups or {"qwen3-8b": 4, "tiny": 3}[args.model]
    if args.mode == "flip":
        sys.exit(0 if flip(args) else 1)
    model = (Qwen3 if args.model == "qwen3-8b" else Tiny)(args.seed)
    ok = {"store": store_all, "ttft": ttft_all, "corrupt": corrupt}[args.mode](args, model)
    sys.exit(0 if ok is not False else 1)


if __name__ == "__main__":
    main()
