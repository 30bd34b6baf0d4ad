"""layout.py — struct kvt_kv_layout (the paged KV cache the restore and
gather kernels and the pipeline work on) filled from a cache's tensors by
their shape, strides and element size, never by assumed shapes. Takes torch
tensors or numpy arrays alike (duck-typed: imports neither).

Per-layer layouts:
  "flash_attn"  (2, num_blocks, block_size, num_kv_heads, head_size)
  "flash_infer" (num_blocks, 2, block_size, num_kv_heads, head_size)
  "mla"         (num_blocks, block_size, head_size): one latent plane
  "blocks"      (num_blocks, num_kv_heads, block_size, content): vLLM's
                logical per-layer view since its KVCacheLayout (0.2x on), one
                plane whose content holds K and V (or MLA's latent); the
                physical order of heads and tokens inside a block is the
                layout's (HNC: vLLM's CPU backend; NHC: GPU backends)
A cross-layer cache is one tensor with the layer first, then one of these.
What one block of one layer and plane holds must be one contiguous run of
bytes, in any order of its dimensions (`interior` names that order: the
bytes are stored as they lie); planes and blocks may be anywhere."""

import ctypes

from . import _lib
from ._lib import lib
from .client import int32_array
from .errors import check

LAYOUTS = {
    # name: (dim letters: P plane, B block, N token, H head, C channel)
    "flash_attn": "PBNHC",
    "flash_infer": "BPNHC",
    "mla": "BNC",
    "blocks": "BHNC",
}


def tensor_info(t):
    """(shape, strides in bytes, element size, address) of a torch tensor or numpy array."""
    if hasattr(t, "data_ptr"):  # torch
        es = t.element_size()
        return tuple(t.shape), tuple(s * es for s in t.stride()), es, t.data_ptr()
    if hasattr(t, "__array_interface__"):  # numpy
        return tuple(t.shape), tuple(t.strides), t.itemsize, t.__array_interface__["data"][0]
    raise TypeError(f"a KV cache tensor must be a torch tensor or numpy array, not {type(t)}")


class KVLayout:
    """A kvt_kv_layout, its layer base pointers kept alive with it."""

    def __init__(self, num_layers, planes, chunk_bytes, plane_stride, block_stride, bases,
                 num_blocks, block_size, interior=""):
        self._bases = (ctypes.c_void_p * num_layers)(*bases)
        self.c = _lib.KvLayout(num_layers, planes, chunk_bytes, plane_stride, block_stride,
                               ctypes.cast(self._bases, ctypes.POINTER(ctypes.c_void_p)))
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.interior = interior

    @property
    def num_layers(self):
        return self.c.num_layers

    @property
    def block_bytes(self):
        """Bytes of one block, every layer and plane: the kvtier block size."""
        return lib.kvt_kv_block_bytes(ctypes.byref(self.c))

    @staticmethod
    def _geometry(shape, strides, es, layout):
        """(planes, chunk_bytes, plane_stride, block_stride, num_blocks, block_size, interior)
        of one layer; interior: the letters of a block's dimensions, outermost first (those
        of size 1 left out: they have no order)."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown KV cache layout {layout!r}; known: {', '.join(LAYOUTS)}")
        dims = LAYOUTS[layout]
        if len(shape) != len(dims):
            raise ValueError(f"a {layout} KV cache layer has {len(dims)} dimensions, "
                             f"this one has shape {shape}")
        plane = dims.find("P")
        if plane >= 0 and shape[plane] != 2:
            raise ValueError(f"a {layout} layer has 2 planes (K, V) in dimension {plane}, "
                             f"shape {shape}")
        inner = sorted((i for i, d in enumerate(dims) if d not in "PB"),
                       key=lambda i: (-strides[i], i))
        expect = es
        for i in reversed(inner):
            if shape[i] > 1 and strides[i] != expect:
                raise ValueError(f"a block's tokens, heads and channels must be contiguous; "
                                 f"shape {shape}, strides (bytes) {strides}")
            expect *= shape[i]
        block = dims.index("B")
        return (2 if plane >= 0 else 1, expect, strides[plane] if plane >= 0 else 0,
                strides[block], shape[block], shape[dims.index("N")],
                "".join(dims[i] for i in inner if shape[i] > 1))

    @classmethod
    def from_tensors(cls, tensors, layout="flash_attn"):
        """From per-layer tensors (a list, in layer order), all of one geometry."""
        tensors = list(tensors)
        if not tensors:
            raise ValueError("no KV cache tensors")
        infos = [tensor_info(t) for t in tensors]
        shape, strides, es, _ = infos[0]
        for s, st, e, _ in infos[1:]:
            if (s, st, e) != (shape, strides, es):
                raise ValueError("every layer's KV cache must have one shape, stride and dtype")
        g = cls._geometry(shape, strides, es, layout)
        return cls(len(tensors), *g[:4], [i[3] for i in infos], *g[4:])

    @classmethod
    def from_cross_layer(cls, tensor, layout="flash_attn"):
        """From one tensor whose first dimension is the layer."""
        shape, strides, es, ptr = tensor_info(tensor)
        g = cls._geometry(shape[1:], strides[1:], es, layout)
        bases = [ptr + layer * strides[0] for layer in range(shape[0])]
        return cls(shape[0], *g[:4], bases, *g[4:])


def _kv_copy(fn, what, layout, staging_ptr, block_ids, stream):
    ids = int32_array(block_ids)
    check(fn(ctypes.byref(layout.c), ctypes.c_void_p(staging_ptr), ids, len(block_ids),
             ctypes.c_void_p(stream or 0)), what)


def kv_restore(layout, staging_ptr, block_ids, stream=None):
    """Restores blocks from contiguous staging (GPU) into the cache's block_ids."""
    _kv_copy(lib.kvt_kv_restore, "kv_restore", layout, staging_ptr, block_ids, stream)


def kv_gather(layout, staging_ptr, block_ids, stream=None):
    """Gathers the cache's block_ids into contiguous staging (GPU)."""
    _kv_copy(lib.kvt_kv_gather, "kv_gather", layout, staging_ptr, block_ids, stream)
