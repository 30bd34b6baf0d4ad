"""e2e_bench.py — kvtier on a real model: time to first token restoring the
prompt prefix from kvtierd against recomputing it, and the tokens bit-exact.

  store   process A: for each N, prefill the chunk-aligned prefix of the first
          N-1 tokens and save its KV (kvtier.hf)
  ttft    process B, fresh: correctness (restored vs computed the same way,
          bit for bit; vs one prefill of all N, within bf16 tolerance), then
          TTFT medians of REPEATS: recompute (prefill N), kvtier from L1
          (lookup + load + the rest of the prompt), and, with --l2, from L2
          (L1 evicted before each repetition); the pinned H2D ceiling
One JSON line per N on stdout. --model qwen3-8b (transformers, seeded random
bf16 weights, sdpa) on the GPU machine; --model tiny (tests/python's CPU
decoder) checks this script's flow anywhere."""

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
from kvtier.hf import PrefixStore  # noqa: E402

DECODE_STEPS = 16


class Qwen3:
    """Qwen3-8B's architecture with seeded random bf16 weights (no weights can be fetched)."""

    def __init__(self, seed):
        from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                          num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                          tie_word_embeddings=False)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(seed)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            self.m = Qwen3ForCausalLM(cfg).eval()
        torch.set_default_dtype(torch.float32)
        self.cache_cls = DynamicCache
        self.layers, self.kv_heads, self.head_dim = 36, 8, 128
        self.dtype, self.device, self.vocab = torch.bfloat16, "cuda", cfg.vocab_size

    @torch.no_grad()
    def __call__(self, ids, cache):
        x = torch.tensor([ids], device=self.device)
        out = self.m(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0].float()  # the last position's only: all of 32k would be 20 GB

    def sync(self):
        torch.cuda.synchronize()


class Tiny:
    def __init__(self, seed):
        from tiny_decoder import MiniCache, TinyDecoder
        self.m = TinyDecoder(seed=seed)
        self.cache_cls = MiniCache
        self.layers, self.kv_heads, self.head_dim = 3, 2, 16
        self.dtype, self.device, self.vocab = torch.float32, "cpu", 101

    def __call__(self, ids, cache):
        return self.m(ids, cache)

    def sync(self):
        pass


def prompt(model, n, seed):
    g = torch.Generator().manual_seed(seed + n)
    return torch.randint(0, model.vocab, (n,), generator=g).tolist()


def aligned(n, chunk):
    return (n - 1) // chunk * chunk


def greedy(model, cache, ids):
    logits = [model(ids, cache)[-1]]
    toks = []
    for _ in range(DECODE_STEPS):
        toks.append(int(logits[-1].argmax()))
        logits.append(model([toks[-1]], cache)[-1])
    return logits, toks


def new_store(args, model):
    return PrefixStore(args.socket, args.model, num_layers=model.layers,
                       num_kv_heads=model.kv_heads, head_dim=model.head_dim, dtype=model.dtype,
                       device=model.device, chunk_tokens=args.chunk, max_tokens=max(args.lengths),
                       staging_chunks=args.staging_chunks, depth=args.depth)


def store_all(args, model):
    with new_store(args, model) as s:
        for n in args.lengths:
            toks = prompt(model, n, args.seed)
            p = aligned(n, args.chunk)
            cache = model.cache_cls()
            model(toks[:p], cache)
            model.sync()
            saved = s.save(toks[:p], cache)
            print(json.dumps({"mode": "store", "tokens": n, "saved_tokens": saved}), flush=True)
            del cache


