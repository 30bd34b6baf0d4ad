#!/usr/bin/env python3
"""l3_bench.py — the two halves of bench/l3.sh, each against one kvtierd:

  store  stores COUNT blocks of BLOCK bytes (seeded bytes) on node A and
         waits until A has published them all to L3 (its /v1/stats)
  load   on node B (empty L1, no L2): the time to first byte of an L3 hit
         (LOADs of one block each, cold, median), then every other block
         by STREAMS clients at once, BATCH blocks per LOAD into a buffer
         each reuses, timed; then every byte checked (from the L1 copies
         the L3 reads were promoted into); one JSON line

Blocks come from and go to a shared-memory staging buffer (the host path):
what is measured is L3's read path, not the GPU's."""

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import kvtier  # noqa: E402

TTFB_BLOCKS = 8
BATCH = 16  # blocks per LOAD of the timed pass


def keys(n):
    return [kvtier.key_chain([i] * 4, 4)[0] for i in range(n)]


def pattern(i, block):
    return np.random.default_rng(i).integers(0, 256, block, dtype=np.uint8)


def l3_stats(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats") as r:
        return json.load(r)["l3"]


def store(a):
    ks = keys(a.count)
    with kvtier.Client(a.socket, "l3bench", a.block) as c:
        buf = c.create_buffer(a.block * 64)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        t0 = time.perf_counter()
        for first in range(0, a.count, 64):
            batch = ks[first:first + 64]
            for j in range(len(batch)):
                view[j * a.block:(j + 1) * a.block] = pattern(first + j, a.block)
            got = c.store(buf.index, [(k, j * a.block, a.block) for j, k in enumerate(batch)])
            if any(s for s, _ in got):
                sys.exit(f"l3_bench: store failed: {got}")
        stored_s = time.perf_counter() - t0
    while True:
        s = l3_stats(a.port)
        if s["published"] + s["publish_present"] + s["publish_failed"] + s["publish_skipped"] \
                >= a.count:
            break
        time.sleep(0.05)
    print(json.dumps({"mode": "store", "blocks": a.count, "block_bytes": a.block,
                      "store_s": round(stored_s, 3), "publish_s": round(time.perf_counter() - t0, 3),
                      "published": s["published"], "publish_failed": s["publish_failed"],
                      "publish_skipped": s["publish_skipped"]}))
    return s["published"] == a.count


def load_share(a, ks, first, out):
    """One stream: LOADs of BATCH blocks at a time into its own buffer (as workers reuse one)."""
    with kvtier.Client(a.socket, "l3bench", a.block) as c:
        buf = c.create_buffer(a.block * BATCH)
        out["ready"].wait()  # every stream's buffer registered (its pages faulted in) first
        bad = 0
        for at in range(first, len(ks), BATCH * a.streams):
            batch = ks[at:at + BATCH]
            got = c.load(buf.index, [(k, j * a.block, a.block) for j, k in enumerate(batch)])
            bad += sum(1 for st, _ in got if st)
        out["bad"] += bad


def verify(a, ks):
    """Every byte, from the L1 copies the L3 reads left (a promotion keeps what was read)."""
    wrong = 0
    with kvtier.Client(a.socket, "l3bench", a.block) as c:
        buf = c.create_buffer(a.block * BATCH)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        for at in range(0, len(ks), BATCH):
            batch = ks[at:at + BATCH]
            got = c.load(buf.index, [(k, j * a.block, a.block) for j, k in enumerate(batch)])
            for j in range(len(batch)):
                ok = got[j][0] == 0 and np.array_equal(view[j * a.block:(j + 1) * a.block],
                                                       pattern(TTFB_BLOCKS + at + j, a.block))
                wrong += not ok
    return wrong


def load(a):
    ks = keys(a.count)
    ttfb = []
    with kvtier.Client(a.socket, "l3bench", a.block) as c:
        buf = c.create_buffer(a.block)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        for i in range(TTFB_BLOCKS):
            t0 = time.perf_counter()
            got = c.load(buf.index, [(ks[i], 0, a.block)])
            ttfb.append(time.perf_counter() - t0)
            ok = got == [(0, a.block)] and np.array_equal(view, pattern(i, a.block))
            if not ok:
                sys.exit(f"l3_bench: block {i}: {got}, or wrong bytes")
    rest = ks[TTFB_BLOCKS:]
    out = {"ready": threading.Barrier(a.streams + 1), "bad": 0}
    streams = [threading.Thread(target=load_share, args=(a, rest, i * BATCH, out))
               for i in range(a.streams)]
    for t in streams:
        t.start()
    out["ready"].wait()
    t0 = time.perf_counter()
    for t in streams:
        t.join()
    load_s = time.perf_counter() - t0
    s = l3_stats(a.port)
    wrong = verify(a, rest)
    res = {"mode": "load", "blocks": len(rest), "block_bytes": a.block, "streams": a.streams,
           "batch_blocks": BATCH, "ttfb_ms_median": round(statistics.median(ttfb) * 1e3, 3),
           "ttfb_ms_max": round(max(ttfb) * 1e3, 3), "load_s": round(load_s, 3),
           "load_gbs": round(len(rest) * a.block / load_s / 1e9, 3), "failed": out["bad"],
           "wrong_bytes": wrong, "l3_reads": s["reads"],
           "checksum_failures": s["checksum_failures"]}
    if a.ceiling_gbs:
        res["ceiling_gbs"] = a.ceiling_gbs
        res["ratio"] = round(res["load_gbs"] / a.ceiling_gbs, 3)
    print(json.dumps(res))
    return not out["bad"] and not wrong and s["reads"] == a.count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["store", "load"])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--port", type=int, required=True, help="the daemon's control plane")
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--block", type=int, default=8 << 20)
    ap.add_argument("--streams", type=int, default=2, help="load: clients loading at once")
    ap.add_argument("--ceiling-gbs", type=float, default=0.0,
                    help="load: the read ceiling measured on the same files, for the ratio")
    a = ap.parse_args()
    if a.count <= TTFB_BLOCKS:
        sys.exit(f"l3_bench: --count must be above {TTFB_BLOCKS}")
    sys.exit(0 if {"store": store, "load": load}[a.mode](a) else 1)


if __name__ == "__main__":
    main()
