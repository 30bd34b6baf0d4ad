"""worker.py — the connector's worker side: the paged KV cache registered
as a KVLayout with a staging pipeline (GPU staging on the cache's device,
shared memory for CPU tensors), the step's loads and saves submitted to it,
and what finished or failed reported back in vLLM's terms (request ids, GPU
block ids). Tensors are duck-typed (torch or numpy); imports no torch.

A daemon that dies turns loads into load errors (vLLM recomputes those
blocks) and saves into counted drops; the pipeline is opened again when the
socket answers, at most once every reconnect_ms (a second by default)."""

import errno
import logging
import time

from ..errors import KvtierError
from ..layout import KVLayout
from ..pipeline import Pipeline
from .link import Link

log = logging.getLogger("kvtier.connector")
# A request failed with one of these: the connection to kvtierd is gone.
CONNECTION_LOST = {-errno.EPIPE, -errno.ECONNRESET, -errno.ENOTCONN, -errno.ECONNREFUSED,
                   -errno.ESHUTDOWN}


def detect_layout(shape):
    """The per-layer layout name of a KV cache tensor's shape."""
    if len(shape) == 3:
        return "mla"
    if len(shape) == 4:
        return "blocks"
    if len(shape) == 5 and shape[0] == 2:
        return "flash_attn"
    if len(shape) == 5 and shape[1] == 2:
        return "flash_infer"
    raise ValueError(f"kvtier: a KV cache layer of shape {tuple(shape)} is none of "
                     "(blocks, heads, block_size, content), (2, blocks, block_size, heads, "
                     "head_size), (blocks, 2, ...) or (blocks, block_size, latent)")


