"""test_hostile_control.py — what the control plane gives away or trips on (issue 36).
The dashboard's directory holds only what kvtierd should serve, but a symlink or a
FIFO can appear in it (item 9): a symlink at a plain name served any file it named; a
FIFO hung the HTTP thread until a writer came, and every endpoint with it. Both are
404 now, at once. /v1/namespaces listed every namespace's cache salt, to anyone
(item 7): it says whether one is salted now, never the salt. Each test failed on the
old daemon."""

import json
import os
import urllib.error
import urllib.request

import kvtier


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
