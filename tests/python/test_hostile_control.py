"""test_hostile_control.py — what the control plane gives away or trips on (issue 36).
The dashboard's directory holds only what kvtierd should serve, but a symlink or a
FIFO can appear in it (item 9): a symlink at a plain name served any file it named; a
FIFO hung the HTTP thread until a writer came, and every endpoint with it. Both are
404 now, at once. /v1/namespaces listed every namespace's cache salt, to anyone
(item 7): it says whether one is salted now, never the salt. Each test failed on the
old daemon. Items 4, 5 and 8 follow: a held loop, slow clients, foreign hosts."""

import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import kvtier
from kvtierd import Daemon


def get(d, path, timeout=5):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{d.port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_links_and_fifos_are_not_served(make_daemon, tmp_path):
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<!doctype html><title>kvtier</title>")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the dashboard")
    os.symlink(secret, web / "leak.js")
    os.mkfifo(web / "stall.js")
    d = make_daemon("--web-dir", str(web))
    assert get(d, "/leak.js")[0] == 404
    assert get(d, "/stall.js")[0] == 404  # at once: the timeout would raise
    assert get(d, "/healthz")[0] == 200
    status, body = get(d, "/")
    assert status == 200 and b"kvtier" in body


def test_salts_are_never_listed(daemon):
    """A cache salt is all a client needs to join a tenant's namespace and read or
    pre-poison its blocks: /v1/namespaces says whether a namespace is salted, and its
    digest, never the salt."""
    salt = "tenant-7f3a9c2e51d04b88"
    with kvtier.Client(daemon.socket, "m", 4096, cache_salt=salt):
        status, body = get(daemon, "/v1/namespaces")
    assert status == 200 and salt.encode() not in body
    listed = json.loads(body)["namespaces"]
    assert [(n["model"], n["salted"]) for n in listed] == [("m", True)]
    assert len(listed[0]["digest"]) == 16 and "salt" not in listed[0]


def test_foreign_hosts_and_origins_are_refused(make_daemon):
    """A page in a browser on the host reached the control plane through DNS
    rebinding (its own name, resolving to 127.0.0.1) and could change policy and
    evict, or post to it from its own site (item 8): a Host that is not an address,
    localhost or a name of --http-hosts is 403, as is an Origin that is not the
    request's own host; each counted. The old daemon served both."""
    d = make_daemon("--http-hosts", "kvtier.example.svc")
    here = f"127.0.0.1:{d.port}"
    cases = [({"Host": f"rebound.example:{d.port}"}, 403),
             ({"Host": here, "Origin": "http://evil.example"}, 403),
             ({"Host": f"kvtier.example.svc:{d.port}"}, 200),
             ({"Host": f"localhost:{d.port}"}, 200),
             ({"Host": here, "Origin": f"http://{here}"}, 200)]
    for headers, want in cases:
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=5)
        conn.putrequest("POST", "/v1/tiers/l1/evict", skip_host=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        body = b'{"all": true}'
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        assert r.status == want, (headers, r.status, r.read())
        r.read()
        conn.close()
    http_stats = d.stats()["http"]
    assert (http_stats["refused_host"], http_stats["refused_origin"]) == (1, 1)


def test_probes_answer_while_the_loop_is_held(tmp_path, monkeypatch):
    """A stalled event loop froze /healthz: one HTTP thread, and a /metrics scrape
    before it waited on the loop without end (item 4). Probes never wait on the loop
    now, each request has its own thread, and a call the loop does not take within
    5 s is taken back: 503 loop_busy, counted. The loop is held by a test hook
    (KVTIERD_TEST_STALL_MS, SIGUSR2); the old daemon died of the signal."""
    monkeypatch.setenv("KVTIERD_TEST_STALL_MS", "8000")
    d = Daemon(tmp_path)
    try:
        d.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while "holding the event loop" not in d.text():
            assert time.monotonic() < deadline, d.text()
            time.sleep(0.01)
        scrape = {}
        t = threading.Thread(target=lambda: scrape.update(r=get(d, "/metrics", timeout=30)))
        t.start()
        for path in ("/healthz", "/readyz", "/v1/stats"):
            status, _ = get(d, path, timeout=2)  # the old daemon: queued behind the scrape
            assert status == 200, path
        t.join(30)
        status, body = scrape["r"]
        assert status == 503 and json.loads(body)["error"]["code"] == "loop_busy"
        assert d.stats()["http"]["loop_busy"] == 1
    finally:
        d.stop_checked()


def test_slow_clients_do_not_lock_out_probes(daemon):
    """64 connections that never finished their request locked every loopback client
    out, the kubelet's probes included, for as long as they stayed (item 5). At most
    256 connections may wait for their request now: each new one past that closes the
    oldest waiting one (each request also has 10 s in all), so a probe that sends its
    request at once is answered however many slow connections one process holds, and
    a data-plane client carries on. The old daemon refused the probe."""
    slow = []
    client = kvtier.Client(daemon.socket, "m", 4096)  # well-behaved, and there before the attack
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(s)
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        # 301 waited: the 45 oldest were closed, oldest first, the rest are open.
        for s in slow[:45]:
            assert s.recv(1) == b""
        for s in slow[45:]:
            s.setblocking(False)
            try:
                assert s.recv(1) != b""
            except BlockingIOError:
                pass  # nothing to read: still open
        conn.request("GET", "/v1/stats")  # on the same connection: no new one waits
        r = conn.getresponse()
        assert json.loads(r.read())["http"]["shed_crowded"] == 45
        conn.close()
        client.ping()
        with kvtier.Client(daemon.socket, "m", 4096) as c:
            c.ping()
    finally:
        client.close()
        for s in slow:
            s.close()
