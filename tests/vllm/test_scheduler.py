"""test_scheduler.py — vLLM's real Scheduler (CPU device config, no model)
with KvtierConnector on both sides: the scheduler's own connector, and a
worker-role connector over CPU KV tensors in vLLM's [blocks, heads, tokens,
K|V] layout that stands where the model runner would. The test plays the
model: it writes each computed block's bytes from its token ids, samples a
fixed token, and hands vLLM's ModelRunnerOutput back. vLLM's own prefix
cache is off: every prefix hit is kvtierd's. Asserted: restored
bytes, vLLM's block pool back to all free, kvtierd's leases back to none."""

from typing import Any

import pytest
import torch
from vllm.engine.arg_utils import EngineArgs
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.structured_output import StructuredOutputManager

from engine import BLOCK_SIZE, MODEL, kv_transfer_config
from kvtier import vllm as kvtier_vllm
from kvtier.vllm import KvtierConnector
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

LAYERS, HEADS, CONTENT = 2, 2, 128          # the model's: 2 KV heads, K|V of 64 each
CHUNK = 4 * BLOCK_SIZE
NUM_BLOCKS = 48
LAYER_NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
SAMPLED = 7


@pytest.fixture(autouse=True)
def rank_zero(monkeypatch):
    """The worker connector asks vLLM's parallel state for its tensor-parallel rank, which
    a model runner sets up with torch.distributed; here there is one rank: 0."""
    monkeypatch.setattr(kvtier_vllm, "_tp_rank", lambda: 0)


class Harness:
    """A Scheduler and a worker connector over one KV cache of NUM_BLOCKS blocks."""

    def __init__(self, socket: str, num_blocks: int = NUM_BLOCKS) -> None:
        args = EngineArgs(model=MODEL, load_format="dummy", skip_tokenizer_init=True,
                          dtype="bfloat16", block_size=BLOCK_SIZE, max_model_len=1024,
                          enforce_eager=True, max_num_seqs=4, enable_prefix_caching=False,
                          kv_transfer_config=kv_transfer_config(socket, {"reconnect_ms": 0}))
        self.config = args.create_engine_config()
        self.config.cache_config.kv_cache_layout = "LBHNC"
        self.config.cache_config.num_gpu_blocks = num_blocks
        spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=HEADS, head_size=CONTENT // 2,
                                 dtype=torch.bfloat16)
        kcc = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(LAYER_NAMES, spec)],
                            kv_cache_layout="LBHNC")
        self.num_blocks = num_blocks
        self.sched = Scheduler(self.config, kcc, StructuredOutputManager(self.config),
                               block_size=BLOCK_SIZE)
        self.worker = KvtierConnector(self.config, KVConnectorRole.WORKER, kcc)
        self.cache = torch.zeros((num_blocks, LAYERS, HEADS, BLOCK_SIZE, CONTENT),
                                 dtype=torch.bfloat16)
        self.worker.register_kv_caches({n: self.cache[:, i] for i, n in enumerate(LAYER_NAMES)})
        hash_fn = get_hash_fn_by_name(self.config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)  # as vLLM's engine core does
        self.hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
        self.requests: dict[str, Request] = {}

    def add(self, rid: str, prompt: list[int], max_tokens: int = 2) -> Request:
        req = Request(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), None,
                      block_hasher=self.hasher)
        self.sched.add_request(req)
        self.requests[rid] = req
        return req

    def block_ids(self, rid: str) -> list[int]:
        return list(self.sched.kv_cache_manager.get_block_ids(rid)[0])

    @staticmethod
    def block_bytes(req: Request, b: int) -> torch.Tensor:
        """What the "model" writes into block b of req: a function of its tokens."""
        toks = req.all_token_ids[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE]
        g = torch.Generator().manual_seed(hash(tuple(toks)) & 0x7FFFFFFF)
        return torch.randn((LAYERS, HEADS, BLOCK_SIZE, CONTENT), generator=g).to(torch.bfloat16)

    def step(self) -> Any:
        return self.finish_step(self.sched.schedule())

    def finish_step(self, out: Any) -> Any:
        """The worker's and the model's half of a step the scheduler scheduled."""
        self.worker.bind_connector_metadata(out.kv_connector_metadata)
        self.worker.start_load_kv(None)
        self.worker.worker.wait_all(60000)  # the step's transfers, before get_finished
        req_ids, sampled = [], []
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests[rid]
            ids = self.block_ids(rid)
            end = req.num_computed_tokens  # schedule() has counted the step's tokens in
            for b in range((end - n) // BLOCK_SIZE, -(-end // BLOCK_SIZE)):
                if (b + 1) * BLOCK_SIZE <= req.num_prompt_tokens:
                    self.cache[ids[b]] = self.block_bytes(req, b)
            req_ids.append(rid)
            sampled.append([SAMPLED] if end >= req.num_tokens else [])
        sending, recving = self.worker.get_finished(out.finished_req_ids)
        invalid = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled,
                                kv_connector_output=KVConnectorOutput(
                                    finished_sending=sending, finished_recving=recving,
                                    invalid_block_ids=invalid))
        self.sched.update_from_output(out, mro)
        return out

    def run(self, max_steps: int = 200) -> None:
        for _ in range(max_steps):
            if not self.sched.has_requests() and not self.pending_frees():
                return
            self.step()
        raise AssertionError("requests still unfinished after the step limit")

    def pending_frees(self) -> bool:
        return self.free_blocks() != self.num_blocks - 1

    def free_blocks(self) -> int:
        return self.sched.kv_cache_manager.block_pool.get_num_free_blocks()

    def close(self) -> None:
        self.worker.shutdown()
        self.sched.shutdown()


def prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 1000, (n,), generator=g).tolist()


@pytest.fixture
def harness(daemon):
    h = Harness(daemon.socket)
    yield h
    h.close()


def test_save_then_async_load_byte_exact(daemon, harness):
    h = harness
    a = h.add("a", prompt(3 * CHUNK + 10, 1))
    h.run()
    assert h.free_blocks() == h.num_blocks - 1  # a's blocks came back after its save
    assert daemon.stats()["l1"]["parts_stored"] == 3

    b = h.add("b", a.prompt_token_ids[:3 * CHUNK] + prompt(20, 2))
    out = h.sched.schedule()
    assert b.status == RequestStatus.WAITING_FOR_REMOTE_KVS  # the load is asynchronous
    assert "b" not in out.num_scheduled_tokens
    h.finish_step(out)
    h.step()
    assert b.num_computed_tokens >= 3 * CHUNK
    ids = h.block_ids("b")
    for blk in range(3 * CHUNK // BLOCK_SIZE):
        assert torch.equal(h.cache[ids[blk]], Harness.block_bytes(a, blk)), f"block {blk}"
    h.run()
    assert h.free_blocks() == h.num_blocks - 1
    l1 = daemon.stats()["l1"]
    assert (l1["loads"], l1["leases_active"], l1["pinned_items"]) == (3, 0, 0)


def test_abort_during_load_frees_everything(daemon, harness):
    h = harness
    a = h.add("a", prompt(3 * CHUNK + 10, 3))
    h.run()
    b = h.add("b", a.prompt_token_ids[:3 * CHUNK] + prompt(20, 4))
    out = h.sched.schedule()
    assert b.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    h.worker.bind_connector_metadata(out.kv_connector_metadata)
    h.worker.start_load_kv(None)  # the load is out
    h.worker.clear_connector_metadata()
    h.sched.finish_requests("b", RequestStatus.FINISHED_ABORTED)
    h.run()
    assert h.free_blocks() == h.num_blocks - 1
    l1 = daemon.stats()["l1"]
    assert (l1["leases_active"], l1["pinned_items"]) == (0, 0)
    assert l1["parts_stored"] == 3  # the aborted request saved nothing


def test_load_error_is_recomputed(daemon, harness):
    h = harness
    a = h.add("a", prompt(2 * CHUNK + 10, 5))
    h.run()
    b = h.add("b", a.prompt_token_ids[:2 * CHUNK] + prompt(20, 6))
    out = h.sched.schedule()  # the lookup: hits, leased, the load in the metadata
    assert b.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    daemon.kill()             # the load fails
    h.worker.bind_connector_metadata(out.kv_connector_metadata)
    h.worker.start_load_kv(None)
    h.worker.worker.wait_all(60000)
    sending, recving = h.worker.get_finished(out.finished_req_ids)
    invalid = h.worker.get_block_ids_with_load_errors()
    h.worker.clear_connector_metadata()
    assert recving == {"b"} and len(invalid) == 2 * CHUNK // BLOCK_SIZE
    h.sched.update_from_output(out, ModelRunnerOutput(
        req_ids=[], req_id_to_index={}, kv_connector_output=KVConnectorOutput(
            finished_sending=sending, finished_recving=recving, invalid_block_ids=invalid)))
    h.run()  # b is recomputed and finishes; nothing is offered to load again
    assert b.is_finished() and b.num_computed_tokens >= b.num_prompt_tokens
    assert h.free_blocks() == h.num_blocks - 1


def test_a_preempted_request_loads_again(daemon):
    h = Harness(daemon.socket, num_blocks=24)
    try:
        a = h.add("a", prompt(2 * CHUNK + 10, 7))
        h.run()
        # Two requests of 9 blocks that share a's prefix and grow to 13 in a pool of 23:
        # vLLM preempts one, which loads its prefix again when it is scheduled again.
        b = h.add("b", a.prompt_token_ids[:2 * CHUNK] + prompt(8, 8), max_tokens=150)
        c = h.add("c", a.prompt_token_ids[:2 * CHUNK] + prompt(8, 9), max_tokens=150)
        h.run(max_steps=1000)
        assert b.is_finished() and c.is_finished()
        preempted = b.num_preemptions + c.num_preemptions
        assert preempted > 0
        assert h.free_blocks() == h.num_blocks - 1
        l1 = daemon.stats()["l1"]
        assert l1["loads"] == 2 * (2 + preempted)  # 2 chunks at each (re)schedule
        assert (l1["leases_active"], l1["pinned_items"]) == (0, 0)
    finally:
        h.close()