def tensor_device(t):
    """(gpu, device index) of a torch tensor; (False, 0) for numpy arrays and CPU tensors."""
    dev = getattr(t, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") == "cuda":
        return True, dev.index or 0
    return False, 0


class WorkerSide:
    def __init__(self, cfg, geometry, model, cache_salt=None, rank=0):
        self.cfg = cfg
        self.geo = geometry
        self.model = model
        self.salt = cache_salt
        self.rank = rank
        self.link = None           # the pipeline's (a Link), once the KV cache is registered
        self.layout = None
        self.next_id = 1
        self.inflight = {}         # pipeline id -> (req_id, "load"|"save", spec)
        self.done_loads, self.done_saves = set(), set()
        self.load_error_blocks = set()
        self.cancelled = set()
        self.stats = {"loaded_bytes": 0, "stored_bytes": 0, "load_errors": 0,
                      "saves_dropped": 0, "load_seconds": 0.0}
        self.started = {}

    # --- registration ---

    def register_kv_caches(self, kv_caches):
        """kv_caches: layer name -> tensor, in layer order."""
        tensors = list(kv_caches.values())
        layout = detect_layout(tuple(tensors[0].shape))
        self._open(KVLayout.from_tensors(tensors, layout), tensors[0])

    def _open(self, layout, sample):
        if layout.block_bytes != self.geo.vllm_block_bytes:
            raise ValueError(f"kvtier: the KV cache holds {layout.block_bytes} bytes a block, "
                             f"the model's geometry says {self.geo.vllm_block_bytes}")
        order = "".join(d for d in self.geo.interior if d in layout.interior)
        if self.geo.interior and layout.interior != order:
            raise ValueError(f"kvtier: vLLM's KV cache layout puts a block's dimensions in the "
                             f"order {self.geo.interior}, its tensors in {layout.interior}")
        self.layout = layout
        self.gpu, self.device = tensor_device(sample)
        self.link = Link(self._new_pipeline, self.cfg.reconnect_ms, "worker")
        self.link.open()

    @property
    def pipeline(self):
        """The staging pipeline; None before registration and while kvtierd is lost."""
        return self.link.conn if self.link else None

    def _new_pipeline(self):
        tp, rank = self.geo.namespace_tp, (0 if self.geo.mla else self.rank)
        return Pipeline(self.cfg.socket_path, self.model, self.layout, cache_salt=self.salt,
                        tp_size=tp, rank=rank, gpu=self.gpu, device=self.device,
                        gpu_kind=self.cfg.staging_kind, depth=self.cfg.staging_depth,
                        buffer_blocks=self.cfg.staging_blocks,
                        max_inflight=self.cfg.max_inflight, ids_per_block=self.cfg.chunk_blocks)

    def _lost(self, e):
        log.warning("kvtier: lost kvtierd (%s): loads fail, saves are dropped", e)
        for pid, (req_id, kind, spec) in self.inflight.items():
            self._fail(req_id, kind, spec, range(len(spec.keys)))
        self.inflight.clear()
        self.link.drop()

    # --- a step ---

    def start_step(self, meta):
        """Ends what the scheduler cancelled, then submits the step's loads and saves (the
        whole prefix is in place before the forward pass: nothing waits per layer)."""
        self._end_loads(meta.cancelled, report=False)
        self._end_loads(meta.aborted, report=True)
        for spec in meta.loads:
            self.cancelled.discard(spec.req_id)
            self._submit(spec, "load")
        for spec in meta.saves:
            if self.geo.mla and self.rank != 0:
                self.done_saves.add(spec.req_id)  # rank 0 stores MLA's one copy
                continue
            self._submit(spec, "save")

    def _end_loads(self, req_ids, report):
        """Preempted (report False) or aborted (True) requests: their loads in flight are
        waited for, since the blocks they write are about to be reused; an aborted one is
        then reported as a finished save, which is when vLLM frees its blocks."""
        req_ids = set(req_ids)
        if not req_ids:
            return
        if any(r in req_ids for r, kind, _ in self.inflight.values() if kind == "load"):
            self.pipeline.drain(-1)
        self.cancelled |= req_ids
        self._collect()
        self.cancelled -= req_ids
        self.done_loads -= req_ids
        if report:
            self.done_saves |= req_ids

    def _submit(self, spec, kind, may_retry=True):
        """Submits one load or save; a pipeline found dead (kvtierd restarted since its
        last use) is opened again and, when may_retry, the submission made once more on it."""
        def submit(p):
            pid = self.next_id
            self.next_id += 1
            (p.submit_load if kind == "load" else p.submit_store)(pid, spec.keys, spec.block_ids)
            return pid

        try:
            if self.link is None:
                raise KvtierError(-errno.ENOTCONN, "no KV cache registered")
            pid = self.link.run(submit, lost=lambda e: getattr(e, "code", None) in CONNECTION_LOST,
                                on_lost=self._lost, retry=may_retry)
        except OSError:  # kvtierd unreachable, or the submission refused
            self._fail(spec.req_id, kind, spec, range(len(spec.keys)))
            return
        self.inflight[pid] = (spec.req_id, kind, spec)
        self.started[pid] = time.monotonic()

    def _fail(self, req_id, kind, spec, chunk_indexes):
        n = self.cfg.chunk_blocks
        if kind == "load":
            for c in chunk_indexes:
                self.load_error_blocks.update(spec.block_ids[c * n:(c + 1) * n])
            self.stats["load_errors"] += 1
            self.done_loads.add(req_id)
        else:
            self.stats["saves_dropped"] += 1
            self.done_saves.add(req_id)

    def _collect(self):
        p = self.pipeline
        if p is None:
            return
        lost, again = False, []
        for load in (True, False):
            for f in p.finished(load):
                lost |= f.status in CONNECTION_LOST
                req_id, kind, spec = self.inflight.pop(f.req_id)
                elapsed = time.monotonic() - self.started.pop(f.req_id)
                if req_id in self.cancelled:
                    continue
                if f.status in CONNECTION_LOST and not spec.retried:
                    # Submitted on a connection kvtierd had closed (it restarted since the
                    # last transfer): made again, once, on a new one.
                    spec.retried = True
                    again.append((spec, kind))
                    continue
                ok = len(spec.keys) - len(f.failed)
                nbytes = ok * self.layout.block_bytes * self.cfg.chunk_blocks
                if kind == "load":
                    self.stats["loaded_bytes"] += nbytes
                    self.stats["load_seconds"] += elapsed
                else:
                    self.stats["stored_bytes"] += nbytes
                if f.failed:
                    self._fail(req_id, kind, spec, f.failed)
                if kind == "load":
                    self.done_loads.add(req_id)
                else:
                    self.done_saves.add(req_id)
        if lost:
            self._lost(KvtierError(-errno.EPIPE, "a transfer"))
        for spec, kind in again:
            self._submit(spec, kind, may_retry=False)

    def get_finished(self):
        """(request ids whose saves finished, request ids whose loads finished)."""
        self._collect()
        saves, loads = self.done_saves, self.done_loads
        self.done_saves, self.done_loads = set(), set()
        return saves, loads

    def wait_all(self, timeout_ms=-1):
        """Waits for every transfer (tests, shutdown)."""
        if self.pipeline is not None:
            self.pipeline.drain(timeout_ms)

    def get_block_ids_with_load_errors(self):
        out, self.load_error_blocks = self.load_error_blocks, set()
        return out

    def shutdown(self):
        if self.link is not None:
            self.link.drop()
