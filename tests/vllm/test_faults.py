"""test_faults.py — real vLLM engines while kvtierd dies, comes back, or
serves a corrupt block, and kvtierd while a vLLM engine dies: every output
is the output of recomputing, nothing hangs, and what a dead engine held
in kvtierd comes back."""

import os
import signal
from typing import Any

from conftest import wait_for
from kvtierd import Daemon
from l2file import flip_data_byte, records
from test_engine import CHUNK, SCHEDULING_NOISE, same_outputs, tokens

# A fault reschedules requests (a failed load is recomputed later, in another batch):
# logprobs are compared within vLLM's scheduling noise (test_engine.SCHEDULING_NOISE).
TOL = SCHEDULING_NOISE
# vLLM's own prefix cache off: every prefix hit comes from kvtierd or nowhere.
NO_LOCAL = {"prefix_caching": False, "extra": {"reconnect_ms": 0}}


def family(seed: int, n: int, chunks: int = 2) -> tuple[list[list[int]], list[list[int]]]:
    """n prompts of `chunks` whole chunks and a tail, and n more sharing those chunks."""
    first = [tokens(chunks * CHUNK + 20, seed + i) for i in range(n)]
    again = [p[:chunks * CHUNK] + tokens(30, seed + 100 + i) for i, p in enumerate(first)]
    return first, again


def test_kvtierd_killed_mid_generation_then_restarted(daemon, engine, start_engine):
    a, a_again = family(1, 4)
    c, c_again = family(50, 3)
    ref = engine(a + a_again + c + c_again)["outputs"]
    want = [ref[:4], ref[4:8], ref[8:11], ref[11:]]

    e = start_engine(batches=[a, a_again, c, c_again], socket=daemon.socket, **NO_LOCAL)
    same_outputs(e.batch(0), {"outputs": want[0]}, TOL)
    wait_for(lambda: daemon.stats()["l1"]["parts_stored"] == 8, "a's 8 chunks")
    e.go(1)
    daemon.kill()  # while batch 1 looks up and loads
    same_outputs(e.batch(1), {"outputs": want[1]}, TOL)  # recomputed, no hang

    back = Daemon(daemon.dir)  # same runtime dir, same socket: empty
    try:
        e.go(2)
        same_outputs(e.batch(2), {"outputs": want[2]}, TOL)
        wait_for(lambda: back.stats()["l1"]["parts_stored"] == 6,
                 lambda: f"c's 6 chunks in the new kvtierd: {back.stats()['l1']}")
        e.go(3)
        last = e.batch(3)
        same_outputs(last, {"outputs": want[3]}, TOL)
        assert [o["num_cached_tokens"] for o in last["outputs"]] == [2 * CHUNK] * 3
        l1 = back.stats()["l1"]
        assert (l1["loads"], l1["leases_active"], l1["pinned_items"]) == (6, 0, 0)
        e.result()
    finally:
        assert back.stop() == 0, back.text()


def idle(stats: dict[str, Any]) -> dict[str, int]:
    l1, dp = stats["l1"], stats["dataplane"]
    return {"leases": l1["leases_active"], "pinned": l1["pinned_items"],
            "connections": dp["connections_active"], "clients": dp["clients_active"],
            "buffers": dp["buffers_registered"], "buffer_bytes": dp["buffers_registered_bytes"],
            "store_waiting": dp["store_waiting"]}


def test_engine_killed_mid_load_leaves_kvtierd_idle(daemon, engine, start_engine):
    a, a_again = family(7, 8, chunks=3)
    want = engine(a_again)
    engine(a, socket=daemon.socket, **NO_LOCAL)
    wait_for(lambda: daemon.stats()["l1"]["parts_stored"] == 24, "24 chunks stored")
    before = daemon.stats()
    used = before["l1"]["used_bytes"]

    e = start_engine(batches=[[tokens(40, 999)], a_again], socket=daemon.socket, **NO_LOCAL)
    e.batch(0)
    busy = idle(daemon.stats())
    assert busy["connections"] > 0 and busy["buffers"] > 0  # the engine is registered
    e.go(1)  # 8 requests, 24 chunks to load
    os.killpg(e.proc.pid, signal.SIGKILL)
    e.kill()
    wait_for(lambda: idle(daemon.stats()) == dict.fromkeys(busy, 0), "kvtierd back to idle")
    after = daemon.stats()["l1"]
    assert (after["used_bytes"], after["items"]) == (used, before["l1"]["items"])

    # A new engine registers and hits every chunk.
    again = engine(a_again, socket=daemon.socket, **NO_LOCAL)
    assert [o["num_cached_tokens"] for o in again["outputs"]] == [3 * CHUNK] * 8
    same_outputs(again, want, TOL)
    assert idle(daemon.stats()) == dict.fromkeys(busy, 0)


def test_corrupt_l2_block_is_recomputed(tmp_path, engine):
    """A byte flipped in one L2 record on disk: that block fails its checksum (or the
    restart's scan drops it), vLLM recomputes it, and every output is as computed."""
    a, a_again = family(21, 4)
    want = engine(a_again)
    l2 = tmp_path / "l2"
    flags = ("--l2-path", str(l2), "--l2-size", "64MiB", "--l2-region-size", "8MiB")
    (tmp_path / "k").mkdir()
    d = Daemon(tmp_path / "k", *flags)
    try:
        engine(a, socket=d.socket, **NO_LOCAL)
        wait_for(lambda: d.stats()["l1"]["parts_stored"] == 8, "8 chunks stored")
        d.evict_to_l2()
    finally:
        assert d.stop() == 0, d.text()
    with open(l2, "rb") as f:
        _, key, _ = next(records(f, 8 << 20))
    assert flip_data_byte(str(l2), key, 8 << 20) == 1

    d = Daemon(tmp_path / "k", *flags)  # the blocks come from the disk, not a region buffer
    try:
        got = engine(a_again, socket=d.socket, **NO_LOCAL)
        same_outputs(got, want, TOL)
        l2s = d.stats()["l2"]
        assert l2s["recovery_dropped"] + l2s["checksum_failures"] == 1
        hit = sum(o["num_cached_tokens"] for o in got["outputs"])
        assert CHUNK <= 8 * CHUNK - hit <= 2 * CHUNK  # the corrupt chunk, and the one after it
    finally:
        assert d.stop() == 0, d.text()
