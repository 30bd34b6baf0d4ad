"""errors.py — libkvtier's negative codes as exceptions: KvtierError carries
the code and kvt_strerror's text (and what was being done)."""

from ._lib import lib


class KvtierError(OSError):
    """A libkvtier call failed: .code is the negative errno or -KVT_E* code."""

    def __init__(self, code, doing=""):
        self.code = code
        text = lib.kvt_strerror(code).decode()
        super().__init__(-code if code < 0 else code, f"{doing}: {text}" if doing else text)

    def __str__(self):
        return self.strerror


def check(rc, doing=""):
    """rc when >= 0; a KvtierError for a negative one."""
    if rc < 0:
        raise KvtierError(rc, doing)
    return rc
