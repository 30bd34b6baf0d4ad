"""test_l3.py — the L3 tier (docs/l3.md) with two or three kvtierd standing
for nodes (their own runtime dirs and sockets) sharing one L3 directory:
byte-exact loads across nodes, lookups naming tier 3 (tier 2 to a client
older than L3), each part published
once under concurrent stores, corrupt and truncated files quarantined, a hung
read cancelled, one whose cancel is refused abandoned, symlinks and FIFOs at part names not taken for parts, kill -9
of a publisher, the cap with two daemons writing, the namespace quota, and a
full, read-only or vanished mount (tmpfs, where this machine lets root
mount)."""

import glob
import json
import os
import select
import socket
import subprocess
import sys
import struct
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import kvtier

BLOCK = 64 * 1024
FILE = 4096 + BLOCK  # header block + data


def keys(n, base=0):
    return [kvtier.key_chain([base + i] * 4, 4)[0] for i in range(n)]


def data_of(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n * BLOCK, dtype=np.uint8)


def l3(d):
    return d.stats()["l3"]


def get(d, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}{path}") as r:
        return json.load(r)


def wait_for(cond, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def walked(d):
    """Waits for two more walks of d (the second starts after any publish so far)."""
    n = l3(d)["scans"]
    wait_for(lambda: l3(d)["scans"] >= n + 2, "two walks")


def store(d, ks, data, model="m"):
    with kvtier.Client(d.socket, model, BLOCK) as c:
        buf = c.create_buffer(len(ks) * BLOCK)
        np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)[:] = data[:len(ks) * BLOCK]
        assert c.store(buf.index, [(k, i * BLOCK, BLOCK) for i, k in enumerate(ks)]) == \
            [(0, BLOCK)] * len(ks)


def load(d, ks, model="m"):
    """(statuses, bytes) of a LOAD of ks into a zeroed buffer."""
    with kvtier.Client(d.socket, model, BLOCK) as c:
        buf = c.create_buffer(len(ks) * BLOCK)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        view[:] = 0
        got = c.load(buf.index, [(k, i * BLOCK, BLOCK) for i, k in enumerate(ks)])
        return [s for s, _ in got], view.copy()


def published(d, n):
    wait_for(lambda: l3(d)["published"] + l3(d)["publish_present"] >= n, f"{n} publishes")


def part_files(root):
    return sorted(glob.glob(os.path.join(root, "v1", "*", "*", "*", "*")))


@pytest.fixture
def shared(tmp_path):
    p = tmp_path / "l3"
    p.mkdir()
    return str(p)


def node(make_daemon, root, *flags):
    return make_daemon("--l3-path", root, "--l3-scan-ms", "50", *flags)


def published_then_fresh(make_daemon, root, n, seed):
    """Node A stores n blocks and publishes them; node B starts after, empty."""
    a = node(make_daemon, root)
    ks, data = keys(n), data_of(n, seed)
    store(a, ks, data)
    published(a, n)
    return a, node(make_daemon, root), ks, data


def start_fails(tmp_path, *flags):
    """kvtierd run with flags: its exit status and what it wrote to stderr."""
    exe = os.path.join(os.environ.get("KVT_BUILDDIR", "."), "kvtierd")
    run = subprocess.run([exe, "--runtime-dir", str(tmp_path), "--l1-size", "64MiB",
                          "--http", "127.0.0.1:0", *flags], capture_output=True, text=True,
                         timeout=60)
    return run.returncode, run.stderr


