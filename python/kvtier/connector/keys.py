"""keys.py — kvtier keys from vLLM's block hashes. A chunk of N vLLM blocks
is keyed by the hash of its last block: vLLM's hashes chain over the whole
prefix (and the request's cache salt), so the scheduler and every worker name
a chunk alike without hashing tokens again."""

from .. import _lib


def block_key(block_hash):
    """16 key bytes of one vLLM block hash (bytes: its first 16; an int: little-endian)."""
    if isinstance(block_hash, int):
        return (block_hash & ((1 << 128) - 1)).to_bytes(16, "little")
    b = bytes(block_hash)
    if len(b) >= _lib.KEY_BYTES:
        return b[:_lib.KEY_BYTES]
    return b.ljust(_lib.KEY_BYTES, b"\0")


def chunk_keys(block_hashes, chunk_blocks, first, end):
    """The keys of chunks [first, end): chunk c is blocks [c*N, (c+1)*N)."""
    return [block_key(block_hashes[(c + 1) * chunk_blocks - 1]) for c in range(first, end)]


def chunk_block_ids(block_ids, chunk_blocks, first, end):
    """The GPU block ids of chunks [first, end), a chunk's together."""
    return list(block_ids[first * chunk_blocks:end * chunk_blocks])
