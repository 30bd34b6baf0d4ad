"""test_hf.py — kvtier.hf end to end on CPU: a tiny decoder's prompt KV
saved by one store and restored by a fresh one gives, bit for bit, the
logits and tokens of computing the same way; a corrupted L2 block is a miss
and a recompute, never other tokens."""

import json
import os
import time
import urllib.request

import pytest
import torch

from kvtier.hf import PrefixStore
from tiny_decoder import MiniCache, TinyDecoder, greedy

C = 16              # tokens per chunk
STEPS = 16


def prompt(n, seed=1):
    return torch.randint(0, 101, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def store(socket):
    return PrefixStore(socket, "tiny", num_layers=3, num_kv_heads=2, head_dim=16,
                       dtype=torch.float32, chunk_tokens=C, max_tokens=512, staging_chunks=4)


def canonical(model, tokens, cache=None, start=0):
    """The schedule both processes use: the chunk-aligned prefix of all but the last token
    in one prefill (skipped when restored: start), then the rest, then greedy decoding."""
    p = (len(tokens) - 1) // C * C
    cache = cache or MiniCache()
    if start < p:
        model(tokens[start:p], cache)
    return greedy(model, cache, tokens[p:], STEPS), cache


def test_restore_is_bit_exact(daemon):
    model = TinyDecoder()
    tokens = prompt(4 * C + 7)
    p = (len(tokens) - 1) // C * C
    # "Process A": the prefix prefill, saved.
    with store(daemon.socket) as a:
        cache = MiniCache()
        model(tokens[:p], cache)
        assert a.save(tokens[:p], cache) == p
    # "Process B": a fresh store and cache; the prefix restored, the rest computed.
    with store(daemon.socket) as b:
        assert b.cached_tokens(tokens[:-1]) == p
        restored, n = b.restore(tokens[:-1], MiniCache)
        assert n == p and restored.get_seq_length() == p
        for i in range(3):  # the restored KV is the prefill's, byte for byte
            assert torch.equal(restored.layers[i].keys, cache.layers[i].keys[:, :, :p])
            assert torch.equal(restored.layers[i].values, cache.layers[i].values[:, :, :p])
        (logits, toks), _ = canonical(model, tokens, restored, start=n)
    (want_logits, want_toks), _ = canonical(model, tokens)
    assert toks == want_toks
    for got, want in zip(logits, want_logits):
        assert torch.equal(got, want)  # bit for bit
    # Against one prefill of the whole prompt (another reduction order): close, same token.
    one = model(tokens, MiniCache())[-1]
    assert torch.allclose(one, want_logits[0], atol=1e-4, rtol=1e-4)
    assert int(one.argmax()) == want_toks[0]


def settle_l2(d):
    for _ in range(2000):
        l2 = d.stats()["l2"]
        if l2["ios_queued"] == 0 and l2["ios_inflight"] == 0:
            return
        time.sleep(0.005)
    raise AssertionError("L2 did not settle")


def test_corrupt_l2_block_is_a_miss_then_a_recompute(make_daemon, tmp_path):
    l2 = str(tmp_path / "l2")
    d = make_daemon("--l2-path", l2, "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    model = TinyDecoder()
    tokens = prompt(6 * C + 3, seed=2)
    p = (len(tokens) - 1) // C * C
    with store(d.socket) as a:
        cache = MiniCache()
        model(tokens[:p], cache)
        assert a.save(tokens[:p], cache) == p
        chunk2 = cache.layers[0].keys[0, 0, 2 * C:3 * C].numpy().tobytes()
    # Everything to L2, then one byte of chunk 2's record flipped on disk.
    req = urllib.request.Request(f"http://127.0.0.1:{d.port}/v1/tiers/l1/evict", method="POST",
                                 data=json.dumps({"all": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    for _ in range(100):
        if json.load(urllib.request.urlopen(req))["complete"]:
            break
        settle_l2(d)
    settle_l2(d)
    assert d.stats()["l1"]["items"] == 0
    # A restart: the blocks are read from the disk, not from the open region's buffer.
    assert d.stop() == 0
    raw = bytearray(open(l2, "rb").read())
    at = raw.find(chunk2)
    assert at >= 0
    raw[at + 5] ^= 0x40
    with open(l2, "r+b") as f:
        f.seek(at + 5)
        f.write(bytes([raw[at + 5]]))
        f.flush()
        os.fsync(f.fileno())
    d = make_daemon("--l2-path", l2, "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    with store(d.socket) as b:
        restored, n = b.restore(tokens[:-1], MiniCache)
        assert n == 2 * C              # chunks 0 and 1 only: chunk 2 is corrupt
        logits, toks = greedy_from(model, tokens, restored, n)
    l2s = d.stats()["l2"]
    # Found by the scan at start (dropped) or by the read's checksum (a miss).
    assert l2s["recovery_dropped"] + l2s["checksum_failures"] >= 1
    (want_logits, want_toks), _ = canonical(model, tokens)
    assert toks == want_toks           # never other tokens


def greedy_from(model, tokens, cache, n):
    """The rest of the prompt after a restore of n tokens, computed, then decoding."""
    p = (len(tokens) - 1) // C * C
    if n < p:
        model(tokens[n:p], cache)
    return greedy(model, cache, tokens[p:], STEPS)
