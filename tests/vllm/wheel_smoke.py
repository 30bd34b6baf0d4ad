"""wheel_smoke.py — the kvtier wheel in a clean venv (no numpy, no torch, no
source tree on the path): `import kvtier` finds the library it bundles, and
a client stores and loads a block through a real kvtierd byte for byte.

    wheel_smoke.py SRCDIR    (run.sh runs it with the venv's python)"""

import os
import sys
import tempfile
from pathlib import Path

import kvtier

sys.path.append(str(Path(sys.argv[1]) / "tests" / "python"))  # kvtierd.py: the daemon, stdlib only
from kvtierd import Daemon  # noqa: E402

package = Path(kvtier.__file__).resolve().parent
library = Path(kvtier._lib.lib._name).resolve()
assert "site-packages" in package.parts, package
assert library == package / "libkvtier.so.0", library
assert "KVTIER_LIBRARY" not in os.environ and "KVT_BUILDDIR" not in os.environ

with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(tmp)
    try:
        with kvtier.Client(d.socket, "wheel-smoke", 4096) as c:
            buf = c.create_buffer(2 * 4096)
            view = kvtier.mmap_view(buf)
            block = bytes((i * 7 + 3) % 256 for i in range(4096))
            view[:4096] = block
            key = kvtier.key_chain(list(range(16)), 16)[0]
            assert c.store(buf.index, [(key, 0, 4096)]) == [(0, 4096)]
            assert c.load(buf.index, [(key, 4096, 4096)]) == [(0, 4096)]
            assert bytes(view[4096:]) == block
            del view
    finally:
        d.stop_checked()
print(f"wheel_smoke: kvtier {kvtier.version()} from {package}, its library bundled: ok")
