"""test_binding.py — the kvtier package over libkvtier against a real kvtierd:
every call, byte-exact data, exact error codes, counters that moved."""

import errno
import os

import numpy as np
import pytest

import kvtier
from kvtier import KvtierError

BLOCK = 64 * 1024


def fill(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def keys(n, base=0):
    return [kvtier.key_chain([base + i] * 4, 4)[0] for i in range(n)]


def test_version_errors_and_key_chain():
    assert kvtier.version() == "0.1.0"
    assert "another block size" in kvtier.strerror(-4097)
    assert kvtier.strerror(-errno.ENOENT) == os.strerror(errno.ENOENT)
    ks = kvtier.key_chain(list(range(12)), 4)
    assert len(ks) == 3 and all(len(k) == kvtier.KEY_BYTES for k in ks)
    # A prefix's keys are the same whatever follows; a change carries down the chain.
    assert kvtier.key_chain(list(range(8)) + [99, 98, 97, 96], 4)[:2] == ks[:2]
    changed = kvtier.key_chain([0, 1, 2, 3, 4, 5, 6, 77, 8, 9, 10, 11], 4)
    assert changed[0] == ks[0] and changed[1] != ks[1] and changed[2] != ks[2]
    assert kvtier.key_chain(list(range(11)), 4) == ks[:2]  # no key for a partial block


def test_sizes_and_key_chain_next():
    assert kvtier.parse_size("64MiB") == 64 << 20
    assert kvtier.parse_size("4096") == 4096
    with pytest.raises(KvtierError) as e:
        kvtier.parse_size("12 parsecs")
    assert e.value.code == -errno.EINVAL
    assert kvtier.format_size(64 << 20) == "64 MiB"
    k0 = kvtier.key_chain_next(None, [1, 2, 3, 4])
    k1 = kvtier.key_chain_next(k0, [5, 6, 7, 8])
    assert [k0, k1] == kvtier.key_chain(range(1, 9), 4)


def test_key_chain_each_is_key_chain_next_per_parent():
    parents = kvtier.key_chain(list(range(40)), 4)
    want = [kvtier.key_chain_next(p, [-2, 7]) for p in parents]
    assert kvtier.key_chain_each(parents, [-2, 7]) == want
    assert kvtier.key_chain_each(parents[:1], []) == [kvtier.key_chain_next(parents[0], [])]
    assert kvtier.key_chain_each([], [1]) == []
    with pytest.raises(ValueError):
        kvtier.key_chain_each([b"short"], [1])


def test_gpu_buffers_without_a_gpu(daemon):
    """This machine has no GPU: GPU staging is -KVT_ENOCUDA, said as such."""
    with kvtier.Client(daemon.socket, "m", BLOCK) as c:
        with pytest.raises(KvtierError) as e:
            c.create_gpu_buffer(0, BLOCK)
        assert e.value.code == -4099  # KVT_ENOCUDA
        assert "CUDA" in str(e.value)


def test_no_daemon_names_the_socket(tmp_path):
    path = str(tmp_path / "absent.sock")
    with pytest.raises(KvtierError) as e:
        kvtier.Client(path, "m", BLOCK)
    assert e.value.code == -errno.ENOENT
    assert path in str(e.value)


def test_store_load_byte_exact(daemon):
    with kvtier.Client(daemon.socket, "m", BLOCK, lanes=2) as c:
        assert c.lanes == 2
        c.ping()
        buf = c.create_buffer(4 * BLOCK)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        data = fill(3 * BLOCK, 1)
        view[:3 * BLOCK] = data
        ks = keys(3)
        st = c.store(buf.index, [(ks[i], i * BLOCK, BLOCK) for i in range(3)])
        assert st == [(0, BLOCK)] * 3
        view[:] = 0
        got = c.load(buf.index, [(ks[2], 0, BLOCK), (ks[0], BLOCK, BLOCK),
                                 (keys(1, 100)[0], 2 * BLOCK, BLOCK)])
        assert got[0] == (0, BLOCK) and got[1] == (0, BLOCK)
        assert got[2][0] == -errno.ENOENT
        assert np.array_equal(view[:BLOCK], data[2 * BLOCK:3 * BLOCK])
        assert np.array_equal(view[BLOCK:2 * BLOCK], data[:BLOCK])
        assert not view[2 * BLOCK:3 * BLOCK].any()  # a miss writes nothing
        s = daemon.stats()["dataplane"]
        assert s["blocks_stored"] == 3 and s["blocks_loaded"] == 2
        assert s["blocks_load_missing"] == 1
        # A block past the buffer's end: -ERANGE for it alone.
        st = c.store(buf.index, [(ks[0], 4 * BLOCK, BLOCK)])
        assert st[0][0] == -errno.ERANGE
        c.unregister_buffer(buf.index)
        with pytest.raises(KvtierError) as e:
            c.load(buf.index, [(ks[0], 0, BLOCK)])
        assert e.value.code == -errno.ENOENT
        buf.unmap()


def test_register_memfd_and_foreign_index(daemon):
    with kvtier.Client(daemon.socket, "m", BLOCK) as a, kvtier.Client(daemon.socket, "m", BLOCK) as b:
        fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, BLOCK)
        index = a.register_buffer(fd, BLOCK)
        with pytest.raises(KvtierError) as e:
            b.store(index, [(keys(1)[0], 0, BLOCK)])
        assert e.value.code == -errno.EPERM  # another client's buffer
        with pytest.raises(KvtierError) as e:
            a.register_buffer(fd, 2 * BLOCK)  # smaller than it says
        assert e.value.code == -errno.EINVAL
        os.close(fd)


