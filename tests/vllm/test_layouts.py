"""test_layouts.py — the KV layouts vLLM's CPU backend runs beyond the
plain one: MLA (a tiny DeepSeek-V2: one latent of 576 per token, blocks of
16) and tensor parallelism 2 (each rank stores and loads its own part; a
chunk is a hit only when both parts are in kvtierd)."""

from typing import Any

from test_engine import CHUNK, SCHEDULING_NOISE, same_outputs, tokens

# Two ranks on two cores: one core each, none kept back (vLLM's CPU backend reserves
# one by default and then refuses two workers on a single NUMA node).
TP2 = {"tensor_parallel_size": 2,
       "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}}


def store_then_hit(daemon, engine, compare: bool = True, **job: Any) -> dict[str, Any]:
    """Engine 1 stores 3 prompts of 2 whole chunks and a tail; engine 2 asks prompts sharing
    those chunks and hits every chunk; its tokens equal an engine's without the connector,
    logprobs within scheduling noise (when compare). kvtierd's /v1/stats after it."""
    stored = [tokens(2 * CHUNK + 30, 70 + i) for i in range(3)]
    asked = [p[:2 * CHUNK] + tokens(40, 80 + i) for i, p in enumerate(stored)]
    want = engine(asked, **job) if compare else None
    engine(stored, socket=daemon.socket, **job)
    got = engine(asked, socket=daemon.socket, **job)
    if compare:
        same_outputs(got, want, SCHEDULING_NOISE)
    assert got["counters"]["external_prefix_cache_hits"] == 3 * 2 * CHUNK
    assert [o["num_cached_tokens"] for o in got["outputs"]] == [2 * CHUNK] * 3
    return daemon.stats()


def test_mla(daemon, engine, mla_model):
    """Stored and loaded, counted exactly; outputs not compared: vLLM's MLA on the CPU is
    noisy beyond what a comparison could tell from a wrong block. Without any connector,
    the same prompt's first logprob moved by 7.9e-3 between a batch of three and a batch
    of one, and a near-tie flipped its token (2026-12-07). The MLA layout's bytes are
    checked exactly by tests/python/test_connector.py (test_layouts_and_mla)."""
    stats = store_then_hit(daemon, engine, compare=False, model=mla_model, block_size=16)
    l1 = stats["l1"]
    # One latent copy a chunk: 8 blocks of 16 tokens, 2 layers, 576 bf16 values a token.
    assert l1["bytes_stored"] == l1["parts_stored"] * 128 * 2 * 576 * 2
    assert (l1["parts_stored"], l1["loads"], l1["leases_active"]) == (6, 6, 0)


def test_tensor_parallel_two(daemon, engine):
    stats = store_then_hit(daemon, engine, **TP2)
    l1 = stats["l1"]
    # A part per rank: each rank holds 1 of the 2 KV heads.
    assert l1["bytes_stored"] == l1["parts_stored"] * 128 * 2 * 1 * 128 * 2
    assert (l1["parts_stored"], l1["loads"], l1["leases_active"]) == (12, 12, 0)
