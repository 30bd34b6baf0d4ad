#!/usr/bin/env python3
"""api_hostile.py — generated hostile requests against a running kvtierd's
control plane: random and mutated JSON bodies, wrong types, deep nesting,
huge numbers, long strings, raw bytes, odd methods and paths. Every answer
must be a well-formed JSON error or document with a 2xx/4xx status (never
5xx, never a dropped connection), and the daemon must still serve and hold a
valid policy afterwards. Seeded, so a failure replays.

    api_hostile.py PORT TOKEN [COUNT]
"""
import http.client
import json
import random
import sys

PORT, TOKEN = int(sys.argv[1]), sys.argv[2]
COUNT = int(sys.argv[3]) if len(sys.argv) > 3 else 400
rng = random.Random(20261202)


def value(depth=0):
    kinds = ["int", "float", "str", "bool", "null", "list", "obj", "huge", "neg"]
    k = rng.choice(kinds if depth < 6 else kinds[:5])
    if k == "int":
        return rng.randint(-10, 10**6)
    if k == "float":
        return rng.choice([0.0, 0.5, 0.95, 1.0, 1.5, -0.1, 1e308])
    if k == "str":
        return rng.choice(["", "l1-only", "evict", "x" * rng.randint(0, 5000), "\u00e9\u4e2d\U0001f600"])
    if k == "bool":
        return rng.choice([True, False])
    if k == "null":
        return None
    if k == "list":
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]
    if k == "huge":
        return 10**30
    if k == "neg":
        return -(2**63)
    keys = ["mode", "tiers", "l1", "l2", "high_watermark", "low_watermark", "lease_max_ms",
            "bytes", "all", "", "\u0000", "x" * 300]
    return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 4))}


def body():
    r = rng.random()
    if r < 0.5:
        return json.dumps(value()).encode()
    if r < 0.65:
        good = json.dumps({"tiers": {"l1": {"high_watermark": 0.9, "low_watermark": 0.5}}}).encode()
        i = rng.randrange(len(good))
        return good[:i] + bytes([rng.randrange(256)]) + good[i + 1:]
    if r < 0.75:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    if r < 0.85:
        return b"[" * rng.randint(1, 5000) + b"]" * rng.randint(0, 5000)
    if r < 0.9:
        return b'{"a":' * 2000
    return json.dumps({"bytes": rng.choice([1, 0, -1, 2**62, "1"]), "all": rng.choice([True, 1, None])}).encode()


def request(method, path, data, headers):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    return resp.status, text


failures = 0
paths = ["/v1/policy", "/v1/tiers/l1/evict", "/v1/tiers/l9/evict", "/v1/namespaces/1",
         "/v1/namespaces/99999999999", "/v1/stats", "/v1/buffers", "/v1/%00", "/v1/" + "a" * 3000]
methods = ["PUT", "POST", "DELETE", "GET", "PATCH", "OPTIONS"]
for n in range(COUNT):
    method, path = rng.choice(methods), rng.choice(paths)
    headers = {"Content-Type": rng.choice(["application/json", "application/json; charset=utf-8",
                                           "text/plain", "application/jsonx"])}
    if rng.random() < 0.9:
        headers["Authorization"] = "Bearer " + rng.choice([TOKEN, TOKEN[:-1], "", TOKEN + "x"])
    data = body() if method in ("PUT", "POST", "PATCH", "DELETE") and rng.random() < 0.9 else None
    try:
        status, text = request(method, path, data, headers)
    except Exception as e:  # a dropped connection is a failure
        print(f"not ok - request {n} {method} {path}: {e!r}")
        failures += 1
        continue
    shape_ok = True
    if status >= 400:
        try:
            err = json.loads(text)["error"]
            shape_ok = isinstance(err["code"], str) and isinstance(err["message"], str)
        except Exception:
            shape_ok = False
    if status >= 500 or not shape_ok:
        print(f"not ok - request {n} {method} {path}: {status} {text[:200]!r}")
        failures += 1

status, text = request("GET", "/v1/policy", None, {})
policy = json.loads(text)
l1 = policy["tiers"]["l1"]
alive = status == 200 and 0 < l1["low_watermark"] < l1["high_watermark"] <= 1
print(("ok" if alive else "not ok") + " - the daemon still serves a valid policy: " + text.decode())
print(("ok" if failures == 0 else "not ok") + f" - {COUNT} hostile requests, {failures} bad answers")
passed = (failures == 0) + alive
print(f"{passed} passed, {2 - passed} failed")
sys.exit(0 if passed == 2 else 1)
