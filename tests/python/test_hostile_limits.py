"""test_hostile_limits.py — one local process exhausting what every client shares
(issue 36, items 3 and 10 to 13). Sessions cost nothing (each connection makes one),
so the limits that stop one process are per uid (SO_PEERCRED, right across PID
namespaces): connections, namespaces, buffers and their bytes, leased bytes. A
connection must send HELLO in time, and at the connection limit the oldest one that
has not is closed to make room; fds come only with the REGISTER that takes them; the
fd limit is raised at start. A registered buffer is never faulted in by the daemon.
Each test failed on the old daemon."""

import errno
import json
import os
import socket
import struct
import time
import urllib.request

import pytest

import kvtier
from kvtier import KvtierError
from kvtierd import Daemon
from test_hostile_sessions import HDR, MAGIC, hello, recv_exact

MiB = 1 << 20
OP_PING = 2
KVT_ENSLIMIT = 4096 + 5  # include/kvtier/kvtier.h


def rejected(d, reason: str) -> int:
    return d.stats()["dataplane"]["rejected"][reason]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_sparse_memfd_costs_the_daemon_nothing(make_daemon):
    """A 3 GiB sparse memfd took 13 s of the loop and 3 GiB of the daemon's memory at
    REGISTER (item 3): nothing is faulted in now; and a buffer over --max-buffer-size
    is -EFBIG, past a uid's --max-buffer-bytes-per-uid -EDQUOT."""
    d = make_daemon("--max-buffer-size", "1GiB", "--max-buffer-bytes-per-uid", "1536MiB")
    before = rss_kib(d.proc.pid)
    with kvtier.Client(d.socket, "m", 4096) as c:
        fd = os.memfd_create("sparse", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 2 << 30)  # sparse: nothing allocated
        c.register_buffer(fd, 1 << 30)
        assert rss_kib(d.proc.pid) - before < 64 * 1024  # the old daemon: + 1 GiB
        with pytest.raises(KvtierError) as e:
            c.register_buffer(fd, (1 << 30) + 4096)
        assert e.value.code == -errno.EFBIG
        with pytest.raises(KvtierError) as e:
            c.register_buffer(fd, 768 * MiB)  # 1 GiB + 768 MiB > 1.5 GiB for this uid
        assert e.value.code == -errno.EDQUOT
        assert rejected(d, "peer_limit") == 1
        os.close(fd)


def test_throwaway_clients_do_not_fill_the_namespaces(daemon):
    """1024 throwaway clients each storing one byte filled the namespace table for good
    (item 10): the per-client limit counted sessions, and each connection is one. One
    uid's clients may hold 64 namespaces they created (--max-namespaces-per-uid)."""
    key = bytes(range(16))
    for i in range(65):
        try:
            with kvtier.Client(daemon.socket, f"throwaway-{i}", 4096) as c:
                b = c.create_buffer(4096)
                c.store(b.index, [(key, 0, 1)])
        except KvtierError as e:
            assert i == 64 and e.code == -KVT_ENSLIMIT, (i, e)
            break
    else:
        raise AssertionError("the 65th namespace of one uid was created")
    assert rejected(daemon, "peer_limit") == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/v1/namespaces") as r:
        assert len(json.load(r)["namespaces"]) == 64


def test_one_uid_cannot_lease_all_of_l1(daemon):
    """One client leasing everything made every other tenant's STORE fail with
    KVT_EALLPINNED (item 11): a uid's leases may pin half of L1 (64 MiB here) at
    most; a LOOKUP past it is answered without a lease, and the other tenant stores."""
    blocks = 40
    with kvtier.Client(daemon.socket, "hog", MiB) as hog:
        b = hog.create_buffer(blocks * MiB)
        keys = [struct.pack("<QQ", 1, i) for i in range(blocks)]
        assert all(s == 0 for s, _ in hog.store(b.index, [(k, i * MiB, MiB) for i, k in enumerate(keys)]))
        whole = hog.lookup(keys, lease_ms=60000)
        assert whole.hits == blocks and whole.lease_id == 0  # 40 MiB > 32: the old daemon leased it
        half = hog.lookup(keys[:20], lease_ms=60000)
        assert half.hits == 20 and half.lease_id != 0
        rest = hog.lookup(keys[20:], lease_ms=60000)
        assert rest.hits == 20 and rest.lease_id == 0
        assert rejected(daemon, "peer_limit") == 2
        with kvtier.Client(daemon.socket, "tenant", MiB) as other:
            ob = other.create_buffer(40 * MiB)  # 64 MiB, less the 20 leased, and some
            okeys = [struct.pack("<QQ", 2, i) for i in range(40)]
            statuses = other.store(ob.index, [(k, i * MiB, MiB) for i, k in enumerate(okeys)])
            assert [s for s, _ in statuses if s] == []


