"""conftest.py — a real kvtierd per test (the build tree's, $KVTIERD), on a
runtime dir of its own with the control plane on a free port; stopped, and
checked to exit 0, at the end. The package is imported from the source tree."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

SRC = os.environ.get("KVT_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.dirname(__file__))


class Daemon:
    def __init__(self, tmp, *flags):
        self.dir = str(tmp)
        self.socket = os.path.join(self.dir, "kvtierd.sock")
        self.log_path = os.path.join(self.dir, "log")
        exe = os.environ.get("KVTIERD", os.path.join(os.environ.get("KVT_BUILDDIR", "."), "kvtierd"))
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([exe, "--runtime-dir", self.dir, "--http", "127.0.0.1:0",
                                      "--l1-size", "64MiB", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = re.search(r"ready: control plane on http://127\.0\.0\.1:(\d+)/", self.text())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("kvtierd did not start:\n" + self.text())

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stats(self):
        import json
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/stats") as r:
            return json.load(r)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    rc = d.stop()
    assert rc in (0, -signal.SIGKILL), f"kvtierd exited {rc}:\n{d.text()}"


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
        rc = d.stop()
        assert rc in (0, -signal.SIGKILL), f"kvtierd exited {rc}:\n{d.text()}"

