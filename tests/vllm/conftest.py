"""conftest.py — tests/vllm: a real kvtierd (tests/python/kvtierd.py) and
real vLLM engines (engine.py), each engine in a process of its own that
imports the package from the source tree and libkvtier from the build tree."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
SRC = Path(os.environ.get("KVT_SRCDIR", HERE.parent.parent)).resolve()
BUILD = Path(os.environ.get("KVT_BUILDDIR", ".")).resolve()
sys.path.insert(0, str(SRC / "python"))
sys.path.insert(0, str(SRC / "tests" / "python"))

from kvtierd import Daemon  # noqa: E402 (after the path is set)

ENGINE_TIMEOUT_S = 300


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC / "python"), env.get("PYTHONPATH")]))
    env["KVTIER_LIBRARY"] = str(BUILD / ".libs" / "libkvtier.so.0")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return env


@pytest.fixture
def engine(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """engine(prompts, socket=None, **job): runs one engine process; its result (engine.py)."""
    runs = []

    def run(prompts: list[list[int]], socket: str | None = None, **job: Any) -> dict[str, Any]:
        n = len(runs)
        job_path, out_path, log_path = (tmp_path / f"engine{n}.{ext}" for ext in ("job", "out", "log"))
        job_path.write_text(json.dumps({"prompts": prompts, "connector": socket, **job}))
        with open(log_path, "w") as log:
            proc = subprocess.run([sys.executable, str(HERE / "engine.py"), str(job_path),
                                   str(out_path)], stdout=log, stderr=subprocess.STDOUT,
                                  env=engine_env(), timeout=ENGINE_TIMEOUT_S, cwd=tmp_path)
        runs.append(log_path)
        assert proc.returncode == 0, f"engine {n} exited {proc.returncode}:\n" + \
            log_path.read_text()[-6000:]
        return json.loads(out_path.read_text())

    return run


@pytest.fixture
def daemon(tmp_path: Path):
    path = tmp_path / "kvtierd"
    path.mkdir()
    d = Daemon(path)
    yield d
    rc = d.stop()
    assert rc in (0, -signal.SIGKILL), f"kvtierd exited {rc}:\n{d.text()}"
