"""test_connector.py — KvtierConnector driven the way vLLM's scheduler loop
drives it, against stand-in vllm modules (tests/python/stubs, which
tests/vllm/test_conformance.py holds to the installed vLLM) and a real kvtierd; the KV caches are numpy arrays, so the
worker path runs in host mode and every loaded byte is checked."""

import hashlib
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "stubs"))

import kvtier  # noqa: E402
from kvtier import vllm as kvtier_vllm  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1 import base  # noqa: E402

BLOCK_SIZE = 4          # tokens per vLLM block
CHUNK = 2               # vLLM blocks per kvtier block: 8 tokens
LAYERS, HEADS, DIM = 2, 2, 8
NUM_BLOCKS = 64

class Spec:
    def __init__(self, mla=False):
        self.block_size, self.num_kv_heads, self.head_size = BLOCK_SIZE, HEADS, DIM
        self.dtype = np.dtype("int16")
        self.use_mla = mla


def vllm_config(socket, tp=1, **extra):
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=dict(
            socket_path=socket, chunk_blocks=CHUNK, staging_blocks=4, **extra)),
        model_config=SimpleNamespace(served_model_name="toy"),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp))


def kv_cache_config(mla=False, layout="flash_attn"):
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(
        layer_names=[f"layer.{i}" for i in range(LAYERS)], kv_cache_spec=Spec(mla))],
        kv_cache_layout="BLHNC" if layout == "blocks" else None)