def test_connections_without_hello_make_room(make_daemon):
    """1024 connections that never sent HELLO locked new clients out, with no timeout
    (item 12): at --max-connections the oldest connection without a HELLO is closed to
    make room, and one that stays silent is closed after --hello-timeout-ms."""
    d = make_daemon("--max-connections", "8", "--hello-timeout-ms", "1000")
    existing = kvtier.Client(d.socket, "m", 4096)  # there before the attack
    silent = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(7)]
    try:
        for s in silent:
            s.connect(d.socket)
        with kvtier.Client(d.socket, "m", 4096) as c:  # the old daemon: refused
            c.ping()
        silent[0].settimeout(10)
        assert silent[0].recv(1) == b""  # the oldest made room
        for s in silent[1:]:
            s.settimeout(10)
            assert s.recv(1) == b""  # closed at its timeout: 1 s, checked each 0.5 s
        assert rejected(d, "hello_timeout") == 7
        existing.ping()
    finally:
        existing.close()
        for s in silent:
            s.close()


def test_buffers_per_uid(make_daemon):
    """One process filled the 4096-entry buffer table in 0.5 s through many sessions
    (item 12): one uid's clients hold --max-buffers-per-uid at most."""
    d = make_daemon("--max-buffers-per-uid", "3")
    with kvtier.Client(d.socket, "m", 4096) as a, kvtier.Client(d.socket, "m", 4096) as b:
        a.create_buffer(4096)
        a.create_buffer(4096)
        b.create_buffer(4096)
        with pytest.raises(KvtierError) as e:
            b.create_buffer(4096)
        assert e.value.code == -errno.EDQUOT
    with kvtier.Client(d.socket, "m", 4096) as c:
        c.create_buffer(4096)  # the others' went with them


def send_with_fd(s: socket.socket, data: bytes, fd: int) -> None:
    s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])


def test_fds_come_only_with_register(daemon):
    """Any frame could park fds in the daemon, and its fd limit stayed the soft 1024
    (item 13): fds sent before HELLO or with a frame that takes none are closed at once
    (stray_fds), and the soft limit is raised to the hard one at start."""
    pid = daemon.proc.pid
    with open(f"/proc/{pid}/limits") as f:
        soft, hard = next(line for line in f if line.startswith("Max open files")).split()[3:5]
    assert soft == hard
    before = open_fds(pid)
    spare = os.open("/dev/null", os.O_RDONLY)
    try:
        conns = []
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(daemon.socket)
            ping = HDR.pack(MAGIC, OP_PING, 0, 0, 0, 1)
            send_with_fd(s, ping, spare)  # before HELLO: a PING with an fd
            s.settimeout(10)
            assert HDR.unpack(recv_exact(s, HDR.size))[4] == -errno.ENOTCONN
            conns.append(s)
        with kvtier.Client(daemon.socket, "m", 4096) as c:
            c.ping()  # a round trip: the daemon has read every frame before it
        assert open_fds(pid) <= before + 20 + 2  # the sockets, not 20 more fds
        assert rejected(daemon, "stray_fds") == 20
        for s in conns:
            s.close()
    finally:
        os.close(spare)
    status, session = hello(daemon.socket, b"m", 4096, 0)
    assert status == 0 and session


def test_out_of_fds_sheds_and_recovers(tmp_path, monkeypatch):
    """At the fd limit accept fails, the listener stays readable and the loop would
    spin (item 13): a spare fd is given up to accept the waiting connection and close
    it at once (fd_limit), and once fds are free again new clients are served. The
    daemon runs with a limit of 96 fds here, and says it is low."""
    exe = os.environ.get("KVTIERD", os.path.join(os.environ.get("KVT_BUILDDIR", "."), "kvtierd"))
    wrapper = tmp_path / "kvtierd-96-fds"
    wrapper.write_text(f'#!/bin/sh\nulimit -Sn 96 && ulimit -Hn 96 && exec "{os.path.abspath(exe)}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("KVTIERD", str(wrapper))
    run = tmp_path / "run"
    run.mkdir()
    d = Daemon(run, "--hello-timeout-ms", "60000")
    held = []
    try:
        assert "file descriptors: the limit is 96" in d.text()
        for _ in range(120):  # more than the daemon has fds for
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            held.append(s)
        held[-1].settimeout(10)
        assert held[-1].recv(1) == b""  # accepted and closed at once: the old daemon spun
    finally:
        for s in held:
            s.close()
    try:
        deadline = time.monotonic() + 10  # the daemon frees the fds of the closed sockets
        while True:
            try:
                with kvtier.Client(d.socket, "m", 4096) as c:
                    c.ping()
                break
            except KvtierError:
                assert time.monotonic() < deadline, "no client served once the fds were free"
        assert rejected(d, "fd_limit") > 0
    finally:
        d.stop_checked()
