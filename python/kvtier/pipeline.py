"""pipeline.py — libkvtier's request-level pipeline (kvtier/pipeline.h):
requests of (keys, KV cache block ids) loaded into or stored from the cache
through a staging pool, finished requests collected with their failed
blocks. What the vLLM connector's worker drives. Imports no torch."""

import ctypes
import errno

from . import _lib
from ._lib import lib
from .client import Client, int32_array, keys_array
from .errors import KvtierError, check


class Finished:
    """A finished request: req_id, status (0 or the first block error), failed (indexes)."""

    def __init__(self, req_id, status, failed):
        self.req_id, self.status, self.failed = req_id, status, failed

    def __repr__(self):
        return f"Finished(req_id={self.req_id}, status={self.status}, failed={self.failed})"


class Pipeline:
    """A staging pool of depth buffers of buffer_blocks blocks over a KVLayout; each
    block (one key) is ids_per_block of the layout's cache blocks, side by side."""

    def __init__(self, socket_path, model, layout, *, cache_salt=None, tp_size=1, rank=0,
                 gpu=False, device=0, gpu_kind="vmm", depth=2, buffer_blocks=16,
                 max_inflight=0, ids_per_block=1):
        self.layout = layout  # its base pointers must outlive the pipeline
        self.ids_per_block = ids_per_block
        self.block_bytes = layout.block_bytes * ids_per_block
        client = _lib.ClientOptions(socket_path.encode(), model.encode(),
                                    cache_salt.encode() if cache_salt is not None else None,
                                    self.block_bytes, tp_size, rank, 0, 0, 0)
        kind = {"vmm": _lib.GPU_VMM, "ipc": _lib.GPU_IPC}[gpu_kind]
        o = _lib.PipelineOptions(client, 1 if gpu else 0, device, kind, depth, buffer_blocks,
                                 max_inflight, layout.c, None, None, ids_per_block)
        self._p = ctypes.c_void_p()
        rc = lib.kvt_pipeline_open(ctypes.byref(o), ctypes.byref(self._p))
        if rc:
            raise KvtierError(rc, f"cannot open a pipeline to kvtierd at {socket_path}")
        self.client = Client(socket_path, model, self.block_bytes,
                             _handle=lib.kvt_pipeline_client(self._p))

    def close(self):
        """Drains, stops and frees the pool."""
        if self._p:
            lib.kvt_pipeline_close(self._p)
        self._p = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _transfer(self, req_id, keys, block_ids):
        karr, n = keys_array(keys)
        block_ids = list(block_ids)
        if len(block_ids) != n * self.ids_per_block:
            raise ValueError(f"{n} keys of {self.ids_per_block} cache blocks each, "
                             f"but {len(block_ids)} block ids")
        ids = int32_array(block_ids)
        return _lib.Transfer(req_id, ctypes.cast(karr, ctypes.POINTER(_lib.Key)),
                             ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32)), n)

    def submit_load(self, req_id, keys, block_ids):
        """Loads keys into the cache's block_ids, ids_per_block per key (both are copied)."""
        t = self._transfer(req_id, keys, block_ids)
        check(lib.kvt_pipeline_submit_load(self._p, ctypes.byref(t)), f"load request {req_id}")

    def submit_store(self, req_id, keys, block_ids):
        """Stores the cache's block_ids under keys."""
        t = self._transfer(req_id, keys, block_ids)
        check(lib.kvt_pipeline_submit_store(self._p, ctypes.byref(t)), f"store request {req_id}")

    def finished(self, load, max=256):
        """Finished loads (load True) or stores, oldest first."""
        out = (_lib.PipelineResult * max)()
        n = check(lib.kvt_pipeline_finished(self._p, 1 if load else 0, out, max), "finished")
        return [Finished(out[i].req_id, out[i].status,
                         [out[i].failed[j] for j in range(out[i].nfailed)]) for i in range(n)]

    def wait_finished(self, load, timeout_ms=-1):
        """True once a finished request of the direction waits to be collected; False on timeout."""
        rc = lib.kvt_pipeline_wait_finished(self._p, 1 if load else 0, timeout_ms)
        if rc == -errno.ETIMEDOUT:
            return False
        check(rc, "wait_finished")
        return True

    def drain(self, timeout_ms=-1):
        """True once every submitted request has finished; False on timeout."""
        rc = lib.kvt_pipeline_drain(self._p, timeout_ms)
        if rc == -errno.ETIMEDOUT:
            return False
        check(rc, "drain")
        return True

    def stats(self):
        s = _lib.PipelineStats()
        lib.kvt_pipeline_stats(self._p, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in _lib.PipelineStats._fields_}