def test_lookup_leases_and_release(daemon):
    with kvtier.Client(daemon.socket, "m", BLOCK) as c:
        buf = c.create_buffer(2 * BLOCK)
        ks = keys(3)
        c.store(buf.index, [(ks[0], 0, BLOCK), (ks[1], BLOCK, BLOCK)])
        r = c.lookup(ks, lease_ms=kvtier.LEASE_DEFAULT)
        assert r.hits == 2 and r.tiers == [1, 1, 0] and r.lease_id != 0
        assert daemon.stats()["l1"]["leases_active"] == 1
        c.release(r.lease_id)
        assert daemon.stats()["l1"]["leases_active"] == 0
        with pytest.raises(KvtierError) as e:
            c.release(r.lease_id)
        assert e.value.code == -errno.ENOENT
        assert c.lookup(ks).lease_id == 0  # no lease asked, none taken


def test_scheduler_role_and_namespace_conflict(daemon):
    with kvtier.Client(daemon.socket, "m", BLOCK, scheduler=True) as s:
        assert s.lookup(keys(2)).hits == 0
        with pytest.raises(KvtierError) as e:
            s.create_buffer(BLOCK)
        assert e.value.code == -errno.EPERM
        # While the namespace is in use, another block size is refused.
        with pytest.raises(KvtierError) as e:
            kvtier.Client(daemon.socket, "m", 2 * BLOCK)
        assert e.value.code == -4097  # KVT_ENSCONFLICT


def test_asynchronous_requests(daemon):
    with kvtier.Client(daemon.socket, "m", BLOCK, lanes=2) as c:
        buf = c.create_buffer(2 * BLOCK)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        view[:BLOCK] = fill(BLOCK, 5)
        k = keys(1)[0]
        sid = c.submit_store(buf.index, [(k, 0, BLOCK)], lane=1)
        assert c.wait(sid, lane=1) == (sid, 0, [(0, BLOCK)])
        with pytest.raises(KvtierError) as e:
            c.wait(sid, lane=1)  # taken already
        assert e.value.code == -errno.ENOENT
        lid = c.submit_load(buf.index, [(k, BLOCK, BLOCK)], lane=0)
        kid = c.submit_lookup([k], lane=0)
        done = {}
        while len(done) < 2:
            for rid, status, result in c.poll(lane=0, timeout_ms=10000):
                done[rid] = (status, result)
        assert done[lid] == (0, [(0, BLOCK)])
        assert done[kid][0] == 0 and done[kid][1].hits == 1
        assert np.array_equal(view[BLOCK:], view[:BLOCK])


def host_cache(layers, num_blocks, block_size=4, heads=2, dim=8, layout="flash_attn", seed=0):
    rng = np.random.default_rng(seed)
    shape = {"flash_attn": (2, num_blocks, block_size, heads, dim),
             "flash_infer": (num_blocks, 2, block_size, heads, dim)}[layout]
    return [rng.integers(0, 2 ** 15, shape, dtype=np.int16) for _ in range(layers)]


def block_of(cache, layout, b):
    return [t[:, b] if layout == "flash_attn" else t[b] for t in cache]