def test_a_node_loads_what_another_published(make_daemon, shared):
    a, b, ks, data = published_then_fresh(make_daemon, shared, 8, 1)
    assert l3(a)["published"] == 8 and l3(a)["bytes_written"] == 8 * FILE
    files = part_files(shared)
    assert len(files) == 8 and all(os.path.getsize(f) == FILE for f in files)
    # Fanned out: NSDIGEST/AA/BB/KEY.RANK, AA and BB the key's first two bytes.
    for f in files:
        ns, aa, bb, name = f.split(os.sep)[-4:]
        assert len(ns) == 16 and name.startswith(aa + bb) and name.endswith(".0")
    assert os.listdir(os.path.join(shared, "tmp")) == []
    # B has nothing in L1: its lookup names tier 3 once its walk saw A's files.
    walked(b)
    with kvtier.Client(b.socket, "m", BLOCK) as c:
        lk = c.lookup(ks)
        assert lk.hits == 8 and list(lk.tiers) == [3] * 8
    statuses, got = load(b, ks)
    assert statuses == [0] * 8 and np.array_equal(got, data)
    s = b.stats()
    assert s["l3"]["reads"] == 8 and s["l3"]["bytes_read"] == 8 * BLOCK
    assert s["l3"]["blocks_loaded"] == 8
    # Promoted into B's L1: the next load reads no file.
    statuses, got = load(b, ks)
    assert statuses == [0] * 8 and np.array_equal(got, data)
    assert l3(b)["reads"] == 8 and b.stats()["l3"]["blocks_loaded"] == 8
    tiers = {t["name"]: t for t in get(b, "/v1/tiers")["tiers"]}
    assert tiers["l3"]["state"] == "ready" and tiers["l3"]["hits"] == 8
    assert tiers["l3"]["items"] == 8 and tiers["l3"]["used_bytes"] == 8 * FILE
    # A key nobody stored is a miss, counted.
    statuses, _ = load(b, keys(1, 1000))
    assert statuses == [-2] and l3(b)["read_misses"] == 1


def raw_call(sock, op, payload):
    """One frame on a raw socket, the way a libkvtier of any version writes it
    (include/kvtier/protocol.h): the reply's status and payload."""
    sock.sendall(struct.pack("<IHHIiQ", 0x3154564B, op, 0, len(payload), 0, 9) + payload)
    head = sock.recv(24, socket.MSG_WAITALL)
    _, rop, flags, length, status, _ = struct.unpack("<IHHIiQ", head)
    assert rop == op and flags & 1
    return status, sock.recv(length, socket.MSG_WAITALL) if length else b""


