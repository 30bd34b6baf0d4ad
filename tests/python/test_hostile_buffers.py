"""test_hostile_buffers.py — a client that shrinks its staging file while kvtierd
registers it (issue 36, items 1 and 2). kvtierd maps a registered file and faults
it in; a page that vanished under it raised SIGBUS and killed the daemon. A memfd
is now sealed before it is measured, and a path buffer (which cannot be sealed) is
faulted in by the kernel's populate and a guarded touch: the registration fails
(EINVAL, 400), the daemon carries on. The path test killed the old daemon within
its first second. The memfd race (a shrink between the old daemon's size check and
its seal) was not reproduced from here: 2,000 registrations raced against the old
daemon survived; the test keeps the new order honest (every registration is
measured after its seal, so none passes the check and then maps a shrunk file).
Each shows its race was run (some registrations were refused), the daemon answers
after, and it exits clean (stop_checked: 0; no ASan report in the sanitizer build)."""

import errno
import json
import mmap
import os
import threading
import time
import urllib.error
import urllib.request

import kvtier
from kvtier import KvtierError

SIZE = 8 << 20
RACE_SECONDS = 2.0


class Shrinker:
    """A thread that shrinks and regrows the file it is pointed at, as fast as it can
    (a sealed memfd refuses the shrink: that is the point of the seal)."""

    def __init__(self):
        self.fd = -1
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.is_set():
            fd = self.fd
            try:
                os.ftruncate(fd, 4096)
                os.ftruncate(fd, SIZE)
            except OSError:
                pass  # sealed, or closed under us

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def request(d, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{d.port}{path}", method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def shrink_in_child(fds, current):
    """A child process (no GIL between it and us) that shrinks and regrows fds[i], i the
    index in current (shared memory), until i passes the end; its pid."""
    pid = os.fork()
    if pid:
        return pid
    while (i := int.from_bytes(current[:8], "little")) < len(fds):
        try:
            os.ftruncate(fds[i], 4096)
            os.ftruncate(fds[i], SIZE)
        except OSError:
            pass  # sealed: the registration won the race
    os._exit(0)


def test_memfd_shrunk_while_registered(daemon):
    """Each memfd is registered once, while the child shrinks and regrows it."""
    outcomes = {"registered": 0, "refused": 0}
    fds = []
    for _ in range(400):
        fds.append(os.memfd_create("race", os.MFD_ALLOW_SEALING))
        os.ftruncate(fds[-1], SIZE)
    current = mmap.mmap(-1, 8)  # shared with the child
    child = shrink_in_child(fds, current)
    try:
        with kvtier.Client(daemon.socket, "m", 4096) as c:
            for i, fd in enumerate(fds):
                current[:8] = i.to_bytes(8, "little")
                try:
                    c.unregister_buffer(c.register_buffer(fd, SIZE))
                    outcomes["registered"] += 1
                except KvtierError as e:
                    assert e.code == -errno.EINVAL, e  # measured after the seal: too small
                    outcomes["refused"] += 1
            c.ping()  # the same connection still served
    finally:
        current[:8] = len(fds).to_bytes(8, "little")
        os.waitpid(child, 0)
        for fd in fds:
            os.close(fd)
    assert outcomes["refused"] > 0 and outcomes["registered"] > 0, outcomes
    assert request(daemon, "GET", "/healthz")[0] == 200


def test_path_buffer_truncated_while_registered(daemon):
    path = f"/dev/shm/kvtier-race-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, SIZE)
    statuses = {}
    try:
        with Shrinker() as s:
            s.fd = fd
            end = time.monotonic() + RACE_SECONDS
            while time.monotonic() < end:
                status, body = request(daemon, "POST", "/v1/buffers",
                                       {"kind": "shm", "path": path, "size": SIZE,
                                        "pid": os.getpid()})
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    assert request(daemon, "DELETE", f"/v1/buffers/{body['index']}")[0] == 200
                else:
                    assert status == 400 and body["error"]["code"] == "invalid_field", body
    finally:
        os.close(fd)
        os.unlink(path)
    assert set(statuses) <= {200, 400} and statuses.get(400, 0) > 0, statuses
    assert request(daemon, "GET", "/healthz")[0] == 200
