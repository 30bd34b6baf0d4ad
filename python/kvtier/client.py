"""client.py — the data-plane client over libkvtier (kvtier.h): a Client of
one namespace with its lanes, staging buffers (shm, cuda_vmm, cuda_ipc),
LOOKUP with leases, STORE and LOAD, blocking and asynchronous. Imports no
torch. A Client is used by one thread at a time per lane, as libkvtier's."""

import array
import ctypes
import errno

from . import _lib
from ._lib import lib
from .errors import KvtierError, check


def _key_bytes(k):
    """The 16 bytes of a key (bytes-like of at least 16 bytes: the first 16 are used)."""
    b = bytes(k)
    if len(b) < _lib.KEY_BYTES:
        raise ValueError(f"a key has {_lib.KEY_BYTES} bytes, got {len(b)}")
    return b[:_lib.KEY_BYTES]


def _key(k):
    return _lib.Key.from_buffer_copy(_key_bytes(k))


def keys_array(keys):
    """A ctypes array of Key from an iterable of bytes-like keys."""
    raw = b"".join(_key_bytes(k) for k in keys)
    n = len(raw) // _lib.KEY_BYTES
    return (_lib.Key * max(n, 1)).from_buffer_copy(raw or bytes(_lib.KEY_BYTES)), n


def _keys_list(arr, n):
    """The first n keys of a ctypes Key array, as bytes."""
    raw = bytes(arr)
    return [raw[i:i + _lib.KEY_BYTES] for i in range(0, n * _lib.KEY_BYTES, _lib.KEY_BYTES)]


def int32_array(values):
    """A ctypes int32 array (at least one element) of a sequence of ints, built in C
    (array.array) rather than element by element: token lists run to tens of thousands."""
    a = array.array("i", values)  # C int: 32 bits on every Linux ABI
    if not a:
        a.append(0)
    return (ctypes.c_int32 * len(a)).from_buffer(a)  # keeps a alive


def version():
    return lib.kvt_version().decode()


def strerror(code):
    return lib.kvt_strerror(code).decode()


def default_socket() -> str:
    """Where kvtierd listens when run by this user with no --socket: /run/kvtier/kvtierd.sock
    as root, else $XDG_RUNTIME_DIR/kvtier/kvtierd.sock, else /tmp/kvtier-UID/kvtierd.sock."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.kvt_default_socket(buf, len(buf)), "kvt_default_socket")
    return buf.value.decode()


def parse_size(text):
    """Bytes of "64MiB", "1.5GB", "4096" (kvt_parse_size's units)."""
    out = ctypes.c_uint64()
    check(lib.kvt_parse_size(text.encode(), ctypes.byref(out)), f"size {text!r}")
    return out.value


def format_size(nbytes):
    """"64 MiB" and the like (kvt_format_size)."""
    buf = ctypes.create_string_buffer(32)
    check(lib.kvt_format_size(nbytes, buf, len(buf)), "format_size")
    return buf.value.decode()


def key_chain_next(parent, tokens):
    """The key after parent (None: the chain's first) for one block's tokens."""
    toks = list(tokens)
    arr = int32_array(toks)
    out = _lib.Key()
    p = ctypes.byref(_key(parent)) if parent is not None else None
    lib.kvt_key_chain_next(p, arr, len(toks), ctypes.byref(out))
    return bytes(out.bytes)


def key_chain_each(parents, tokens):
    """[key_chain_next(p, tokens) for p in parents], in one call into libkvtier."""
    arr, n = keys_array(parents)
    toks = list(tokens)
    lib.kvt_key_chain_each(arr, n, int32_array(toks), len(toks), arr)
    return _keys_list(arr, n)


def key_chain(tokens, block_tokens):
    """The prefix chain of keys of a token list: one per whole block of block_tokens."""
    tokens = list(tokens)
    n = len(tokens) // block_tokens if block_tokens else 0
    toks = int32_array(tokens)
    keys = (_lib.Key * max(n, 1))()
    got = check(lib.kvt_key_chain(toks, len(tokens), block_tokens, keys, n), "key_chain")
    return _keys_list(keys, got)


class LookupResult:
    """hits: leading keys present; tiers: per key 0 none, 1 L1, 2 L2, 3 L3; lease_id: 0 if none."""

    def __init__(self, hits, tiers, lease_id):
        self.hits, self.tiers, self.lease_id = hits, tiers, lease_id

    def __repr__(self):
        return f"LookupResult(hits={self.hits}, lease_id={self.lease_id:#x})"


class ShmBuffer:
    """A shared-memory staging buffer made by libkvtier: .index, .size, .view (memoryview)."""

    def __init__(self, index, addr, size):
        self.index, self.addr, self.size = index, addr, size
        self.view = (ctypes.c_uint8 * size).from_address(addr)

    def unmap(self):
        if self.addr:
            ctypes.CDLL(None).munmap(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size))
            self.addr = 0


