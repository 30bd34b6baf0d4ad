"""l2file.py — reads an L2 file by docs/l2-format.md to find a block's record
by key, and flips one byte of its data: the corruption the end-to-end
correctness checks (tests/python/test_hf.py, bench/e2e_bench.py) make on
disk. Headers only are read, so a 16 GiB file costs a few reads."""

import os
import struct

BLOCK = 4096
REGION_MAGIC = 0x4e4752324c54564b
RECORD_MAGIC = 0x434552324c54564b


def records(f, region_size):
    """(offset, key, length) of every record whose header carries its region's seq."""
    size = os.fstat(f.fileno()).st_size
    for start in range(0, size - region_size + 1, region_size):
        f.seek(start)
        head = f.read(48)
        magic, _ver, _bs, rsize, _idx, _res, seq = struct.unpack("<QIIQIIQ", head[:40])
        if magic != REGION_MAGIC or rsize != region_size:
            continue
        at = start + BLOCK
        while at + BLOCK <= start + region_size:
            f.seek(at)
            rec = f.read(64)
            magic, _ver, _rank, _tp, rseq = struct.unpack("<QIHHQ", rec[:24])
            if magic != RECORD_MAGIC or rseq != seq:
                break
            key = rec[32:48]
            (length,) = struct.unpack("<I", rec[48:52])
            yield at, key, length
            at += BLOCK + -(-length // BLOCK) * BLOCK


def flip_data_byte(path, key, region_size, at_byte=5):
    """Flips one bit of byte at_byte of the data of every record of key; returns how many."""
    n = 0
    with open(path, "r+b") as f:
        for off, k, length in list(records(f, region_size)):
            if k == key and at_byte < length:
                f.seek(off + BLOCK + at_byte)
                b = f.read(1)[0]
                f.seek(off + BLOCK + at_byte)
                f.write(bytes([b ^ 0x40]))
                n += 1
        f.flush()
        os.fsync(f.fileno())
    return n
