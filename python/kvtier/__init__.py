"""kvtier — Python over libkvtier: the data-plane client, staging buffers,
the request pipeline and the KV layout (docs/python.md); kvtier.vllm holds
the vLLM connector. The core imports no torch and no vLLM."""

from ._lib import BUFFER_SHM, GPU_IPC, GPU_VMM, KEY_BYTES, LEASE_DEFAULT, MAX_BLOCKS
from .client import (Client, LookupResult, ShmBuffer, default_socket, format_size, key_chain,
                     key_chain_each, key_chain_next, mmap_view, parse_size, strerror, version)
from .errors import KvtierError
from .layout import KVLayout, kv_gather, kv_restore
from .pipeline import Finished, Pipeline

__all__ = [
    "BUFFER_SHM", "GPU_IPC", "GPU_VMM", "KEY_BYTES", "LEASE_DEFAULT", "MAX_BLOCKS",
    "Client", "LookupResult", "ShmBuffer", "default_socket", "format_size", "key_chain",
    "key_chain_each", "key_chain_next", "mmap_view", "parse_size", "strerror", "version",
    "KvtierError", "KVLayout", "kv_gather", "kv_restore", "Finished", "Pipeline",
]
