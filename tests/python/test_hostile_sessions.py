"""test_hostile_sessions.py — joining another client's session (issue 36, item 6).

A client's lanes share one session; a new lane joins it by naming it in HELLO. The
old daemon took the session's id for this, the same id GET /v1/buffers lists to
anyone as a buffer's owner, and checked only that the joiner's pid matched where both
pids were known: in a pod without a shared PID namespace (the shipped Deployment)
every pid is 0, so any process that could reach the socket joined any session and
used its staging buffers. A lane now joins with the session's secret, which HELLO's
reply tells only the session's maker and nothing lists, and only from the same uid.
A file registered by path over HTTP can be given to a client by that secret, so path
buffers work without a shared PID namespace. Each test failed on the old daemon."""

import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest

import kvtier
from kvtierd import Daemon

MAGIC = 0x3154564B
OP_HELLO, OP_LOAD = 1, 8
HDR = struct.Struct("<IHHIiQ")
HELLO = struct.Struct("<HBBHHQQHHI")


def hello(sock_path: str, model: bytes, block_bytes: int, session: int) -> tuple[int, int]:
    """One raw HELLO as a worker of rank 0; returns (status, session in the reply)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock_path)
        s.settimeout(10)
        payload = HELLO.pack(1, 0, 0, 1, 0, block_bytes, session, len(model), 0, 0) + model
        s.sendall(HDR.pack(MAGIC, OP_HELLO, 0, len(payload), 0, 7) + payload)
        head = recv_exact(s, HDR.size)
        _, _, _, length, status, _ = HDR.unpack(head)
        body = recv_exact(s, length)
        return status, struct.unpack_from("<Q", body)[0] if status == 0 else 0


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "kvtierd closed the connection"
        out += chunk
    return out


def request(d: Daemon, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{d.port}{path}", method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_listed_owner_does_not_join_the_session(daemon):
    """What GET /v1/buffers shows of a session does not let a lane join it."""
    with kvtier.Client(daemon.socket, "victim", 4096) as victim:
        victim.create_buffer(1 << 20)
        status, listing = request(daemon, "GET", "/v1/buffers")
        assert status == 200
        owner = int(listing["buffers"][0]["owner"], 16)
        rejected = daemon.stats()["dataplane"]["rejected"]["bad_hello"]
        status, _ = hello(daemon.socket, b"victim", 4096, owner)
        assert status == -errno.EPERM, status  # the old daemon: 0, the attacker joined
        assert daemon.stats()["dataplane"]["rejected"]["bad_hello"] == rejected + 1
        assert victim.session != listing["buffers"][0]["owner"]
        # The secret is what joins: the victim's own second lane still can.
        status, joined = hello(daemon.socket, b"victim", 4096, int(victim.session, 16))
        assert status == 0 and joined == int(victim.session, 16)


def test_path_buffer_for_a_session(daemon, tmp_path):
    """POST /v1/buffers gives a /dev/shm file to a client named by its secret; only
    that client may use it, and it goes with the client."""
    path = f"/dev/shm/kvtier-test-{os.getpid()}"
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    try:
        with kvtier.Client(daemon.socket, "m", 4096) as c, kvtier.Client(daemon.socket, "m", 4096) as other:
            status, body = request(daemon, "POST", "/v1/buffers",
                                   {"kind": "shm", "path": path, "size": 1 << 20, "session": c.session})
            assert status == 200, body
            index = body["index"]
            _, listing = request(daemon, "GET", "/v1/buffers")
            assert [b["owner"] for b in listing["buffers"]] == [body["owner"]]
            assert body["owner"] != c.session  # the secret is never shown
            key = bytes(range(16))
            c.store(index, [(key, 0, 4096)])  # the owner may
            with pytest.raises(kvtier.KvtierError) as e:
                other.load(index, [(key, 0, 4096)])
            assert e.value.code == -errno.EPERM
        _, listing = request(daemon, "GET", "/v1/buffers")
        assert listing["buffers"] == []  # went with its client
        status, body = request(daemon, "POST", "/v1/buffers",
                               {"kind": "shm", "path": path, "size": 1 << 20, "session": "00000000000000ff"})
        assert status == 400 and body["error"]["message"] == "session: no client has this session"
        status, body = request(daemon, "POST", "/v1/buffers",
                               {"kind": "shm", "path": path, "size": 1 << 20, "session": "ff", "pid": 1})
        assert status == 400
    finally:
        os.unlink(path)


JOIN_AS_NOBODY = """
import os, sys
from test_hostile_sessions import hello
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print(hello(sys.argv[1], b"victim", 4096, int(sys.argv[2], 16))[0])
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another uid")
def test_another_uid_does_not_join_even_with_the_secret():
    """The secret is not enough from another uid (a leaked secret, a shared socket)."""
    top = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(top, 0o755)
        d = Daemon(top)
        try:
            os.chmod(d.socket, 0o777)
            with kvtier.Client(d.socket, "victim", 4096) as victim:
                out = subprocess.run([sys.executable, "-c", JOIN_AS_NOBODY, d.socket, victim.session],
                                     env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                                     capture_output=True, text=True, timeout=60, check=True)
                assert int(out.stdout) == -errno.EPERM, out
        finally:
            d.stop_checked()
    finally:
        shutil.rmtree(top)
