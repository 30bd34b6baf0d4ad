"""conftest.py — a real kvtierd per test (the build tree's, $KVTIERD), on a
runtime dir of its own with the control plane on a free port; stopped, and
checked to exit 0, at the end. The package is imported from the source tree."""

import os
import sys

import pytest

SRC = os.environ.get("KVT_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.dirname(__file__))

from kvtierd import Daemon  # noqa: E402 (after the path is set)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop_checked()


@pytest.fixture
def make_daemon(tmp_path):
    made = []

    def make(*flags, sub="d"):
        path = tmp_path / f"{sub}{len(made)}"
        path.mkdir()
        d = Daemon(path, *flags)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop_checked()