def raw_lookup_tiers(d, ks, hello_flags):
    """The tiers a LOOKUP of ks names to a client whose HELLO had hello_flags."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(d.socket)
        hello = struct.pack("<HBBHHQQHHI", 1, 0, hello_flags, 1, 0, BLOCK, 0, 1, 0, 0) + b"m"
        assert raw_call(sock, 1, hello)[0] == 0
        status, rep = raw_call(sock, 5, struct.pack("<II", len(ks), 0) + b"".join(ks))
        assert status == 0
        hits, n, _lease = struct.unpack_from("<IIQ", rep)
        assert n == len(ks) and len(rep) == 16 + n
        return hits, list(rep[16:])


def test_a_client_older_than_l3_is_told_tier_2(make_daemon, shared):
    """A libkvtier older than L3 sends HELLO flags 0 and rejects tier 3: it is
    told 2 for blocks in L3 (protocol.h KVT_HELLO_TIER3), and loads them."""
    a, b, ks, data = published_then_fresh(make_daemon, shared, 4, 11)
    walked(b)
    assert raw_lookup_tiers(b, ks, 0) == (4, [2] * 4)
    assert raw_lookup_tiers(b, ks, 1) == (4, [3] * 4)
    assert raw_lookup_tiers(b, ks, 0x81) == (4, [3] * 4)  # bits it does not know: ignored
    statuses, got = load(b, ks)
    assert statuses == [0] * 4 and np.array_equal(got, data)
    assert raw_lookup_tiers(b, ks, 0) == (4, [1] * 4)  # promoted: L1 for every client


def test_concurrent_overlapping_stores_publish_each_part_once(make_daemon, shared):
    a, b = node(make_daemon, shared), node(make_daemon, shared)
    ks, data = keys(48), data_of(48, 2)
    # A stores 0..31, B stores 16..47: 16 keys in common, stored at once.
    ta = threading.Thread(target=store, args=(a, ks[:32], data[:32 * BLOCK]))
    tb = threading.Thread(target=store, args=(b, ks[16:], data[16 * BLOCK:]))
    ta.start(), tb.start(), ta.join(), tb.join()
    published(a, 32)
    published(b, 32)
    sa, sb = l3(a), l3(b)
    assert sa["publish_failed"] == sb["publish_failed"] == 0
    assert sa["published"] + sb["published"] == 48  # one file per part, whoever came first
    assert sa["publish_present"] + sb["publish_present"] == 16
    assert len(part_files(shared)) == 48
    c = node(make_daemon, shared)
    statuses, got = load(c, ks)
    assert statuses == [0] * 48 and np.array_equal(got, data)
    assert l3(c)["checksum_failures"] == 0


def test_corrupt_and_truncated_files_are_misses_and_quarantined(make_daemon, shared):
    _, b, ks, data = published_then_fresh(make_daemon, shared, 4, 3)
    paths = {f.rsplit(os.sep, 1)[1].split(".")[0]: f for f in part_files(shared)}
    flipped, cut = paths[ks[1].hex()], paths[ks[2].hex()]
    with open(flipped, "r+b") as f:  # one bit of the data
        f.seek(4096 + 77)
        byte = f.read(1)[0]
        f.seek(4096 + 77)
        f.write(bytes([byte ^ 1]))
    os.truncate(cut, 4096 + BLOCK // 2)
    statuses, got = load(b, ks)
    assert statuses == [0, -2, -2, 0]
    assert np.array_equal(got[:BLOCK], data[:BLOCK])
    assert np.array_equal(got[3 * BLOCK:], data[3 * BLOCK:])
    s = l3(b)
    assert s["checksum_failures"] == 2 and s["quarantined"] == 2 and s["read_failures"] == 2
    assert not os.path.exists(flipped) and not os.path.exists(cut)
    assert len(os.listdir(os.path.join(shared, "quarantine"))) == 2
    # Never served again: the next load of them is a plain miss.
    statuses, _ = load(b, ks[1:3])
    assert statuses == [-2, -2] and l3(b)["read_misses"] == 2


def daemon_has_open(d, path):
    fds = os.path.join("/proc", str(d.proc.pid), "fd")
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) == path:
                return True
        except FileNotFoundError:
            pass
    return False


def load_in_child(d, key):
    """A client process LOADing key from d (to be killed while it waits)."""
    child = ("import sys, kvtier\n"
             "c = kvtier.Client(sys.argv[1], 'm', %d)\n"
             "buf = c.create_buffer(%d)\n"
             "c.load(buf.index, [(bytes.fromhex(sys.argv[2]), 0, %d)])\n"
             % (BLOCK, BLOCK, BLOCK))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", child, d.socket, key.hex()], env=env)


def test_a_hung_l3_read_is_cancelled_and_the_load_answers(make_daemon, shared):
    """A part whose read never answers (a FIFO at its name, held open for writing and
    never written, as a hung file system would leave it): past --l3-op-timeout-ms the
    read is cancelled and the LOAD answers that block missing and the others whole; a
    client killed while its LOAD waits on such a read leaves the node serving."""
    a = node(make_daemon, shared)
    ks, data = keys(3), data_of(3, 9)
    store(a, ks, data)
    published(a, 3)
    b = node(make_daemon, shared, "--l3-op-timeout-ms", "1000")
    hung = {f.rsplit(os.sep, 1)[1].split(".")[0]: f for f in part_files(shared)}[ks[1].hex()]
    os.unlink(hung)
    os.mkfifo(hung)
    writer = os.open(hung, os.O_RDWR)
    try:
        p = load_in_child(b, ks[1])
        wait_for(lambda: daemon_has_open(b, hung), "the daemon reading the hung part")
        p.kill()
        p.wait()
        wait_for(lambda: l3(b)["op_timeouts"] == 1, "the hung read cancelled")
        assert b.proc.poll() is None, b.text()
        statuses, got = load(b, ks)
    finally:
        os.close(writer)
    assert statuses == [0, -2, 0]
    assert np.array_equal(got[:BLOCK], data[:BLOCK])
    assert np.array_equal(got[2 * BLOCK:], data[2 * BLOCK:])
    s = l3(b)
    assert s["op_timeouts"] == 2 and s["read_failures"] == 2 and s["reads"] == 2
    assert s["degraded"] == 0
    assert b.stop() == 0, b.text()


def test_a_read_whose_cancel_is_refused_is_abandoned(make_daemon, shared, monkeypatch):
    """A hard NFS mount refuses the cancel of a hung read. KVTIERD_TEST_L3_NO_CANCEL
    makes the daemon's L3 steps carry no linked timeout, which behaves the same: a
    FIFO at a part's name that gives the part's header and then nothing, so the data
    read hangs with its L1 slot taken. About a second past --l3-op-timeout-ms the read
    is abandoned: the LOAD answers that block missing and the others whole, the slot
    stays pinned (the kernel may still write it). A client killed while its LOAD waits
    on such a read does not hold the node up. When the kernel returns (the FIFO gets
    bytes) each abandoned read gives its memory back."""
    a = node(make_daemon, shared)
    ks, data = keys(3), data_of(3, 12)
    store(a, ks, data)
    published(a, 3)
    monkeypatch.setenv("KVTIERD_TEST_L3_NO_CANCEL", "1")
    b = node(make_daemon, shared, "--l3-op-timeout-ms", "200")
    monkeypatch.delenv("KVTIERD_TEST_L3_NO_CANCEL")
    assert "a test hook" in b.text()
    hung = {f.rsplit(os.sep, 1)[1].split(".")[0]: f for f in part_files(shared)}[ks[1].hex()]
    with open(hung, "rb") as f:
        header = f.read(4096)
    os.unlink(hung)
    os.mkfifo(hung)
    writer = os.open(hung, os.O_RDWR)
    try:
        os.write(writer, header)
        statuses, got = load(b, ks)
        assert statuses == [0, -2, 0]
        assert np.array_equal(got[:BLOCK], data[:BLOCK])
        assert np.array_equal(got[2 * BLOCK:], data[2 * BLOCK:])
        s = b.stats()
        assert s["l3"]["reads_abandoned"] == 1 and s["l3"]["reads_held"] == 1
        assert s["l3"]["op_timeouts"] == 0 and s["l1"]["pinned_items"] == 1
        # Again, from a client killed while it waits (this one hangs on the header).
        p = load_in_child(b, ks[1])
        wait_for(lambda: l3(b)["reads_abandoned"] == 2, "the second hung read abandoned")
        p.kill()
        p.wait()
        s = b.stats()
        assert s["l3"]["reads_held"] == 2 and s["l1"]["pinned_items"] == 1
        # The kernel returns: 4 KiB in the FIFO end one read (the first reader takes
        # them all), the next 4 KiB the other.
        for held in (1, 0):
            os.write(writer, bytes(4096))
            wait_for(lambda: l3(b)["reads_held"] == held, f"{held} read(s) still held")
    finally:
        os.close(writer)
    s = b.stats()
    assert s["l1"]["pinned_items"] == 0 and s["l3"]["read_failures"] == 2
    assert s["l3"]["reads"] == 2 and s["l3"]["quarantined"] == 0
    assert s["dataplane"]["clients_active"] == 0
    assert b.proc.poll() is None, b.text()


def test_foreign_entries_at_part_names_are_not_parts(make_daemon, shared):
    """A symlink (to a good copy of a part) and a FIFO at the names of parts: the walk
    counts neither, a LOAD of the symlinked part does not follow it (a miss), and the
    parts that are files are served."""
    a = node(make_daemon, shared)
    ks, data = keys(3), data_of(3, 11)
    store(a, ks, data)
    published(a, 3)
    files = {f.rsplit(os.sep, 1)[1].split(".")[0]: f for f in part_files(shared)}
    linked, piped = files[ks[1].hex()], files[ks[2].hex()]
    os.rename(linked, linked + ".copy")
    os.symlink(linked + ".copy", linked)
    os.unlink(piped)
    os.mkfifo(piped)
    b = node(make_daemon, shared)
    walked(b)
    s = l3(b)
    assert s["items"] == 1 and s["used_bytes"] == FILE
    statuses, got = load(b, ks[:2])
    assert statuses == [0, -2] and np.array_equal(got[:BLOCK], data[:BLOCK])
    assert l3(b)["read_failures"] == 1 and os.path.islink(linked)


def test_kill9_publisher_leaves_no_partial_file(make_daemon, shared):
    a = node(make_daemon, shared)
    ks, data = keys(64), data_of(64, 4)
    store(a, ks, data)
    wait_for(lambda: l3(a)["published"] >= 8, "some publishes")
    a.kill()  # mid-publish, most likely: the rest are queued or in flight
    # A temporary of a dead process of this node, and stale and fresh ones of another node.
    host = open("/proc/sys/kernel/hostname").read().strip().replace(".", "_")
    tmp = os.path.join(shared, "tmp")
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"{host}.{dead.pid}.7", "other.1.8", "other.1.9"):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(b"x" * 100)
    old = time.time() - 3600
    os.utime(os.path.join(tmp, "other.1.8"), (old, old))
    b = node(make_daemon, shared)  # this node again: the dead one's temporaries go at start
    assert not [n for n in os.listdir(tmp) if n.startswith(f"{host}.{dead.pid}.")]
    walked(b)
    assert l3(b)["temporaries_removed"] == 1  # the stale one; the fresh one stays
    left = os.listdir(tmp)
    assert "other.1.9" in left and "other.1.8" not in left
    # Every file under a final name is whole: B reads each byte-exact, no checksum failure.
    found = {f.rsplit(os.sep, 1)[1].split(".")[0] for f in part_files(shared)}
    present = [i for i, k in enumerate(ks) if k.hex() in found]
    assert len(present) >= 8
    statuses, got = load(b, [ks[i] for i in present])
    assert statuses == [0] * len(present) and l3(b)["checksum_failures"] == 0
    for j, i in enumerate(present):
        assert np.array_equal(got[j * BLOCK:(j + 1) * BLOCK], data[i * BLOCK:(i + 1) * BLOCK])


def test_cap_holds_with_two_nodes_writing(make_daemon, shared):
    cap = 20 * FILE
    a = node(make_daemon, shared, "--l3-size", str(cap))
    b = node(make_daemon, shared, "--l3-size", str(cap))
    ka, kb = keys(30), keys(30, 500)
    ta = threading.Thread(target=store, args=(a, ka, data_of(30, 5)))
    tb = threading.Thread(target=store, args=(b, kb, data_of(30, 6)))
    ta.start(), tb.start(), ta.join(), tb.join()
    published(a, 30)
    published(b, 30)
    walked(a)
    walked(b)
    on_disk = sum(os.path.getsize(f) for f in part_files(shared))
    assert on_disk <= cap
    assert l3(a)["used_bytes"] <= cap and l3(a)["capacity_bytes"] == cap
    removed = l3(a)["files_removed"] + l3(b)["files_removed"]
    assert removed >= 60 - 20 and len(part_files(shared)) == 60 - removed
    # The removed ones are misses for a node without them in L1, never a fault.
    c = node(make_daemon, shared)
    statuses, _ = load(c, ka + kb)
    assert set(statuses) <= {0, -2} and statuses.count(0) == len(part_files(shared))
    assert l3(c)["read_failures"] == 0


def test_namespace_quota_trims_only_the_namespace_past_it(make_daemon, shared):
    """Nodes A and B, without a quota, publish 8 and then 4 blocks of namespace "big",
    and A 3 of "small"; node C, with a quota of 6 files a namespace, counts every node's
    files: "big" loses its 7 oldest (down to 95% of the quota: 5 files), "small" none;
    /v1/namespaces and /metrics show what each namespace holds."""
    empty = node(make_daemon, shared, "--namespace-l3-quota", str(6 * FILE))
    walked(empty)  # walks of no files at all (UBSan: no sort of a NULL array)
    assert l3(empty)["quota_files_removed"] == 0 and l3(empty)["items"] == 0
    assert empty.stop() == 0  # its walks would trim "big" below before C does
    a, b = node(make_daemon, shared), node(make_daemon, shared)
    ka, kb, ks = keys(8), keys(4, 100), keys(3, 900)
    da, db, ds = data_of(8, 11), data_of(4, 12), data_of(3, 13)
    store(a, ka, da, model="big")
    published(a, 8)
    store(b, kb, db, model="big")
    published(b, 4)
    store(a, ks, ds, model="small")
    published(a, 11)
    c = node(make_daemon, shared, "--namespace-l3-quota", str(6 * FILE))
    walked(c)
    s = l3(c)
    assert s["quota_files_removed"] == 7 and s["files_removed"] == 0
    assert s["namespace_quota_bytes"] == 6 * FILE
    assert s["items"] == 8 and s["used_bytes"] == 8 * FILE
    left = {f.rsplit(os.sep, 1)[1].split(".")[0] for f in part_files(shared)}
    assert all(k.hex() in left for k in kb + ks)  # the newest of "big", and all of "small"
    assert sum(k.hex() in left for k in ka) == 1
    # C has none of them in L1: what is left loads byte-exact from L3, the rest is missing.
    statuses, got = load(c, kb, model="big")
    assert statuses == [0] * 4 and np.array_equal(got, db)
    statuses, got = load(c, ks, model="small")
    assert statuses == [0] * 3 and np.array_equal(got, ds)
    statuses, _ = load(c, ka, model="big")
    assert statuses.count(0) == 1 and statuses.count(-2) == 7
    assert l3(c)["read_failures"] == 0
    # What each namespace holds, every node's files, as C's walks count them.
    walked(c)
    held = {n["model"]: (n["l3_files"], n["l3_bytes"], n["l3_quota_bytes"])
            for n in get(c, "/v1/namespaces")["namespaces"]}
    assert held == {"big": (5, 5 * FILE, 6 * FILE), "small": (3, 3 * FILE, 6 * FILE)}
    with urllib.request.urlopen(f"http://127.0.0.1:{c.port}/metrics") as r:
        page = r.read().decode()
    for model, files in (("big", 5), ("small", 3)):
        line = next(ln for ln in page.splitlines()
                    if ln.startswith("kvtier_namespace_l3_bytes{") and f'model="{model}"' in ln)
        assert int(line.split()[-1]) == files * FILE, line


def test_start_refuses_a_path_that_is_not_a_writable_directory(tmp_path):
    notdir = tmp_path / "file"
    notdir.write_text("x")
    for path, why in ((str(notdir), "not a directory"),
                      (str(tmp_path / "absent"), "No such file or directory")):
        rc, err = start_fails(tmp_path, "--l3-path", path)
        assert rc != 0 and why in err, err
    rc, err = start_fails(tmp_path, "--l3-size", "1GiB")
    assert rc == 2 and "l3-size: given without l3-path" in err
    rc, err = start_fails(tmp_path, "--namespace-l3-quota", "1GiB")
    assert rc == 2 and "namespace-l3-quota: given without l3-path" in err


def test_client_killed_mid_load_from_l3(make_daemon, shared):
    _, b, ks, data = published_then_fresh(make_daemon, shared, 32, 7)
    child = ("import sys, kvtier\n"
             "c = kvtier.Client(sys.argv[1], 'm', %d)\n"
             "buf = c.create_buffer(32 * %d)\n"
             "ks = [kvtier.key_chain([i] * 4, 4)[0] for i in range(32)]\n"
             "print('go', flush=True)\n"
             "while True:\n"
             "    c.load(buf.index, [(k, i * %d, %d) for i, k in enumerate(ks)])\n"
             % (BLOCK, BLOCK, BLOCK, BLOCK))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", child, b.socket], stdout=subprocess.PIPE,
                             env=env)
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready and p.stdout.readline() == b"go\n"
        p.kill()
        p.wait()
        p.stdout.close()
        assert b.proc.poll() is None, b.text()
        # Its reads of L3 in flight finish into L1; another client is served byte-exact.
        req = urllib.request.Request(f"http://127.0.0.1:{b.port}/v1/tiers/l1/evict",
                                     data=b'{"all": true}', method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:  # the next round reads L3 again
            assert json.load(r)["complete"] is True
    statuses, got = load(b, ks)
    assert statuses == [0] * 32 and np.array_equal(got, data)
    assert l3(b)["checksum_failures"] == 0
    assert b.stop() == 0, b.text()


def mount_tmpfs(path, size):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def health(d):
    return get(d, "/healthz")


def test_full_read_only_and_vanished_mount(make_daemon, tmp_path):
    root = str(tmp_path / "mnt")
    os.mkdir(root)
    mount_tmpfs(root, "320k")  # room for the directories and a few files
    try:
        a = node(make_daemon, root)
        ks, data = keys(8), data_of(8, 8)
        store(a, ks, data)
        wait_for(lambda: l3(a)["degraded"] == 1, "degraded")
        assert health(a)["status"] == "degraded" and health(a)["l3"]["reason"] == "full"
        s = l3(a)
        assert s["publish_failed"] >= 1 and s["io_errors"] >= 1
        statuses, got = load(a, ks)  # L1 serves on
        assert statuses == [0] * 8 and np.array_equal(got, data)
        assert os.listdir(os.path.join(root, "tmp")) == []  # failed temporaries removed
        subprocess.run(["mount", "-o", "remount,size=8m", root], check=True)
        wait_for(lambda: health(a)["status"] == "ok", "the probe to clear it")
        subprocess.run(["mount", "-o", "remount,ro", root], check=True)
        rc, err = start_fails(tmp_path, "--l3-path", root)
        assert rc != 0 and "not writable: Read-only file system" in err, err
        store(a, keys(2, 100), data_of(2, 9))
        wait_for(lambda: health(a).get("l3", {}).get("reason") == "read-only", "read-only")
        subprocess.run(["mount", "-o", "remount,rw", root], check=True)
        wait_for(lambda: health(a)["status"] == "ok", "writable again")
        subprocess.run(["umount", "-l", root], check=True)
        wait_for(lambda: health(a).get("l3", {}).get("reason") == "gone", "the mount gone")
        statuses, got = load(a, ks)
        assert statuses == [0] * 8 and np.array_equal(got, data)
        assert a.stop() == 0
    finally:
        subprocess.run(["umount", "-l", root], capture_output=True)


def test_parts_gone_from_l1_are_published_from_l2(make_daemon, shared, tmp_path):
    """A tiny L1 and one publish at a time: most parts leave L1 (written behind to L2, then
    evicted) before their turn; they are read back from L2 and published, none skipped."""
    big = 1 << 20
    a = node(make_daemon, shared, "--l1-size", "16MiB", "--l2-path", str(tmp_path / "l2"),
             "--l2-size", "128MiB", "--l3-queue-depth", "1")
    n = 64
    ks = keys(n)
    data = np.random.default_rng(10).integers(0, 256, n * big, dtype=np.uint8)
    with kvtier.Client(a.socket, "m", big) as c:
        buf = c.create_buffer(4 * big)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        for first in range(0, n, 4):
            view[:] = data[first * big:(first + 4) * big]
            assert c.store(buf.index, [(ks[first + j], j * big, big) for j in range(4)]) == \
                [(0, big)] * 4
    wait_for(lambda: l3(a)["published"] + l3(a)["publish_skipped"] >= n, "every part's turn")
    s = l3(a)
    assert s["published"] == n and s["publish_skipped"] == 0 and s["published_from_l2"] > 0
    b = node(make_daemon, shared, "--l1-size", "256MiB")
    with kvtier.Client(b.socket, "m", big) as c:
        buf = c.create_buffer(n * big)
        view = np.frombuffer(kvtier.mmap_view(buf), dtype=np.uint8)
        assert c.load(buf.index, [(k, i * big, big) for i, k in enumerate(ks)]) == [(0, big)] * n
        assert np.array_equal(view, data)


def test_hostile_writers_of_the_shared_directory(make_daemon, shared, tmp_path):
    """A writer of the shared directory (issue 36, items 14 to 16 and 19): a sparse
    file claiming 1 TiB at a part's name made every node's keeper delete every valid
    part to get under the cap; a symlinked directory led the walk (and its removals)
    outside L3; quarantine/ grew without bound and outside the cap; an emptied L3
    directory was never made again. Now: a file's bytes are what it allocates, one
    past the largest part is foreign; the walk and its removals go beneath the root
    through no symlink, as reads do; quarantined files count, and go after an hour
    or past a sixteenth of the cap; L3's own directories are made again."""
    cap = 10 * FILE
    a = node(make_daemon, shared, "--l3-size", str(cap))
    ks, data = keys(4), data_of(4, 21)
    store(a, ks, data)
    published(a, 4)
    walked(a)
    parts = part_files(shared)
    assert len(parts) == 4
    # 14: a sparse giant at the name of a part of the same namespace.
    ns_dir = os.path.dirname(os.path.dirname(os.path.dirname(parts[0])))
    other_key = kvtier.key_chain([999] * 4, 4)[0].hex()
    giant = os.path.join(ns_dir, other_key[:2], other_key[2:4], other_key + ".0")
    os.makedirs(os.path.dirname(giant), exist_ok=True)
    with open(giant, "wb") as f:
        f.truncate(1 << 40)
    # 15: a namespace directory linked to a directory outside L3, holding a file at a part's name.
    outside = tmp_path / "outside"
    victim_dir = outside / other_key[:2] / other_key[2:4]
    victim_dir.mkdir(parents=True)
    victim = victim_dir / (other_key + ".0")
    victim.write_bytes(b"x" * (cap * 2))
    os.utime(victim, (1, 1))  # the oldest file anywhere: the first a cap would remove
    os.symlink(outside, os.path.join(shared, "v1", "00000000000000aa"))
    # 16: quarantined files: one older than an hour, one fresh.
    old_q = os.path.join(shared, "quarantine", "old")
    new_q = os.path.join(shared, "quarantine", "new")
    for p in (old_q, new_q):
        with open(p, "wb") as f:
            f.write(b"q" * 4096)
    os.utime(old_q, (time.time() - 7200, time.time() - 7200))
    walked(a)
    s = l3(a)
    inside = [p for p in part_files(shared) if "00000000000000aa" not in p]  # glob follows links
    assert giant in inside and len(inside) == 5
    assert s["files_removed"] == 0  # the old daemon removed every part for the giant
    assert victim.exists()  # the old walk followed the link and could remove it
    assert not os.path.exists(old_q) and os.path.exists(new_q)
    assert s["quarantine_removed"] == 1 and s["quarantine_bytes"] == 4096
    assert s["items"] == 4 and s["used_bytes"] == 4 * FILE + 4096
    b = node(make_daemon, shared)
    statuses, got = load(b, ks)
    assert statuses == [0] * 4 and np.array_equal(got, data)
    # 19: the directory emptied under the daemon is made again, and publishes go on.
    for sub in ("tmp", "quarantine", "v1"):
        subprocess.run(["rm", "-rf", os.path.join(shared, sub)], check=True)
    walked(a)
    walked(b)
    assert all(os.path.isdir(os.path.join(shared, sub)) for sub in ("tmp", "quarantine", "v1"))
    assert l3(a)["dirs_remade"] + l3(b)["dirs_remade"] == 3  # whichever node walked first
    more = keys(2, 100)
    store(a, more, data_of(2, 22))
    published(a, 6)