class Request:
    """What the connector reads of vLLM's Request; block hashes chained as vLLM's are."""

    def __init__(self, rid, tokens, **params):
        self.request_id = rid
        self.tokens = list(tokens)
        self.num_tokens = len(self.tokens)
        self.cache_salt = None
        self.kv_transfer_params = params or None
        h, self.block_hashes = b"seed", []
        for b in range(len(self.tokens) // BLOCK_SIZE):
            chunk = self.tokens[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE]
            h = hashlib.sha256(h + np.array(chunk, dtype=np.int64).tobytes()).digest()
            self.block_hashes.append(h)
        self.num_publishable_block_hashes = len(self.block_hashes)


class Engine:
    """A scheduler connector and its workers, each with its own KV cache."""

    def __init__(self, socket, tp=1, layout="flash_attn", mla=False, wrap=None, **extra):
        self.cfg = vllm_config(socket, tp, **extra)
        self.kcc = kv_cache_config(mla, layout)
        self.sched = kvtier_vllm.KvtierConnector(self.cfg, base.KVConnectorRole.SCHEDULER,
                                                 self.kcc)
        self.workers, self.caches = [], []
        for rank in range(tp):
            parallel_state.RANK = rank
            w = kvtier_vllm.KvtierConnector(self.cfg, base.KVConnectorRole.WORKER, self.kcc)
            cache = new_cache(layout, mla)
            wrap = wrap or (lambda t: t)  # torch.from_numpy: the same memory as a tensor
            w.register_kv_caches({f"layer.{i}": wrap(t) for i, t in enumerate(cache)})
            self.workers.append(w)
            self.caches.append(cache)
        self.layout, self.mla = layout, mla

    def step(self, preempted=()):
        meta = self.sched.build_connector_meta(SimpleNamespace(preempted_req_ids=set(preempted)))
        for w in self.workers:
            w.bind_connector_metadata(meta)
            w.start_load_kv(None)
            w.wait_for_save()
            w.clear_connector_metadata()

    def finish(self):
        """Waits for the workers' transfers: (saved ids, loaded ids) every rank reported."""
        saves, loads = None, None
        for w in self.workers:
            w.worker.wait_all(60000)
            s, l = w.get_finished(set())
            s, l = s or set(), l or set()
            saves = s if saves is None else saves & s
            loads = l if loads is None else loads & l
        self.sched.update_connector_output(SimpleNamespace(finished_recving=loads))
        return saves, loads

    def close(self):
        for w in self.workers:
            w.shutdown()
        self.sched.shutdown()


def new_cache(layout, mla):
    """One tensor a layer. "blocks" is vLLM's [blocks, heads, tokens, K|V content] view of
    a cross-layer buffer (KVCacheLayout BLHNC): every layer's block side by side."""
    if layout == "blocks":
        buf = np.zeros((NUM_BLOCKS, LAYERS, HEADS, BLOCK_SIZE, 2 * DIM), dtype=np.int16)
        return [buf[:, i] for i in range(LAYERS)]
    if mla:
        shape = (NUM_BLOCKS, BLOCK_SIZE, DIM)
    elif layout == "flash_attn":
        shape = (2, NUM_BLOCKS, BLOCK_SIZE, HEADS, DIM)
    else:
        shape = (NUM_BLOCKS, 2, BLOCK_SIZE, HEADS, DIM)
    return [np.zeros(shape, dtype=np.int16) for _ in range(LAYERS)]


def block_views(eng, rank, block_id):
    cache = eng.caches[rank]
    layers = [cache[i] for i in range(LAYERS)]
    if eng.mla or eng.layout in ("flash_infer", "blocks"):
        return [t[block_id] for t in layers]
    return [t[:, block_id] for t in layers]


def compute(eng, req, block_ids):
    """What a forward pass leaves: each block's bytes follow from its hash (and rank)."""
    for rank in range(len(eng.workers)):
        for b, bid in enumerate(block_ids[:len(req.block_hashes)]):
            seed = int.from_bytes(req.block_hashes[b][:8], "little") + rank
            for v in block_views(eng, rank, bid):
                v[...] = np.random.default_rng(seed).integers(0, 2 ** 15, v.shape)


def check_loaded(eng, req, block_ids, nblocks):
    for rank in range(len(eng.workers)):
        for b in range(nblocks):
            seed = int.from_bytes(req.block_hashes[b][:8], "little") + (0 if eng.mla else rank)
            for v in block_views(eng, rank, block_ids[b]):
                want = np.random.default_rng(seed).integers(0, 2 ** 15, v.shape)
                assert np.array_equal(v, want.astype(np.int16)), f"rank {rank} block {b}"


def blocks(ids):
    return SimpleNamespace(get_block_ids=lambda: (list(ids),))


def serve_and_save(eng, req, ids):
    """A request computed from scratch, finished and saved."""
    assert eng.sched.get_num_new_matched_tokens(req, 0) == (0, False)
    compute(eng, req, ids)
    delay, _ = eng.sched.request_finished(req, ids)
    assert delay
    eng.step()
    saves, _ = eng.finish()
    assert saves == {req.request_id}


def load_and_check(eng, saved, dst):
    """A new request with saved's 24-token prompt: 2 chunks hit, loaded into dst, exact."""
    b = Request("b", range(24))
    assert eng.sched.get_num_new_matched_tokens(b, 0) == (16, True)
    eng.sched.update_state_after_alloc(b, blocks(dst), 16)
    eng.step()
    assert eng.finish()[1] == {"b"}
    check_loaded(eng, saved, dst, 4)


def test_shared_prefix_full_hit_capped_and_partial(daemon):
    eng = Engine(daemon.socket)
    try:
        a = Request("a", range(40))                 # 10 blocks: 5 chunks
        serve_and_save(eng, a, list(range(10)))
        # b shares a's first 32 tokens (4 chunks) then differs.
        b = Request("b", list(range(32)) + [999] * 12)
        assert eng.sched.get_num_new_matched_tokens(b, 0) == (32, True)
        assert eng.sched.get_num_new_matched_tokens(b, 0) == (32, True)  # no side effect
        assert daemon.stats()["l1"]["leases_active"] == 1
        ids = list(range(20, 31))
        eng.sched.update_state_after_alloc(b, blocks(ids), 32)
        eng.step()
        _, loads = eng.finish()
        assert loads == {"b"}
        check_loaded(eng, a, ids, 8)
        assert daemon.stats()["l1"]["leases_active"] == 0  # released once loaded
        assert not eng.workers[0].get_block_ids_with_load_errors()
        # The same prompt again: a full hit, capped so the last token is computed.
        c = Request("c", range(40))
        assert eng.sched.get_num_new_matched_tokens(c, 0) == (32, True)
        # From a chunk boundary a partial hit continues; from inside a chunk, none.
        d = Request("d", range(40))
        assert eng.sched.get_num_new_matched_tokens(d, 16) == (16, True)
        e = Request("e", range(40))
        assert eng.sched.get_num_new_matched_tokens(e, 4) == (0, False)
        # A miss.
        assert eng.sched.get_num_new_matched_tokens(Request("m", range(500, 540)), 0) == (0, False)
        stats = eng.workers[0].get_kv_connector_stats()
        assert stats.data["loaded_bytes"] == 4 * CHUNK * LAYERS * 2 * BLOCK_SIZE * HEADS * DIM * 2
    finally:
        eng.close()


def test_skip_flags_preemption_and_abort(daemon):
    eng = Engine(daemon.socket)
    try:
        a = Request("a", range(24))
        serve_and_save(eng, a, list(range(6)))
        assert eng.sched.get_num_new_matched_tokens(Request("s", range(24), kvtier_skip_load=True),
                                                    0) == (0, False)
        ns = Request("ns", range(100, 124), kvtier_skip_save=True)
        eng.sched.get_num_new_matched_tokens(ns, 0)
        assert eng.sched.request_finished(ns, list(range(6))) == (False, None)
        # Preempted after its lookup: the lease goes back and the load is cancelled.
        p = Request("p", range(24))
        assert eng.sched.get_num_new_matched_tokens(p, 0) == (16, True)
        eng.sched.update_state_after_alloc(p, blocks(range(30, 36)), 16)
        eng.step(preempted={"p"})
        assert daemon.stats()["l1"]["leases_active"] == 0
        eng.finish()
        # Rescheduled later: asked again, found again.
        assert eng.sched.get_num_new_matched_tokens(p, 0) == (16, True)
        # Aborted while its load is out: the lease goes, nothing is saved for it, and its
        # blocks wait until the workers say the load is over.
        eng.sched.update_state_after_alloc(p, blocks(range(30, 36)), 16)
        eng.step()
        assert eng.sched.request_finished(p, list(range(30, 36))) == (True, None)
        assert daemon.stats()["l1"]["leases_active"] == 0
        eng.step()
        saves, loads = eng.finish()
        assert saves == {"p"} and "p" not in loads
        assert daemon.stats()["dataplane"]["blocks_stored"] == 3  # a's three chunks only
    finally:
        eng.close()


def test_daemon_killed_mid_load_reports_errors_without_hanging(make_daemon):
    d = make_daemon()
    eng = Engine(d.socket)
    try:
        a = Request("a", range(40))
        serve_and_save(eng, a, list(range(10)))
        b = Request("b", range(40))
        assert eng.sched.get_num_new_matched_tokens(b, 0) == (32, True)
        ids = list(range(20, 30))
        eng.sched.update_state_after_alloc(b, blocks(ids), 32)
        d.kill()
        eng.step()
        _, loads = eng.finish()
        assert loads == {"b"}
        assert eng.workers[0].get_block_ids_with_load_errors() == set(ids[:8])
        # vLLM asks again from where the failed blocks start: no load is offered again
        # (the cached hit would fail the same way, and the request would never run).
        assert eng.sched.get_num_new_matched_tokens(b, 0) == (0, False)
        # With kvtierd gone, lookups miss and saves are dropped, counted.
        assert eng.sched.get_num_new_matched_tokens(Request("c", range(40)), 0) == (0, False)
        assert eng.sched.request_finished(Request("z", range(200, 240)), list(range(10)))[0]
        eng.step()
        saves, _ = eng.finish()
        assert saves == {"z"}
        assert eng.workers[0].worker.stats["saves_dropped"] >= 1
    finally:
        eng.close()


def test_reconnects_when_kvtierd_is_back(make_daemon):
    d = make_daemon()
    eng = Engine(d.socket, reconnect_ms=0)
    try:
        d.kill()
        assert eng.sched.get_num_new_matched_tokens(Request("x", range(40)), 0) == (0, False)
        assert eng.sched.scheduler.client is None  # lost
        z = Request("z", range(300, 340))          # a save while it is down: dropped
        assert eng.sched.request_finished(z, list(range(10)))[0]
        eng.step()
        assert eng.finish()[0] == {"z"}
        assert eng.workers[0].worker.pipeline is None  # lost
        d2 = make_daemon("--socket", d.socket)    # back on the same socket
        a = Request("a", range(40))
        serve_and_save(eng, a, list(range(10)))    # the worker's pipeline opened again
        b = Request("b", range(40))
        assert eng.sched.get_num_new_matched_tokens(b, 0) == (32, True)  # and the scheduler's
        assert d2.stats()["dataplane"]["blocks_stored"] == 5
    finally:
        eng.close()


def test_tensor_parallel_two_workers(daemon):
    eng = Engine(daemon.socket, tp=2)
    try:
        a = Request("a", range(24))
        serve_and_save(eng, a, list(range(6)))
        load_and_check(eng, a, list(range(40, 46)))  # each rank its own bytes
    finally:
        eng.close()


@pytest.mark.parametrize("layout,mla", [("flash_infer", False), ("blocks", False), ("mla", True)])
def test_layouts_and_mla(daemon, layout, mla):
    eng = Engine(daemon.socket, tp=2 if mla else 1, layout=layout, mla=mla)
    try:
        a = Request("a", range(24))
        ids = list(range(6))
        if mla:  # one latent copy: every rank holds rank 0's bytes
            compute(eng, a, ids)
            for rank in range(1, 2):
                for dst, src in zip(eng.caches[rank], eng.caches[0]):
                    dst[...] = src
            assert eng.sched.request_finished(a, ids)[0]
            eng.step()
            assert eng.finish()[0] == {"a"}
        else:
            serve_and_save(eng, a, ids)
        load_and_check(eng, a, list(range(50, 56)))
    finally:
        eng.close()


def test_no_daemon_at_start_names_the_socket(tmp_path):
    path = str(tmp_path / "none.sock")
    for role in (base.KVConnectorRole.SCHEDULER, base.KVConnectorRole.WORKER):
        with pytest.raises(kvtier.KvtierError) as e:
            c = kvtier_vllm.KvtierConnector(vllm_config(path), role, kv_cache_config())
            c.register_kv_caches({f"layer.{i}": t for i, t in
                                  enumerate(new_cache("flash_attn", False))})
        assert path in str(e.value)


def test_config_errors():
    with pytest.raises(ValueError, match="unknown kv_connector_extra_config"):
        kvtier.connector.ConnectorConfig.from_extra({"sockt": "x"}, 16, "m")
    with pytest.raises(ValueError, match="staging_depth"):
        kvtier.connector.ConnectorConfig.from_extra({"staging_depth": 1}, 16, "m")
    c = kvtier.connector.ConnectorConfig.from_extra({}, 16, "m")
    assert c.chunk_blocks == 8 and c.model_id == "m"  # 128 tokens of 16-token blocks
    hybrid = SimpleNamespace(kv_cache_groups=[1, 2])
    with pytest.raises(ValueError, match="hybrid"):
        kvtier_vllm.geometry_from(vllm_config("/x"), hybrid)


def test_cpu_torch_tensors(daemon):
    """The worker path on torch CPU tensors (strides and data_ptr read from torch)."""
    import torch
    eng = Engine(daemon.socket, wrap=torch.from_numpy)
    try:
        a = Request("a", range(24))
        serve_and_save(eng, a, list(range(6)))
        load_and_check(eng, a, list(range(10, 16)))
    finally:
        eng.close()
