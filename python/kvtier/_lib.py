"""_lib.py — libkvtier loaded with ctypes: the C structs of include/kvtier/*.h
and every function's prototype. The one place that knows the C ABI; the rest
of the package builds on it. Imports nothing beyond the standard library.

The library is found, in order: $KVTIER_LIBRARY (a path), the build tree
($KVT_BUILDDIR/.libs, as `make check` sets it), the one bundled beside this
file (the wheel's, scripts/wheel.sh), the libdir `make install` recorded in
_paths.py, then the dynamic linker's search (libkvtier.so.0)."""

import ctypes
import os

KEY_BYTES = 16
LEASE_DEFAULT = 0xFFFFFFFF
MAX_BLOCKS = 4096

BUFFER_SHM = 1
GPU_VMM = 2
GPU_IPC = 3


class Key(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * KEY_BYTES)]


class ClientOptions(ctypes.Structure):
    _fields_ = [
        ("socket_path", ctypes.c_char_p),
        ("model", ctypes.c_char_p),
        ("cache_salt", ctypes.c_char_p),
        ("block_bytes", ctypes.c_uint64),
        ("tp_size", ctypes.c_uint16),
        ("rank", ctypes.c_uint16),
        ("scheduler", ctypes.c_int),
        ("lanes", ctypes.c_uint),
        ("max_inflight", ctypes.c_uint),
    ]


class GpuBuffer(ctypes.Structure):
    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("size", ctypes.c_uint64),
        ("index", ctypes.c_uint32),
        ("device", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("alloc_handle", ctypes.c_uint64),
    ]


class KvLayout(ctypes.Structure):
    _fields_ = [
        ("num_layers", ctypes.c_uint32),
        ("planes", ctypes.c_uint32),
        ("chunk_bytes", ctypes.c_uint64),
        ("plane_stride", ctypes.c_uint64),
        ("block_stride", ctypes.c_uint64),
        ("layer_bases", ctypes.POINTER(ctypes.c_void_p)),
    ]


class Block(ctypes.Structure):
    _fields_ = [
        ("key", Key),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint32),
        ("status", ctypes.c_int32),
    ]


class Lookup(ctypes.Structure):
    _fields_ = [
        ("keys", ctypes.POINTER(Key)),
        ("nkeys", ctypes.c_uint32),
        ("lease_ms", ctypes.c_uint32),
        ("tiers", ctypes.POINTER(ctypes.c_uint8)),
        ("hits", ctypes.c_uint32),
        ("lease_id", ctypes.c_uint64),
    ]


class Completion(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("status", ctypes.c_int)]


class PipelineOptions(ctypes.Structure):
    _fields_ = [
        ("client", ClientOptions),
        ("gpu", ctypes.c_int),
        ("device", ctypes.c_int),
        ("gpu_kind", ctypes.c_int),
        ("depth", ctypes.c_uint32),
        ("buffer_blocks", ctypes.c_uint32),
        ("max_inflight", ctypes.c_uint32),
        ("layout", KvLayout),
        ("trace", ctypes.c_void_p),
        ("trace_ctx", ctypes.c_void_p),
        ("ids_per_block", ctypes.c_uint32),
    ]


class Transfer(ctypes.Structure):
    _fields_ = [
        ("req_id", ctypes.c_uint64),
        ("keys", ctypes.POINTER(Key)),
        ("block_ids", ctypes.POINTER(ctypes.c_int32)),
        ("nblocks", ctypes.c_uint32),
    ]


class PipelineResult(ctypes.Structure):
    _fields_ = [
        ("req_id", ctypes.c_uint64),
        ("status", ctypes.c_int),
        ("nfailed", ctypes.c_uint32),
        ("failed", ctypes.POINTER(ctypes.c_uint32)),
    ]


class PipelineStats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("requests_finished", ctypes.c_uint64),
        ("requests_failed", ctypes.c_uint64),
        ("blocks_failed", ctypes.c_uint64),
        ("bytes_loaded", ctypes.c_uint64),
        ("bytes_stored", ctypes.c_uint64),
        ("max_active_requests", ctypes.c_uint32),
        ("max_busy_buffers", ctypes.c_uint32),
    ]


_P = ctypes.POINTER
_vp = ctypes.c_void_p
_int = ctypes.c_int
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64

