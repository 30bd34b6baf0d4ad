"""config.py — the connector's settings (kv_connector_extra_config) and the
KV geometry both sides derive the namespace and block size from."""

import hashlib
from dataclasses import dataclass, field

from ..client import default_socket

CHUNK_TOKENS = 128


def default_chunk_blocks(block_size):
    """The multiple of vLLM's block size nearest CHUNK_TOKENS tokens (at least one block)."""
    return max(1, round(CHUNK_TOKENS / block_size))


@dataclass
class ConnectorConfig:
    socket_path: str = field(default_factory=default_socket)  # kvtierd's default for this user
    chunk_blocks: int = 0          # vLLM blocks per kvtier block; 0: default_chunk_blocks
    staging_depth: int = 2         # staging buffers in the pool
    staging_blocks: int = 16       # kvtier blocks per staging buffer
    max_inflight: int = 0          # requests with blocks in flight; 0: the pool's depth bounds it
    model_id: str = ""             # namespace model; "": the served model name
    lease_ms: int = 30000          # how long a lookup's hit stays leased until loaded
    staging_kind: str = "vmm"      # GPU staging: "vmm" or "ipc"
    reconnect_ms: int = 1000       # after kvtierd was lost, try it again at most this often

    KEYS = ("socket_path", "chunk_blocks", "staging_depth", "staging_blocks", "max_inflight",
            "model_id", "lease_ms", "staging_kind", "reconnect_ms")

    @classmethod
    def from_extra(cls, extra, block_size, served_model_name):
        """From kv_connector_extra_config (a dict); ValueError names an unknown key or bad value."""
        extra = dict(extra or {})
        unknown = sorted(set(extra) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"kvtier: unknown kv_connector_extra_config key(s) {unknown}; "
                             f"known: {list(cls.KEYS)}")
        c = cls(**extra)
        if not c.chunk_blocks:
            c.chunk_blocks = default_chunk_blocks(block_size)
        if not c.model_id:
            c.model_id = served_model_name
        for name in ("chunk_blocks", "staging_depth", "staging_blocks"):
            if not isinstance(getattr(c, name), int) or getattr(c, name) < 1:
                raise ValueError(f"kvtier: {name} must be a positive integer")
        if not isinstance(c.reconnect_ms, int) or c.reconnect_ms < 0:
            raise ValueError("kvtier: reconnect_ms must be an integer of at least 0")
        if c.staging_depth < 2:
            raise ValueError("kvtier: staging_depth must be at least 2")
        if c.staging_kind not in ("vmm", "ipc"):
            raise ValueError("kvtier: staging_kind is \"vmm\" or \"ipc\"")
        if not c.model_id:
            raise ValueError("kvtier: no model_id and no served model name")
        return c


@dataclass
class Geometry:
    """What one rank's KV of one vLLM block is: both sides compute it from vLLM's config."""
    num_layers: int
    block_size: int                # tokens per vLLM block
    num_kv_heads: int              # per rank (MLA: 1)
    head_size: int
    dtype_bytes: int
    dtype_name: str
    mla: bool = False
    tp_size: int = 1
    interior: str = ""             # a block's dimensions in memory (vLLM's KVCacheLayout), or ""
    extra: dict = field(default_factory=dict)

    @property
    def planes(self):
        return 1 if self.mla else 2

    @property
    def vllm_block_bytes(self):
        """One vLLM block of one rank, every layer and plane."""
        return (self.num_layers * self.planes * self.block_size * self.num_kv_heads *
                self.head_size * self.dtype_bytes)

    @property
    def namespace_tp(self):
        """MLA's latent is the same on every rank: one copy, tensor-parallel size 1."""
        return 1 if self.mla else self.tp_size

    def fingerprint(self, chunk_blocks):
        text = (f"L{self.num_layers}:B{self.block_size}:H{self.num_kv_heads}:D{self.head_size}:"
                f"{self.dtype_name}:{'mla' if self.mla else 'kv'}:tp{self.namespace_tp}:"
                f"c{chunk_blocks}")
        if self.interior:  # vLLM with a KVCacheLayout: HNC and NHC bytes never meet
            text += f":{self.interior}"
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def namespace(self, model_id, chunk_blocks):
        """The namespace's model string: model id + the geometry's fingerprint."""
        return f"{model_id}#kv-{self.fingerprint(chunk_blocks)}"
