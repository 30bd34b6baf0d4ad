"""test_hostile_buffers.py — a client that shrinks its staging file while kvtierd
registers it (issue 36, items 1 and 2). kvtierd maps a registered file and faults
it in; a page that vanished under it raised SIGBUS and killed the daemon. A memfd
is now sealed before it is measured, and a path buffer (which cannot be sealed) is
faulted in by the kernel's populate and a guarded touch: the registration fails
(EINVAL, 400), the daemon carries on. The path test races for two seconds (it killed
the old daemon within the first); the memfd race itself (a shrink between the old
daemon's size check and its seal) was not reproduced from here, so its test checks
the order the fix rests on: a refused memfd is sealed already. Both fail on the old
daemon. The daemon exits clean after (stop_checked: 0; no ASan report in the
sanitizer build)."""

import errno
import fcntl
import json
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


def test_memfd_is_sealed_before_it_is_measured(daemon):
    """The old daemon measured a memfd, then sealed it: a client shrinking it between
    the two had the daemon map and touch pages past its end (SIGBUS). Now the seal
    comes first: a memfd too small for its REGISTER is refused, and sealed already."""
    with kvtier.Client(daemon.socket, "m", 4096) as c:
        fd = os.memfd_create("small", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 4096)
        try:
            c.register_buffer(fd, SIZE)
            raise AssertionError("a memfd smaller than its size was registered")
        except KvtierError as e:
            assert e.code == -errno.EINVAL, e
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK  # sealed, then measured
        os.ftruncate(fd, SIZE)  # growing is still allowed: the seal forbids shrinking only
        c.unregister_buffer(c.register_buffer(fd, SIZE))
        os.close(fd)
        c.ping()  # the same connection still served


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
