"""test_engine.py — KvtierConnector inside real vLLM engines on the CPU,
against a real kvtierd: one engine stores, a second (a new process, so
vLLM's own prefix cache is empty) hits, and both give exactly the outputs
of an engine without the connector.

The model's blocks are 32 tokens (vLLM's CPU attention wants multiples of
32) and the connector's default chunk is 4 of them: 128 tokens a kvtier
block."""

import random
from typing import Any

CHUNK = 128


def tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 1000) for _ in range(n)]


# Engine 1's prompts, and engine 2's, each sharing its prefix with one of them.
STORED = {
    "long": tokens(3 * CHUNK + 40, 1),      # 3 whole chunks stored
    "partial": tokens(3 * CHUNK + 10, 2),   # 3 whole chunks stored; engine 2 shares 1.5
    "exact": tokens(2 * CHUNK, 3),          # exactly 2 chunks
    "short": tokens(100, 4),                # less than a chunk: nothing stored
}
ASKED = {
    "long": STORED["long"][:3 * CHUNK] + tokens(60, 11),        # 3 chunks hit
    "partial": STORED["partial"][:200] + tokens(100, 12),       # chunk 0 hits, chunk 1 differs
    "exact": list(STORED["exact"]),                             # 1 hit: the last token is computed
    "short": STORED["short"] + tokens(100, 14),                 # nothing to hit
}
STORED_CHUNKS = {"long": 3, "partial": 3, "exact": 2, "short": 0}
HIT_CHUNKS = {"long": 3, "partial": 1, "exact": 1, "short": 0}
# What engine 2 saves of its own (prompt and 4 generated tokens, whole chunks, hits
# left out): "partial" its chunk 1, "short" its chunk 0, "exact" its chunk 1 again
# (the last token's chunk was no hit; kvtierd has it: a duplicate).
NEW_CHUNKS, DUPLICATE_CHUNKS = 2, 1


# vLLM's CPU attention sums in an order that follows the batch and the block layout:
# the same KV bytes scheduled differently (preempted, or loaded into other blocks than
# a local prefix hit shares) give logprobs that differ by ~1e-5. Where scheduling
# differs, logprobs are compared to this; a wrong block moves them by ~0.1 (zeroing
# every loaded block moved the first one by 0.24). Restored bytes themselves are
# compared exactly in test_scheduler.py.
SCHEDULING_NOISE = 1e-3


def same_outputs(got: dict[str, Any], want: dict[str, Any], tol: float = 0.0) -> None:
    """Token ids identical and their logprobs identical (or within tol), prompt by prompt."""
    for i, (g, w) in enumerate(zip(got["outputs"], want["outputs"], strict=True)):
        assert g["token_ids"] == w["token_ids"], f"prompt {i}: tokens differ"
        if tol == 0.0:
            assert g["logprobs"] == w["logprobs"], f"prompt {i}: logprobs differ"
            continue
        for j, (a, b) in enumerate(zip(g["logprobs"], w["logprobs"], strict=True)):
            assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol for k in a), \
                f"prompt {i} token {j}: logprobs {a} against {b}"


def test_store_then_hit(daemon, engine):
    names = list(STORED)
    ref = engine([STORED[n] for n in names] + [ASKED[n] for n in names])
    want_stored = {"outputs": ref["outputs"][:len(names)]}
    want_asked = {"outputs": ref["outputs"][len(names):]}

    first = engine([STORED[n] for n in names], socket=daemon.socket)
    same_outputs(first, want_stored)
    l1 = daemon.stats()["l1"]
    stored = sum(STORED_CHUNKS.values())
    assert (l1["parts_stored"], l1["parts_duplicate"], l1["loads"]) == (stored, 0, 0)
    chunk_bytes = l1["bytes_stored"] // stored
    assert chunk_bytes == 4 * 32 * 2 * 2 * 2 * 64 * 2  # blocks, tokens, layers, K+V, heads, dim, bf16
    assert first["counters"]["external_prefix_cache_hits"] == 0

    second = engine([ASKED[n] for n in names], socket=daemon.socket)
    same_outputs(second, want_asked)
    hits = sum(HIT_CHUNKS.values())
    assert second["counters"]["external_prefix_cache_hits"] == hits * CHUNK
    assert [o["num_cached_tokens"] for o in second["outputs"]] == \
        [HIT_CHUNKS[n] * CHUNK for n in names]
    l1 = daemon.stats()["l1"]
    assert (l1["loads"], l1["bytes_loaded"]) == (hits, hits * chunk_bytes)
    assert (l1["parts_stored"], l1["parts_duplicate"]) == (stored + NEW_CHUNKS, DUPLICATE_CHUNKS)
    assert l1["leases_active"] == 0 and l1["pinned_items"] == 0


# A pool of 20 blocks of 32 tokens (32 KiB each: 2 layers, 2 heads, 32 tokens, K|V of 64,
# bf16); each request grows to 11 (288 prompt tokens and 64 generated): two are admitted,
# then one is preempted to let the other grow.
SMALL_POOL = {"kv_cache_bytes": 20 * 2 * 2 * 32 * 128 * 2, "max_model_len": 512,
              "max_tokens": 64, "prefix_caching": False}


def test_loads_under_vllms_own_preemption(daemon, engine):
    stored = [tokens(288, 40 + i) for i in range(4)]
    asked = [p[:2 * CHUNK] + tokens(32, 60 + i) for i, p in enumerate(stored)]
    want = engine(asked, **SMALL_POOL)
    assert want["counters"]["num_preemptions"] > 0

    engine(stored, socket=daemon.socket, **SMALL_POOL)
    l1 = daemon.stats()["l1"]
    assert l1["parts_stored"] == 4 * 2  # 352 tokens at the end: 2 whole chunks each

    got = engine(asked, socket=daemon.socket, **SMALL_POOL)
    same_outputs(got, want, SCHEDULING_NOISE)
    assert got["counters"]["num_preemptions"] > 0
    # Every request's first schedule loaded its 2 chunks; a preempted one loads again.
    assert got["counters"]["external_prefix_cache_hits"] >= 4 * 2 * CHUNK
    l1 = daemon.stats()["l1"]
    assert l1["loads"] >= 8 and l1["load_misses"] == 0
    assert (l1["leases_active"], l1["pinned_items"]) == (0, 0)