def test_l3_is_not_evicted_by_request(make_daemon, shared):
    """POST /v1/tiers/l3/evict said there was no tier l3 while /v1/tiers listed it (issue
    37, item 9): it is 409 not_evictable now, saying what does remove L3's files."""
    d = node(make_daemon, shared)
    assert [t["name"] for t in get(d, "/v1/tiers")["tiers"]][-1] == "l3"
    req = urllib.request.Request(f"http://127.0.0.1:{d.port}/v1/tiers/l3/evict", method="POST",
                                 data=b'{"all": true}', headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req)
        raise AssertionError("evicted L3")
    except urllib.error.HTTPError as e:
        body = json.load(e)
        assert e.code == 409 and body["error"]["code"] == "not_evictable", body
        assert "l3-size" in body["error"]["message"]


def test_signed_parts_with_a_cluster_key(make_daemon, shared, tmp_path):
    """--l3-key-file (issue 36, item 17): a node with the cluster key signs what it
    publishes and serves only parts whose signature verifies. A part a keyless node
    published is a miss left in place; one signed with another key (a forger's) is
    quarantined; a keyless node still reads signed parts."""
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(os.urandom(32))
    other.write_bytes(os.urandom(32))
    a = node(make_daemon, shared, "--l3-key-file", str(key))
    ks, data = keys(3), data_of(3, 31)
    store(a, ks[:1], data[:BLOCK])
    published(a, 1)
    keyless = node(make_daemon, shared)
    store(keyless, ks[1:2], data[BLOCK:2 * BLOCK])
    published(keyless, 1)
    forger = node(make_daemon, shared, "--l3-key-file", str(other))
    store(forger, ks[2:3], data[2 * BLOCK:])
    published(forger, 1)
    b = node(make_daemon, shared, "--l3-key-file", str(key))
    walked(b)
    statuses, got = load(b, ks)
    assert statuses == [0, -2, -2], statuses  # served; unsigned and forged: misses
    assert np.array_equal(got[:BLOCK], data[:BLOCK])
    s = l3(b)
    assert (s["unsigned_parts"], s["bad_signatures"], s["quarantined"]) == (1, 1, 1)
    assert len(part_files(shared)) == 2  # the forged part went to quarantine/
    statuses, got = load(node(make_daemon, shared), ks[:2])
    assert statuses == [0, 0] and np.array_equal(got, data[:2 * BLOCK])