class Pending:
    """An asynchronous request: what must outlive it until its completion is taken."""

    def __init__(self, keep, result):
        self.keep, self.result = keep, result


class Client:
    """A client of one namespace (model, salt, block size, TP size) on a kvtierd socket."""

    def __init__(self, socket_path, model, block_bytes, *, cache_salt=None, tp_size=1, rank=0,
                 scheduler=False, lanes=1, max_inflight=0, _handle=None):
        self.socket_path = socket_path
        self.pending = {}
        self._owned = _handle is None
        if _handle is not None:
            self._c = ctypes.c_void_p(_handle)
            return
        o = _lib.ClientOptions(socket_path.encode(), model.encode(),
                               cache_salt.encode() if cache_salt is not None else None,
                               block_bytes, tp_size, rank, 1 if scheduler else 0, lanes,
                               max_inflight)
        self._c = ctypes.c_void_p()
        rc = lib.kvt_client_open(ctypes.byref(o), ctypes.byref(self._c))
        if rc:
            raise KvtierError(rc, f"cannot connect to kvtierd at {socket_path}")

    def close(self):
        if self._c and self._owned:
            lib.kvt_client_close(self._c)
        self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def lanes(self):
        return lib.kvt_client_lanes(self._c)

    @property
    def session(self) -> str:
        """The session secret (16 hex digits) that POST /v1/buffers names as "session"
        to give this client a file registered by path. Whoever holds it can act as
        this client: hand it only to the daemon's admin."""
        buf = ctypes.create_string_buffer(17)
        check(lib.kvt_client_session(self._c, buf, len(buf)), "kvt_client_session")
        return buf.value.decode()

    def ping(self):
        check(lib.kvt_ping(self._c), "PING")

    # --- staging buffers ---

    def create_buffer(self, size):
        """A new memfd staging buffer of size bytes, mapped here and registered."""
        addr = ctypes.c_void_p()
        index = ctypes.c_uint32()
        check(lib.kvt_buffer_create(self._c, size, ctypes.byref(addr), ctypes.byref(index)),
              "create a staging buffer")
        return ShmBuffer(index.value, addr.value, size)

    def register_buffer(self, fd, size):
        """Registers a sealable memfd of at least size bytes; returns its index."""
        index = ctypes.c_uint32()
        check(lib.kvt_buffer_register(self._c, fd, size, ctypes.byref(index)),
              "register a staging buffer")
        return index.value

    def unregister_buffer(self, index):
        check(lib.kvt_buffer_unregister(self._c, index), "unregister a staging buffer")

    def create_gpu_buffer(self, device, size, kind="vmm"):
        """GPU staging memory on device: kind "vmm" (cuMemCreate) or "ipc" (cudaMalloc)."""
        b = _lib.GpuBuffer()
        k = {"vmm": _lib.GPU_VMM, "ipc": _lib.GPU_IPC}[kind]
        check(lib.kvt_gpu_buffer_create(self._c, device, size, k, ctypes.byref(b)),
              "create a GPU staging buffer")
        return b

    def destroy_gpu_buffer(self, b):
        check(lib.kvt_gpu_buffer_destroy(self._c, ctypes.byref(b)), "destroy a GPU staging buffer")

    def register_cuda_ipc(self, ptr, size):
        """Registers size bytes of this process's cudaMalloc memory at ptr; returns the index."""
        index = ctypes.c_uint32()
        check(lib.kvt_buffer_register_cuda_ipc(self._c, ctypes.c_void_p(ptr), size,
                                               ctypes.byref(index)), "register CUDA memory")
        return index.value

    # --- requests ---

    @staticmethod
    def _blocks(blocks):
        """A ctypes Block array from (key, offset, length) triples."""
        blocks = list(blocks)
        arr = (_lib.Block * max(len(blocks), 1))()
        for i, (k, off, length) in enumerate(blocks):
            arr[i].key = _key(k)
            arr[i].offset = off
            arr[i].length = length
        return arr, len(blocks)

    @staticmethod
    def _statuses(arr, n):
        return [(arr[i].status, arr[i].length) for i in range(n)]

    def store(self, buffer, blocks):
        """STORE (key, offset, length) blocks from staging buffer; [(status, length)] per block."""
        arr, n = self._blocks(blocks)
        check(lib.kvt_store(self._c, buffer, arr, n), "STORE")
        return self._statuses(arr, n)

    def load(self, buffer, blocks):
        """LOAD blocks into staging (length: the room); [(status, bytes loaded)] per block."""
        arr, n = self._blocks(blocks)
        check(lib.kvt_load(self._c, buffer, arr, n), "LOAD")
        return self._statuses(arr, n)

    def _lookup_struct(self, keys, lease_ms):
        karr, n = keys_array(keys)
        tiers = (ctypes.c_uint8 * max(n, 1))()
        lk = _lib.Lookup(ctypes.cast(karr, ctypes.POINTER(_lib.Key)), n, lease_ms,
                         ctypes.cast(tiers, ctypes.POINTER(ctypes.c_uint8)), 0, 0)
        return lk, (karr, tiers), n

    @staticmethod
    def _lookup_result(lk, tiers, n):
        return LookupResult(lk.hits, list(tiers[:n]), lk.lease_id)

    def lookup(self, keys, lease_ms=0):
        """The leading keys present (leased lease_ms if > 0; LEASE_DEFAULT: the daemon's)."""
        lk, keep, n = self._lookup_struct(keys, lease_ms)
        check(lib.kvt_lookup(self._c, ctypes.byref(lk)), "LOOKUP")
        return self._lookup_result(lk, keep[1], n)

    def release(self, lease_id):
        check(lib.kvt_release(self._c, lease_id), "RELEASE")

    # --- asynchronous requests ---

    def _submit(self, fn, what, lane, *args, keep, result):
        rid = ctypes.c_uint64()
        check(fn(self._c, lane, *args, ctypes.byref(rid)), what)
        self.pending[(lane, rid.value)] = Pending(keep, result)
        return rid.value

    def submit_store(self, buffer, blocks, lane=0):
        arr, n = self._blocks(blocks)
        return self._submit(lib.kvt_submit_store, "STORE", lane, buffer, arr, n, keep=arr,
                            result=lambda: self._statuses(arr, n))

    def submit_load(self, buffer, blocks, lane=0):
        arr, n = self._blocks(blocks)
        return self._submit(lib.kvt_submit_load, "LOAD", lane, buffer, arr, n, keep=arr,
                            result=lambda: self._statuses(arr, n))

    def submit_lookup(self, keys, lease_ms=0, lane=0):
        lk, keep, n = self._lookup_struct(keys, lease_ms)
        return self._submit(lib.kvt_submit_lookup, "LOOKUP", lane, ctypes.byref(lk),
                            keep=(lk, keep), result=lambda: self._lookup_result(lk, keep[1], n))

    def poll(self, lane=0, max=64, timeout_ms=0):
        """Finished requests of a lane: [(id, status, result)]; result as the blocking form's."""
        out = (_lib.Completion * max)()
        n = lib.kvt_poll(self._c, lane, out, max, timeout_ms)
        if n < 0:
            raise KvtierError(n, "poll")
        return [self._take(lane, out[i].id, out[i].status) for i in range(n)]

    def wait(self, id, lane=0, timeout_ms=-1):
        """Waits for request id: its (id, status, result). KvtierError -ENOENT for an id
        not outstanding on lane, -ETIMEDOUT when it is still outstanding after timeout_ms."""
        if (lane, id) not in self.pending:
            raise KvtierError(-errno.ENOENT, f"wait: no request {id} outstanding on lane {lane}")
        rc = lib.kvt_wait(self._c, lane, id, timeout_ms)
        if rc == -errno.ETIMEDOUT:
            raise KvtierError(rc, f"wait for request {id}")
        return self._take(lane, id, rc)

    def _take(self, lane, id, status):
        p = self.pending.pop((lane, id), None)
        return (id, status, p.result() if p and status == 0 else None)


def mmap_view(buf):
    """A writable memoryview of a ShmBuffer (for numpy.frombuffer and the like)."""
    return memoryview(buf.view).cast("B")


__all__ = ["Client", "ShmBuffer", "LookupResult", "key_chain", "key_chain_next", "key_chain_each",
           "version", "strerror", "parse_size", "format_size", "mmap_view", "keys_array"]
