"""vllm.py — KvtierConnector, the class vLLM loads
(`"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm"`):
a thin KVConnectorBase_V1 over kvtier.connector's scheduler and worker sides,
which import nothing of vLLM. What it reads of vLLM's objects is named here
and nowhere else (docs/vllm.md)."""

import logging

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from .client import Client
from .connector import ConnectorConfig, Geometry, SchedulerSide, StepMeta, WorkerSide

log = logging.getLogger("kvtier.connector")


try:  # where vLLM keeps it (2026); without it the stats are a plain object
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
except ImportError:  # pragma: no cover - depends on the vLLM version
    KVConnectorStats = object


class KvtierConnectorStats(KVConnectorStats):
    """Hit tokens, bytes and seconds loaded and stored, load errors, dropped saves."""

    FIELDS = ("hit_tokens", "loaded_bytes", "stored_bytes", "load_seconds", "load_errors",
              "saves_dropped")

    def __init__(self, data=None):
        self.data = {k: 0 for k in self.FIELDS}
        self.data.update(data or {})

    def aggregate(self, other):
        for k in self.FIELDS:
            self.data[k] += other.data.get(k, 0)
        return self

    def reduce(self):
        return dict(self.data)

    def reset(self):
        self.data = {k: 0 for k in self.FIELDS}

    def is_empty(self):
        return not any(self.data.values())


class KvtierConnectorMetadata(KVConnectorMetadata):
    """One step's StepMeta, handed from the scheduler to every worker."""

    def __init__(self, step):
        self.step = step


def _dtype_bytes(dtype):
    size = getattr(dtype, "itemsize", None)
    if size is None:
        import torch
        size = torch.empty((), dtype=dtype).element_size()
    return size


def block_interior(vllm_config, kv_cache_config):
    """The order of a block's dimensions in memory ("HNC", "NHC") from vLLM's resolved
    KVCacheLayout name ("LBHNC", ...); "" for a vLLM without one."""
    name = getattr(kv_cache_config, "kv_cache_layout", None) or \
        getattr(getattr(vllm_config, "cache_config", None), "kv_cache_layout", None)
    return "".join(d for d in str(name) if d not in "LB") if name else ""


def geometry_from(vllm_config, kv_cache_config):
    """The KV geometry of one rank from kv_cache_config's one group; hybrid models refused."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ValueError(f"kvtier: the model has {len(groups)} KV cache groups (a hybrid model); "
                         "kvtier stores models with one group only")
    spec = groups[0].kv_cache_spec
    mla = "MLA" in type(spec).__name__ or bool(getattr(spec, "use_mla", False))
    return Geometry(num_layers=len(groups[0].layer_names), block_size=spec.block_size,
                    num_kv_heads=1 if mla else spec.num_kv_heads, head_size=spec.head_size,
                    dtype_bytes=_dtype_bytes(spec.dtype), dtype_name=str(spec.dtype), mla=mla,
                    tp_size=vllm_config.parallel_config.tensor_parallel_size,
                    interior=block_interior(vllm_config, kv_cache_config))


def _tp_rank():
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
    return get_tensor_model_parallel_rank()


class KvtierConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.geo = geometry_from(vllm_config, kv_cache_config)
        tc = vllm_config.kv_transfer_config
        extra = dict(getattr(tc, "kv_connector_extra_config", None) or {})
        self.cfg = ConnectorConfig.from_extra(extra, self.geo.block_size,
                                              vllm_config.model_config.served_model_name)
        self.model = self.geo.namespace(self.cfg.model_id, self.cfg.chunk_blocks)
        self.scheduler = self.worker = None
        if role == KVConnectorRole.SCHEDULER:
            if getattr(tc, "kv_load_failure_policy", None) == "fail":
                log.warning("kvtier: kv_load_failure_policy is \"fail\" (vLLM's default): a load "
                            "that fails (kvtierd restarted, a corrupt block) fails its request; "
                            "\"recompute\" computes those blocks instead (docs/vllm.md)")
            self.scheduler = SchedulerSide(self.cfg, self.geo, lambda: Client(
                self.cfg.socket_path, self.model, self.geo.vllm_block_bytes * self.cfg.chunk_blocks,
                tp_size=self.geo.namespace_tp, scheduler=True))
        else:
            self.worker = WorkerSide(self.cfg, self.geo, self.model, rank=_tp_rank())
        log.info("kvtier: %s connector on %s, namespace %s, chunks of %d blocks",
                 "scheduler" if self.scheduler else "worker", self.cfg.socket_path, self.model,
                 self.cfg.chunk_blocks)

    # --- scheduler side ---

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens > 0:
            ids = blocks.get_block_ids()
            self.scheduler.update_state_after_alloc(request, ids[0], num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        preempted = getattr(scheduler_output, "preempted_req_ids", None) or ()
        return KvtierConnectorMetadata(self.scheduler.build_connector_meta(preempted))

    def update_connector_output(self, connector_output):
        self.scheduler.update_connector_output(getattr(connector_output, "finished_recving", None))

    def request_finished(self, request, block_ids):
        return self.scheduler.request_finished(request, block_ids)

    # --- worker side ---

    def register_kv_caches(self, kv_caches):
        self.worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        self.worker.start_step(meta.step if meta is not None else StepMeta())

    def wait_for_layer_load(self, layer_name):
        pass  # the whole prefix is in place before the forward pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass  # saves are of finished requests, whose blocks wait for them

    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids):
        saves, loads = self.worker.get_finished()
        return saves or None, loads or None

    def get_block_ids_with_load_errors(self):
        return self.worker.get_block_ids_with_load_errors()

    def get_kv_connector_stats(self):
        """What moved since the last call (the daemon's /metrics is the operator's main view)."""
        side = self.worker or self.scheduler
        data = {k: side.stats.get(k, 0) for k in KvtierConnectorStats.FIELDS}
        for k in KvtierConnectorStats.FIELDS:
            if k in side.stats:
                side.stats[k] = 0
        stats = KvtierConnectorStats(data)
        return None if stats.is_empty() else stats

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return KvtierConnectorStats(data)

    def shutdown(self):
        if self.worker:
            self.worker.shutdown()
        if self.scheduler:
            self.scheduler.close()