def evict_l1(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/tiers/l1/evict", method="POST",
                                 data=b'{"all": true}', headers={"Content-Type": "application/json"})
    for _ in range(10000):
        done = json.load(urllib.request.urlopen(req))["complete"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats") as r:
            st = json.load(r)
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


def timed(model, fn):
    model.sync()
    t = time.perf_counter()
    fn()
    model.sync()
    return time.perf_counter() - t


def ttft_all(args, model):
    with new_store(args, model) as s:
        for n in args.lengths:
            toks = prompt(model, n, args.seed)
            p = aligned(n, args.chunk)
            out = {"mode": "ttft", "tokens": n, "prefix_tokens": p}
            # Correctness: restored, against computed the same way, against one prefill.
            restored, got = s.restore(toks[:-1], model.cache_cls)
            out["restored_tokens"] = got
            logits, rtoks = greedy(model, restored, toks[got:])
            del restored
            cache = model.cache_cls()
            model(toks[:p], cache)
            again = model.cache_cls()
            model(toks[:p], again)
            # Where bits could part: the restored KV against this process's own prefill,
            # and that prefill against itself.
            restored2, _ = s.restore(toks[:-1], model.cache_cls)
            kv = [(cache.layers[i].keys, cache.layers[i].values) for i in range(model.layers)] \
                if hasattr(cache, "layers") else None
            if kv is not None:
                out["kv_restored_equal_prefill"] = all(
                    torch.equal(restored2.layers[i].keys, kv[i][0]) and
                    torch.equal(restored2.layers[i].values, kv[i][1]) for i in range(model.layers))
                out["prefill_deterministic"] = all(
                    torch.equal(again.layers[i].keys, kv[i][0]) for i in range(model.layers))
            del restored2, again
            wlogits, wtoks = greedy(model, cache, toks[p:])
            del cache
            # The forward against itself: computed the same way once more.
            cache = model.cache_cls()
            model(toks[:p], cache)
            w2logits, _ = greedy(model, cache, toks[p:])
            del cache
            out["recompute_twice_max_abs_diff"] = max(float((a - b).abs().max())
                                                      for a, b in zip(w2logits, wlogits))
            out["logits_max_abs_diff"] = max(float((a - b).abs().max())
                                             for a, b in zip(logits, wlogits))
            out["bit_exact"] = got == p and rtoks == wtoks and all(
                torch.equal(a, b) for a, b in zip(logits, wlogits))
            out["same_tokens"] = rtoks == wtoks
            one = model(toks, model.cache_cls())[-1]
            out["one_pass_max_abs_diff"] = float((one - wlogits[0]).abs().max())
            out["one_pass_same_first_token"] = int(one.argmax()) == wtoks[0]
            # TTFT: recompute against restore + the rest of the prompt.
            rec = [timed(model, lambda: model(toks, model.cache_cls())) for _ in range(args.repeats)]

            def from_kvtier():
                c, k = s.restore(toks[:-1], model.cache_cls)
                model(toks[k:], c)

            l1 = [timed(model, from_kvtier) for _ in range(args.repeats)]
            out["ttft_recompute_ms"] = round(statistics.median(rec) * 1e3, 2)
            out["ttft_l1_ms"] = round(statistics.median(l1) * 1e3, 2)
            kv_bytes = 2 * model.layers * model.kv_heads * model.head_dim * p * \
                torch.tensor([], dtype=model.dtype).element_size()
            out["kv_bytes"] = kv_bytes
            rest = [timed(model, lambda: model(toks[p:], model.cache_cls())) for _ in range(3)]
            out["rest_forward_ms"] = round(statistics.median(rest) * 1e3, 2)
            if model.device == "cuda":
                ceil = h2d_ceiling(kv_bytes)
                out["h2d_ceiling_gbs"] = round(ceil, 2)
                out["l1_bound_ms"] = round((1.2 * kv_bytes / ceil / 1e9) * 1e3 +
                                           out["rest_forward_ms"], 2)
            out["speedup_l1"] = round(out["ttft_recompute_ms"] / out["ttft_l1_ms"], 2)
            if args.l2_port:
                l2 = []
                for _ in range(args.repeats):
                    evict_l1(args.l2_port)
                    l2.append(timed(model, from_kvtier))
                out["ttft_l2_ms"] = round(statistics.median(l2) * 1e3, 2)
                out["speedup_l2"] = round(out["ttft_recompute_ms"] / out["ttft_l2_ms"], 2)
            out["store_stats"] = s.stats
            print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["store", "ttft"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--model", default="qwen3-8b", choices=["qwen3-8b", "tiny"])
    ap.add_argument("--lengths", default="2048,8192,32768")
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--staging-chunks", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l2-port", type=int, default=0, help="control-plane port: also from L2")
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.use_deterministic_algorithms (and cuBLAS's workspace config)")
    args = ap.parse_args()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    model = (Qwen3 if args.model == "qwen3-8b" else Tiny)(args.seed)
    store_all(args, model) if args.mode == "store" else ttft_all(args, model)


if __name__ == "__main__":
    main()
