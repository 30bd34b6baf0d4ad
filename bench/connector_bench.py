"""connector_bench.py — the vLLM connector's worker path on CUDA tensors,
in two processes as vLLM would have them: `save` fills a paged KV cache of
Qwen3-8B's geometry (36 layers, 8 KV heads, head dim 128, bf16, 16-token
blocks, 128-token chunks) and saves REQUESTS prefixes of 8192 tokens
through kvtier.connector.WorkerSide; `load`, in a fresh process with a fresh
cache, loads them into other block ids, checks every byte against what the
saver wrote (regenerated from the same seeds) and reports GB/s against
cudaMemcpyAsync from pinned memory of the same chunks, measured in the same
run. One JSON line on stdout. Run by bench/connector.sh."""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from kvtier.connector import ConnectorConfig, Geometry, LoadSpec, SaveSpec, StepMeta  # noqa: E402
from kvtier.connector.worker import WorkerSide  # noqa: E402

LAYERS, HEADS, DIM, BLOCK = 36, 8, 128, 16
CHUNK = 8                       # 128 tokens
TOKENS = 8192
BLOCKS_PER_REQ = TOKENS // BLOCK  # 512


def geometry():
    return Geometry(num_layers=LAYERS, block_size=BLOCK, num_kv_heads=HEADS, head_size=DIM,
                    dtype_bytes=2, dtype_name="torch.bfloat16")


def new_cache(num_blocks):
    return [torch.empty((2, num_blocks, BLOCK, HEADS, DIM), dtype=torch.bfloat16, device="cuda")
            for _ in range(LAYERS)]


def fill(cache, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    for t in cache:
        t.copy_(torch.randint(-32768, 32767, t.shape, generator=g, device="cuda",
                              dtype=torch.int16).view(torch.bfloat16))


def keys_of(req):
    return [req.to_bytes(8, "little") + c.to_bytes(8, "little") for c in range(BLOCKS_PER_REQ // CHUNK)]


def worker(args, num_blocks):
    cfg = ConnectorConfig.from_extra({"socket_path": args.socket, "chunk_blocks": CHUNK,
                                      "staging_depth": args.depth,
                                      "staging_blocks": args.staging_blocks}, BLOCK, "qwen3-8b")
    geo = geometry()
    cache = new_cache(num_blocks)
    w = WorkerSide(cfg, geo, geo.namespace(cfg.model_id, CHUNK))
    w.register_kv_caches({f"l{i}": t for i, t in enumerate(cache)})
    return w, cache


def save(args):
    num_blocks = BLOCKS_PER_REQ * args.requests
    w, cache = worker(args, num_blocks)
    fill(cache, args.seed)
    torch.cuda.synchronize()
    specs = [SaveSpec(f"s{r}", keys_of(r), list(range(r * BLOCKS_PER_REQ, (r + 1) * BLOCKS_PER_REQ)))
             for r in range(args.requests)]
    t = time.perf_counter()
    w.start_step(StepMeta(saves=specs))
    w.wait_all(-1)
    secs = time.perf_counter() - t
    saved, _ = w.get_finished()
    nbytes = w.stats["stored_bytes"]
    w.shutdown()
    assert saved == {s.req_id for s in specs} and w.stats["saves_dropped"] == 0, w.stats
    return {"mode": "save", "bytes": nbytes, "seconds": round(secs, 4),
            "store_gbs": round(nbytes / secs / 1e9, 2)}


def ceiling(nbytes_chunk, nchunks, streams=4):
    """cudaMemcpyAsync H2D of chunk-sized copies from pinned memory, streams at once."""
    src = torch.empty(nbytes_chunk * 16, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes_chunk * 16, dtype=torch.uint8, device="cuda")
    ss = [torch.cuda.Stream() for _ in range(streams)]
    for _ in range(2):  # the first pass warms up
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(nchunks):
            with torch.cuda.stream(ss[i % streams]):
                j = i % 16
                dst[j * nbytes_chunk:(j + 1) * nbytes_chunk].copy_(
                    src[j * nbytes_chunk:(j + 1) * nbytes_chunk], non_blocking=True)
        torch.cuda.synchronize()
        secs = time.perf_counter() - t
    return nbytes_chunk * nchunks / secs / 1e9


def load(args):
    num_blocks = BLOCKS_PER_REQ * args.requests + 64
    w, cache = worker(args, num_blocks)
    for t in cache:
        t.zero_()
    # Other block ids than the saver's: reversed, and shifted past a gap.
    ids = list(range(num_blocks - 1, 63, -1))
    specs = [LoadSpec(f"l{r}", keys_of(r), ids[r * BLOCKS_PER_REQ:(r + 1) * BLOCKS_PER_REQ])
             for r in range(args.requests)]
    torch.cuda.synchronize()
    t = time.perf_counter()
    w.start_step(StepMeta(loads=specs))
    w.wait_all(-1)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    _, loaded = w.get_finished()
    errors = w.get_block_ids_with_load_errors()
    nbytes = w.stats["loaded_bytes"]
    w.shutdown()
    # Every byte, against the saver's cache regenerated from its seed.
    want = new_cache(BLOCKS_PER_REQ * args.requests)
    fill(want, args.seed)
    order = torch.tensor(ids[:BLOCKS_PER_REQ * args.requests], device="cuda")
    exact = all(torch.equal(c[:, order].view(torch.int16), wt.view(torch.int16))
                for c, wt in zip(cache, want))
    chunk_bytes = geometry().vllm_block_bytes * CHUNK
    ceil = ceiling(chunk_bytes, nbytes // chunk_bytes or 1)
    gbs = nbytes / secs / 1e9
    return {"mode": "load", "requests": args.requests, "tokens_per_request": TOKENS,
            "bytes": nbytes, "seconds": round(secs, 4), "load_gbs": round(gbs, 2),
            "ms_per_request": round(secs * 1000 / args.requests, 2),
            "ceiling_h2d_gbs": round(ceil, 2), "ratio": round(gbs / ceil, 3),
            "loaded": len(loaded), "load_error_blocks": len(errors), "byte_exact": exact}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--staging-blocks", type=int, default=16)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    out = save(args) if args.mode == "save" else load(args)
    print(json.dumps(out))
    ok = out["mode"] == "save" or (out["byte_exact"] and out["loaded"] == args.requests and
                                   not out["load_error_blocks"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