@pytest.mark.parametrize("layout", ["flash_attn", "flash_infer"])
def test_pipeline_host_round_trip_other_block_ids(daemon, layout):
    src = host_cache(3, 10, layout=layout, seed=1)
    dst = host_cache(3, 10, layout=layout, seed=2)
    ls, ld = kvtier.KVLayout.from_tensors(src, layout), kvtier.KVLayout.from_tensors(dst, layout)
    assert ls.block_bytes == 3 * 2 * 4 * 2 * 8 * 2
    ks = keys(4, 50)
    with kvtier.Pipeline(daemon.socket, "pl", ls, buffer_blocks=2) as p:
        p.submit_store(1, ks, [0, 3, 5, 9])
        assert p.drain(60000)
        assert [(f.req_id, f.status, f.failed) for f in p.finished(load=False)] == [(1, 0, [])]
    with kvtier.Pipeline(daemon.socket, "pl", ld, buffer_blocks=2) as p:
        assert p.client.lookup(ks).hits == 4  # lane 0 is the caller's
        missing = keys(1, 999)[0]
        p.submit_load(7, ks[:3] + [missing], [8, 1, 2, 4])
        assert p.wait_finished(load=True, timeout_ms=60000)
        (f,) = p.finished(load=True)
        assert (f.req_id, f.status, f.failed) == (7, -errno.ENOENT, [3])
        stats = p.stats()
        assert stats["requests_finished"] == 1 and stats["blocks_failed"] == 1
    for s_id, d_id in [(0, 8), (3, 1), (5, 2)]:
        for a, b in zip(block_of(src, layout, s_id), block_of(dst, layout, d_id)):
            assert np.array_equal(a, b)


def test_layout_refuses_what_it_cannot_describe():
    t = np.zeros((2, 4, 4, 2, 8), dtype=np.float16)
    with pytest.raises(ValueError, match="contiguous"):
        kvtier.KVLayout.from_tensors([t.transpose(0, 2, 1, 3, 4)])  # tokens across blocks
    with pytest.raises(ValueError, match="dimensions"):
        kvtier.KVLayout.from_tensors([np.zeros((4, 4), dtype=np.float16)])
    with pytest.raises(ValueError, match="unknown KV cache layout"):
        kvtier.KVLayout.from_tensors([t], "flash")
    with pytest.raises(ValueError, match="one shape"):
        kvtier.KVLayout.from_tensors([t, np.zeros((2, 5, 4, 2, 8), dtype=np.float16)])


def test_layout_takes_a_block_in_any_interior_order():
    """A block's bytes are one run whatever the order of its heads and tokens; the
    order is named (it goes into the namespace: HND bytes never meet NHD readers)."""
    t = np.zeros((2, 4, 4, 2, 8), dtype=np.float16)
    nhd = kvtier.KVLayout.from_tensors([t])
    hnd = kvtier.KVLayout.from_tensors([np.zeros((2, 4, 2, 4, 8), np.float16).transpose(0, 1, 3, 2, 4)])
    assert (nhd.interior, hnd.interior) == ("NHC", "HNC")
    assert nhd.block_bytes == hnd.block_bytes == 2 * 4 * 2 * 8 * 2
    # vLLM's [blocks, heads, tokens, content] view, K and V in the content: one plane
    cpu = kvtier.KVLayout.from_tensors([np.zeros((6, 2, 32, 128), np.float16)] * 3, "blocks")
    assert (cpu.interior, cpu.block_size, cpu.num_blocks) == ("HNC", 32, 6)
    assert (cpu.c.planes, cpu.c.chunk_bytes, cpu.c.block_stride) == (1, 2 * 32 * 128 * 2, 2 * 32 * 128 * 2)
    assert cpu.block_bytes == 3 * 2 * 32 * 128 * 2
    cross = np.zeros((3, 2, 4, 4, 2, 8), dtype=np.float16)
    lay = kvtier.KVLayout.from_cross_layer(cross)
    assert lay.num_layers == 3 and lay.num_blocks == 4 and lay.block_size == 4
    assert lay.block_bytes == 3 * 2 * 4 * 2 * 8 * 2


def test_pipeline_chunks_of_several_cache_blocks(daemon):
    """A key names ids_per_block cache blocks: a chunk, stored and loaded whole."""
    src = host_cache(2, 12, seed=3)
    dst = host_cache(2, 12, seed=4)
    ls, ld = kvtier.KVLayout.from_tensors(src), kvtier.KVLayout.from_tensors(dst)
    ks = keys(2, 70)
    with kvtier.Pipeline(daemon.socket, "chunks", ls, buffer_blocks=1, ids_per_block=3) as p:
        assert p.block_bytes == 3 * ls.block_bytes
        with pytest.raises(ValueError, match="3 cache blocks each"):
            p.submit_store(1, ks, [0, 1, 2])
        p.submit_store(1, ks, [4, 0, 7, 11, 2, 5])
        assert p.drain(60000)
        assert p.finished(load=False)[0].status == 0
    with kvtier.Pipeline(daemon.socket, "chunks", ld, buffer_blocks=2, ids_per_block=3) as p:
        p.submit_load(2, ks, [1, 2, 3, 6, 8, 9])
        assert p.drain(60000)
        assert p.finished(load=True)[0].status == 0
    for s_id, d_id in zip([4, 0, 7, 11, 2, 5], [1, 2, 3, 6, 8, 9]):
        for a, b in zip(block_of(src, "flash_attn", s_id), block_of(dst, "flash_attn", d_id)):
            assert np.array_equal(a, b)
