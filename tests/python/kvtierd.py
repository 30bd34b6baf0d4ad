"""kvtierd.py — a real kvtierd for Python tests (the build tree's,
$KVTIERD), on a runtime dir of its own with the control plane on a free
port: started, asked for its stats, killed or stopped. Shared by
tests/python and tests/vllm."""

import json
import os
import re
import signal
import subprocess
import time
import urllib.request


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
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/stats") as r:
            return json.load(r)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # never leave it running for the next tests
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                raise AssertionError("kvtierd did not stop within 60 s of SIGTERM:\n" + self.text())
        self.log.close()
        return self.proc.returncode

    def stop_checked(self):
        """Stops it and asserts it exited 0 (or was SIGKILLed by the test)."""
        rc = self.stop()
        assert rc in (0, -signal.SIGKILL), f"kvtierd exited {rc}:\n{self.text()}"

    def settle_l2(self):
        """Waits (bounded) until L2 has no I/O queued or in flight."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            l2 = self.stats()["l2"]
            if l2["ios_queued"] == 0 and l2["ios_inflight"] == 0:
                return
            time.sleep(0.005)
        raise AssertionError("L2 did not settle")

    def evict_to_l2(self):
        """Evicts all of L1 into L2 and waits until L2 has written it: L1 is then empty.
        Evicts again until it is (bounded): an item may still be pinned when one eviction
        runs, by a lease of a client whose close the daemon has not taken yet, or by a
        write behind still reading its slots."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/tiers/l1/evict",
                                     method="POST", data=json.dumps({"all": True}).encode(),
                                     headers={"Content-Type": "application/json"})
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(req) as r:
                json.load(r)
            self.settle_l2()
            l1 = self.stats()["l1"]
            if l1["items"] == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"L1 kept {l1['items']} items ({l1['pinned_items']} pinned)")
            time.sleep(0.005)
