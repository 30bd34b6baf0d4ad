"""test_hostile_webdir.py — the dashboard's directory holds only what kvtierd should
serve, but a symlink or a FIFO can appear in it (issue 36, item 9). A symlink at a
plain name served any file it named; a FIFO hung the HTTP thread until a writer came,
and every endpoint with it. Both are 404 now, at once, and the dashboard and the
probes keep answering."""

import os
import urllib.error
import urllib.request


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
