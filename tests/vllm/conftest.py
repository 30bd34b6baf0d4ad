"""conftest.py — tests/vllm: a real kvtierd (tests/python/kvtierd.py) and
real vLLM engines (engine.py), each engine in a process of its own. The
kvtier package comes from the source tree with libkvtier from the build
tree, or, with KVT_PACKAGE_DIR (run.sh sets it), from the wheel installed
there with `pip install --target`, as a pod puts it on vLLM's PYTHONPATH:
then nothing points at the build tree, and the package must find the
library it bundles."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
SRC = Path(os.environ.get("KVT_SRCDIR", HERE.parent.parent)).resolve()
BUILD = Path(os.environ.get("KVT_BUILDDIR", ".")).resolve()
INSTALLED = os.environ.get("KVT_PACKAGE_DIR")
PACKAGE = Path(INSTALLED).resolve() if INSTALLED else SRC / "python"
if INSTALLED:  # the daemon from the build tree; the package and its library from the wheel
    os.environ.setdefault("KVTIERD", str(BUILD / "kvtierd"))
    for var in ("KVT_BUILDDIR", "KVTIER_LIBRARY"):
        os.environ.pop(var, None)
sys.path.insert(0, str(PACKAGE))
sys.path.insert(0, str(SRC / "tests" / "python"))

from kvtierd import Daemon  # noqa: E402 (after the path is set)

ENGINE_TIMEOUT_S = 300


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    if not INSTALLED:
        env["KVTIER_LIBRARY"] = str(BUILD / ".libs" / "libkvtier.so.0")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return env


def wait_for(cond: Callable[[], bool], what: Any, timeout_s: float = 60) -> None:
    """Polls cond until it holds; what (or what() when callable) names it on a timeout."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        time.sleep(0.05)


class Engine:
    """One engine.py process (its own process group: killing it kills vLLM's engine core
    and workers too); for a job of "batches", the test steps it batch by batch."""

    def __init__(self, path: Path, job: dict[str, Any]) -> None:
        self.out, self.log_path = path.with_suffix(".out"), path.with_suffix(".log")
        env = {**engine_env(), **job.pop("env", {})}
        path.with_suffix(".job").write_text(json.dumps(job))
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "engine.py"),
                                      str(path.with_suffix(".job")), str(self.out)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=path.parent, start_new_session=True)

    def _wait_file(self, path: Path) -> None:
        deadline = time.monotonic() + ENGINE_TIMEOUT_S
        while not path.exists():
            assert self.proc.poll() is None or path.exists(), \
                f"engine exited {self.proc.returncode} before {path.name}:\n{self.tail()}"
            if time.monotonic() > deadline:
                self.dump_stacks()
                raise AssertionError(f"no {path.name} after {ENGINE_TIMEOUT_S} s:\n{self.tail()}")
            time.sleep(0.02)

    def dump_stacks(self) -> None:
        """Every vLLM process of the engine prints its threads' stacks into the log
        (engine.py registers SIGUSR1 with faulthandler); waits a little for them."""
        try:
            os.killpg(self.proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        time.sleep(2)

    def tail(self) -> str:
        return self.log_path.read_text()[-6000:]

    def batch(self, i: int) -> dict[str, Any]:
        """Batch i's outputs, once it ended."""
        path = Path(f"{self.out}.{i}")
        self._wait_file(path)
        return json.loads(path.read_text())

    def go(self, i: int) -> None:
        """Lets batch i start; returns when it has."""
        Path(f"{self.out}.go{i}").touch()
        self._wait_file(Path(f"{self.out}.start{i}"))

    def result(self) -> dict[str, Any]:
        try:
            rc = self.proc.wait(timeout=ENGINE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            raise AssertionError(f"engine still running after {ENGINE_TIMEOUT_S} s:\n{self.tail()}")
        finally:
            self.kill()
        assert rc == 0, f"engine exited {rc}:\n{self.tail()}"
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        """SIGKILL to the engine and every process vLLM started."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


def with_weights(config_dir: Path, path: Path) -> str:
    """config_dir's files in path, with seeded random weights at a trained model's
    scale (transformers' initializer, std 0.02). vLLM's own dummy weights (uniform
    in +-1e-3) leave the outputs blind to the KV cache: with them, zeroing every
    loaded block still gave identical tokens and logprobs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for f in config_dir.iterdir():
        shutil.copy(f, path)
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.bfloat16)
    net.save_pretrained(path, safe_serialization=True)
    return str(path)


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/vllm/model (a tiny Qwen3) with weights, written once per session."""
    return with_weights(HERE / "model", tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def mla_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/vllm/model-mla (a tiny DeepSeek-V2: MLA) with weights."""
    return with_weights(HERE / "model-mla", tmp_path_factory.mktemp("model-mla"))


@pytest.fixture
def start_engine(tmp_path: Path, model: str) -> Iterator[Callable[..., Engine]]:
    """start_engine(prompts or batches=..., socket=None, **job): an Engine, running
    (job's "env", if any, is added to the engine's environment)."""
    started: list[Engine] = []

    def start(prompts: list[list[int]] | None = None, socket: str | None = None,
              **job: Any) -> Engine:
        if prompts is not None:
            job["prompts"] = prompts
        job.setdefault("model", model)
        e = Engine(tmp_path / f"engine{len(started)}", {"connector": socket, **job})
        started.append(e)
        return e

    yield start
    for e in started:
        if e.proc.returncode is None:
            e.kill()


@pytest.fixture
def engine(start_engine: Callable[..., Engine]) -> Callable[..., dict[str, Any]]:
    """engine(prompts, socket=None, **job): runs one engine process to its end; its result."""
    return lambda prompts, socket=None, **job: start_engine(prompts, socket, **job).result()


@pytest.fixture
def daemon(tmp_path: Path):
    path = tmp_path / "kvtierd"
    path.mkdir()
    d = Daemon(path)
    yield d
    d.stop_checked()
