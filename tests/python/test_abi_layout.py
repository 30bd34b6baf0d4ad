"""test_abi_layout.py — every ctypes Structure of kvtier._lib has the size and
field offsets of the C struct it copies: a C program, written from the
Structures' own field names, prints sizeof and offsetof as the compiler lays
the public headers out. A field renamed or gone in C fails to compile; one
added or moved shows as another size or offset. Drift fails here instead of
corrupting memory in a worker."""

import ctypes
import json
import os
import subprocess

from kvtier import _lib

SRC = os.environ.get("KVT_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))

# Each Structure and the C struct it copies.
C_NAMES = {
    _lib.Key: "kvt_key",
    _lib.ClientOptions: "kvt_client_options",
    _lib.GpuBuffer: "kvt_gpu_buffer",
    _lib.KvLayout: "kvt_kv_layout",
    _lib.Block: "kvt_block",
    _lib.Lookup: "kvt_lookup",
    _lib.Completion: "kvt_completion",
    _lib.PipelineOptions: "kvt_pipeline_options",
    _lib.Transfer: "kvt_transfer",
    _lib.PipelineResult: "kvt_pipeline_result",
    _lib.PipelineStats: "kvt_pipeline_stats",
}


def structures() -> list:
    return [v for v in vars(_lib).values()
            if isinstance(v, type) and issubclass(v, ctypes.Structure) and v is not ctypes.Structure]


def program() -> str:
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "kvtier/kvtier.h"',
             '#include "kvtier/pipeline.h"', "int main(void)", "{", '\tputs("{");']
    items = list(C_NAMES.items())
    for n, (cls, cname) in enumerate(items):
        fields = [name for name, _ in cls._fields_]
        offs = ", ".join(f'\\"{f}\\": %zu' for f in fields)
        args = ", ".join(f"offsetof(struct {cname}, {f})" for f in fields)
        comma = "," if n + 1 < len(items) else ""
        lines.append(f'\tprintf("\\"{cname}\\": {{\\"size\\": %zu, \\"offsets\\": {{{offs}}}}}{comma}\\n", '
                     f"sizeof(struct {cname}), {args});")
    lines += ['\tputs("}");', "\treturn 0;", "}"]
    return "\n".join(lines) + "\n"


def c_layout(tmp_path) -> dict:
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text(program())
    cc = os.environ.get("CC", "cc").split()
    built = subprocess.run(cc + ["-std=c11", "-I", os.path.join(SRC, "include"), "-o", str(exe), str(src)],
                           capture_output=True, text=True)
    assert built.returncode == 0, "the Structures name fields the C headers lack:\n" + built.stderr
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


def test_every_structure_is_checked():
    assert set(structures()) == set(C_NAMES), "a Structure of _lib.py without its C struct here"


def test_sizes_and_offsets_match_the_headers(tmp_path):
    layout = c_layout(tmp_path)
    for cls, cname in C_NAMES.items():
        c = layout[cname]
        py = {name: getattr(cls, name).offset for name, _ in cls._fields_}
        assert py == c["offsets"], f"{cls.__name__} vs struct {cname}: offsets"
        assert ctypes.sizeof(cls) == c["size"], f"{cls.__name__} vs struct {cname}: size"


def test_a_drifted_structure_is_caught(tmp_path):
    """The check can fail: a Structure that lost its last field is smaller than its struct."""
    class Short(ctypes.Structure):
        _fields_ = _lib.Completion._fields_[:1]
    layout = c_layout(tmp_path)
    assert ctypes.sizeof(Short) != layout["kvt_completion"]["size"]