# name: (restype, argtypes)
_PROTOTYPES = {
    "kvt_version": (ctypes.c_char_p, []),
    "kvt_strerror": (ctypes.c_char_p, [_int]),
    "kvt_parse_size": (_int, [ctypes.c_char_p, _P(_u64)]),
    "kvt_format_size": (_int, [_u64, ctypes.c_char_p, ctypes.c_size_t]),
    "kvt_key_chain": (_int, [_P(ctypes.c_int32), ctypes.c_size_t, ctypes.c_size_t, _P(Key),
                             ctypes.c_size_t]),
    "kvt_key_chain_next": (None, [_P(Key), _P(ctypes.c_int32), ctypes.c_size_t, _P(Key)]),
    "kvt_key_chain_each": (None, [_P(Key), ctypes.c_size_t, _P(ctypes.c_int32), ctypes.c_size_t,
                                  _P(Key)]),
    "kvt_client_open": (_int, [_P(ClientOptions), _P(_vp)]),
    "kvt_client_close": (None, [_vp]),
    "kvt_client_lanes": (ctypes.c_uint, [_vp]),
    "kvt_client_session": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_size_t]),
    "kvt_default_socket": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
    "kvt_buffer_register": (_int, [_vp, _int, _u64, _P(_u32)]),
    "kvt_buffer_create": (_int, [_vp, _u64, _P(_vp), _P(_u32)]),
    "kvt_buffer_unregister": (_int, [_vp, _u32]),
    "kvt_gpu_buffer_create": (_int, [_vp, _int, _u64, _int, _P(GpuBuffer)]),
    "kvt_gpu_buffer_destroy": (_int, [_vp, _P(GpuBuffer)]),
    "kvt_buffer_register_cuda_ipc": (_int, [_vp, _vp, _u64, _P(_u32)]),
    "kvt_kv_block_bytes": (_u64, [_P(KvLayout)]),
    "kvt_kv_restore": (_int, [_P(KvLayout), _vp, _P(ctypes.c_int32), _u32, _vp]),
    "kvt_kv_gather": (_int, [_P(KvLayout), _vp, _P(ctypes.c_int32), _u32, _vp]),
    "kvt_submit_store": (_int, [_vp, ctypes.c_uint, _u32, _P(Block), _u32, _P(_u64)]),
    "kvt_submit_load": (_int, [_vp, ctypes.c_uint, _u32, _P(Block), _u32, _P(_u64)]),
    "kvt_submit_lookup": (_int, [_vp, ctypes.c_uint, _P(Lookup), _P(_u64)]),
    "kvt_poll": (_int, [_vp, ctypes.c_uint, _P(Completion), ctypes.c_uint, _int]),
    "kvt_wait": (_int, [_vp, ctypes.c_uint, _u64, _int]),
    "kvt_store": (_int, [_vp, _u32, _P(Block), _u32]),
    "kvt_load": (_int, [_vp, _u32, _P(Block), _u32]),
    "kvt_lookup": (_int, [_vp, _P(Lookup)]),
    "kvt_release": (_int, [_vp, _u64]),
    "kvt_ping": (_int, [_vp]),
    "kvt_pipeline_open": (_int, [_P(PipelineOptions), _P(_vp)]),
    "kvt_pipeline_close": (None, [_vp]),
    "kvt_pipeline_client": (_vp, [_vp]),
    "kvt_pipeline_submit_load": (_int, [_vp, _P(Transfer)]),
    "kvt_pipeline_submit_store": (_int, [_vp, _P(Transfer)]),
    "kvt_pipeline_finished": (_int, [_vp, _int, _P(PipelineResult), ctypes.c_uint]),
    "kvt_pipeline_wait_finished": (_int, [_vp, _int, _int]),
    "kvt_pipeline_drain": (_int, [_vp, _int]),
    "kvt_pipeline_stats": (None, [_vp, _P(PipelineStats)]),
}


def _candidates():
    env = os.environ.get("KVTIER_LIBRARY")
    if env:
        yield env
    build = os.environ.get("KVT_BUILDDIR")
    if build:
        yield os.path.join(build, ".libs", "libkvtier.so.0")
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkvtier.so.0")
    if os.path.exists(bundled):
        yield bundled
    try:
        from . import _paths  # written by `make install`
        yield os.path.join(_paths.LIBDIR, "libkvtier.so.0")
    except ImportError:
        pass
    yield "libkvtier.so.0"


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError("kvtier: cannot load libkvtier; tried: " + "; ".join(tried) +
                      ". Set KVTIER_LIBRARY to the library's path.")


lib = _load()
