"""test_hf.py — kvtier.hf end to end on CPU: a tiny decoder's prompt KV
saved by one store and restored by a fresh one gives, bit for bit, the
logits and tokens of computing the same way; a corrupted L2 block is a miss
and a recompute, never other tokens; with layer groups, a chunk is one block
per group, groups land in order and a failed group stops the callbacks."""

import pytest
import torch

from kvtier.hf import PrefixStore, block_key, grouped_area, prefix_keys
from l2file import flip_data_byte
from tiny_decoder import MiniCache, TinyDecoder, greedy

C = 16              # tokens per chunk
STEPS = 16


def prompt(n, seed=1):
    return torch.randint(0, 101, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def store(socket, groups=1, area=None):
    return PrefixStore(socket, "tiny", num_layers=3, num_kv_heads=2, head_dim=16,
                       dtype=torch.float32, chunk_tokens=C, max_tokens=512, staging_chunks=4,
                       layer_groups=groups, area=area)


def canonical(model, tokens, cache=None, start=0):
    """The schedule both processes use: all but the last token in one prefill (from start
    when a prefix of start tokens was restored), then the last token, then greedy decoding."""
    cache = cache or MiniCache()
    if start < len(tokens) - 1:
        model(tokens[start:-1], cache)
    return greedy(model, cache, tokens[-1:], STEPS), cache


def saved_by_a(socket, model, tokens, groups=1):
    """ "Process A": the prefill of all but the last token, saved; its cache."""
    with store(socket, groups) as a:
        cache = MiniCache()
        model(tokens[:-1], cache)
        assert a.save(tokens[:-1], cache) == len(tokens) - 1
    return cache


def test_restore_is_bit_exact_to_the_token(daemon):
    model = TinyDecoder()
    tokens = prompt(4 * C + 7)       # 4 whole chunks and a tail of 6 before the last token
    cache = saved_by_a(daemon.socket, model, tokens)
    p = len(tokens) - 1
    # "Process B": a fresh store and cache; the prefix restored, the last token computed.
    with store(daemon.socket) as b:
        assert b.cached_tokens(tokens[:-1]) == p
        restored, n = b.restore(tokens[:-1], MiniCache)
        assert n == p and restored.get_seq_length() == p
        for i in range(3):  # the restored KV is the prefill's, byte for byte
            assert torch.equal(restored.layers[i].keys, cache.layers[i].keys[:, :, :p])
            assert torch.equal(restored.layers[i].values, cache.layers[i].values[:, :, :p])
        (logits, toks), _ = canonical(model, tokens, restored, start=n)
        assert b.stats == {"saved_tokens": 0, "restored_tokens": p, "failed_chunks": 0}
    (want_logits, want_toks), _ = canonical(model, tokens)
    assert toks == want_toks
    for got, want in zip(logits, want_logits):
        assert torch.equal(got, want)  # bit for bit
    # Against one prefill of the whole prompt (another reduction order): close, same token.
    one = model(tokens, MiniCache())[-1]
    assert torch.allclose(one, want_logits[0], atol=1e-4, rtol=1e-4)
    assert int(one.argmax()) == want_toks[0]


def test_a_tail_serves_only_its_own_tokens(daemon):
    model = TinyDecoder()
    tokens = prompt(4 * C + 7)
    saved_by_a(daemon.socket, model, tokens)
    with store(daemon.socket) as b:
        other_tail = tokens[:4 * C + 5] + [(tokens[4 * C + 5] + 1) % 101]
        longer = tokens[:-1] + prompt(C, seed=9)   # the tail is now inside a whole chunk
        shorter = tokens[:4 * C + 3]
        for t in (other_tail, longer, shorter):
            assert b.cached_tokens(t) == 4 * C
            assert b.load(t) == 4 * C
        assert b.load(tokens[:4 * C]) == 4 * C      # no tail: the whole chunks
        assert b.load(tokens[:-1]) == len(tokens) - 1


def test_loads_land_in_the_callers_area(daemon):
    model = TinyDecoder()
    tokens = prompt(3 * C + 4, seed=3)
    cache = saved_by_a(daemon.socket, model, tokens)
    p = len(tokens) - 1
    area = [(torch.full((1, 2, 4 * C, 16), 7.0), torch.full((1, 2, 4 * C, 16), 7.0))
            for _ in range(3)]
    with PrefixStore(daemon.socket, "tiny", num_layers=3, num_kv_heads=2, head_dim=16,
                     dtype=torch.float32, chunk_tokens=C, area=area) as b:
        assert b.capacity == 4 * C
        assert b.load(tokens[:-1]) == p
    for i, (k, v) in enumerate(area):
        assert torch.equal(k[:, :, :p], cache.layers[i].keys)
        assert torch.equal(v[:, :, :p], cache.layers[i].values)
        assert torch.count_nonzero(k[:, :, p:4 * C]) == 0   # the tail block's zeros
    # The wrong shape of area is refused by name.
    with pytest.raises(ValueError, match="is not"):
        PrefixStore(daemon.socket, "tiny", num_layers=3, num_kv_heads=2, head_dim=16,
                    dtype=torch.float32, chunk_tokens=C,
                    area=[(torch.zeros(1, 3, C, 16), torch.zeros(1, 3, C, 16))] * 3)


def test_layer_groups_land_in_order_one_block_per_group(daemon):
    model = TinyDecoder()
    tokens = prompt(4 * C + 7, seed=4)
    cache = saved_by_a(daemon.socket, model, tokens, groups=3)
    p = len(tokens) - 1
    assert daemon.stats()["l1"]["items"] == 3 * 5       # 4 whole chunks and a tail, x 3 groups
    area = grouped_area(3, 2, 8 * C, 16, torch.float32)
    calls = []
    with store(daemon.socket, 3, area) as b:
        assert b.cached_tokens(tokens[:-1]) == p
        assert b.load(tokens[:-1], on_group=lambda g, n: calls.append((g, n))) == p
        assert b.stats["failed_chunks"] == 0
    assert calls == [(0, p), (1, p), (2, p)]
    for i, (k, v) in enumerate(area):
        assert torch.equal(k[:, :, :p], cache.layers[i].keys)
        assert torch.equal(v[:, :, :p], cache.layers[i].values)
    # The same prompt without groups is another namespace: nothing cached for it.
    with store(daemon.socket) as plain:
        assert plain.cached_tokens(tokens[:-1]) == 0


def test_layer_groups_need_a_grouped_area(daemon):
    with pytest.raises(ValueError, match="do not divide"):
        store(daemon.socket, groups=2)
    per_layer = [(torch.zeros(1, 2, 4 * C, 16), torch.zeros(1, 2, 4 * C, 16)) for _ in range(3)]
    with pytest.raises(ValueError, match="not 3 groups at one offset"):
        store(daemon.socket, 3, per_layer)


def test_corrupt_l2_block_is_a_miss_then_a_recompute(make_daemon, tmp_path):
    l2 = str(tmp_path / "l2")
    d = make_daemon("--l2-path", l2, "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    model = TinyDecoder()
    tokens = prompt(6 * C + 3, seed=2)
    saved_by_a(d.socket, model, tokens)
    # Everything to L2, then one byte of chunk 2's record flipped on disk.
    d.evict_to_l2()
    # A restart: the blocks are read from the disk, not from the open region's buffer.
    assert d.stop() == 0
    assert flip_data_byte(l2, prefix_keys(tokens[:-1], C)[2], 8 << 20) == 1
    d = make_daemon("--l2-path", l2, "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    with store(d.socket) as b:
        restored, n = b.restore(tokens[:-1], MiniCache)
        assert n == 2 * C              # chunks 0 and 1 only: chunk 2 is corrupt
        (logits, toks), _ = canonical(model, tokens, restored, start=n)
    l2s = d.stats()["l2"]
    # Found by the scan at start (dropped) or by the read's checksum (a miss).
    assert l2s["recovery_dropped"] + l2s["checksum_failures"] >= 1
    (want_logits, want_toks), _ = canonical(model, tokens)
    assert toks == want_toks           # never other tokens



@pytest.mark.parametrize("bad_group", [0, 1])
def test_a_corrupt_group_block_stops_the_groups_after_it(make_daemon, tmp_path, bad_group):
    """The LOOKUP finds every block (the index is fine), the load of one group's chunk 2 fails
    its checksum: groups before it are reported landed, it and those after it are not, and
    the prefix ends at chunk 2 in every group."""
    l2 = str(tmp_path / "l2")
    flags = ("--l2-path", l2, "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    d = make_daemon(*flags)
    model = TinyDecoder()
    tokens = prompt(6 * C + 3, seed=5)
    cache = saved_by_a(d.socket, model, tokens, groups=3)
    d.evict_to_l2()
    assert d.stop() == 0
    key = block_key(prefix_keys(tokens[:-1], C)[2], bad_group, 3)
    assert flip_data_byte(l2, key, 8 << 20) == 1
    d = make_daemon(*flags)
    calls = []
    with store(d.socket, 3) as b:
        n = b.load(tokens[:-1], on_group=lambda g, n: calls.append(g))
        area = b.area
    assert n == 2 * C
    assert calls == list(range(bad_group))
    for i, (k, v) in enumerate(area):
        assert torch.equal(k[:, :, :n], cache.layers[i].keys[:, :, :n])
    l2s = d.stats()["l2"]
    assert l2s["recovery_dropped"] + l2s["checksum_failures"] >= 1
