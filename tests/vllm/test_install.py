"""test_install.py — the kvtier package the suite runs is the one run.sh meant:
with KVT_PACKAGE_DIR, the wheel's, installed there, loading the libkvtier it
bundles (no environment variable points at a library); else the source
tree's. The engines get the same PYTHONPATH (conftest.engine_env)."""

import os
from pathlib import Path

import kvtier
from conftest import INSTALLED, PACKAGE, engine_env


def test_the_package_and_its_library_come_from_the_install() -> None:
    package = Path(kvtier.__file__).resolve().parent
    assert package == PACKAGE / "kvtier"
    loaded = Path(kvtier._lib.lib._name).resolve()
    if INSTALLED:
        assert loaded == package / "libkvtier.so.0"
        assert "KVTIER_LIBRARY" not in engine_env() and "KVT_BUILDDIR" not in os.environ
    assert engine_env()["PYTHONPATH"].split(os.pathsep)[0] == str(PACKAGE)
