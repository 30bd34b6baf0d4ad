"""wait_clean.py PORT — waits until kvtierd's L1 holds no dirty bytes (its
writer has put every block in L2) and prints how long that took and how many
bytes it drained. Benchmark helper of pipeline.sh (a benchmark may poll; a
test may not). Gives up after 600 s with exit status 1."""
import json
import sys
import time
import urllib.request


def dirty_bytes(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/tiers" % port) as r:
        tiers = json.load(r)["tiers"]
    return next(t for t in tiers if t["name"] == "l1")["dirty_bytes"]


def main():
    port = int(sys.argv[1])
    t0 = time.monotonic()
    first = dirty_bytes(port)
    while True:
        left = dirty_bytes(port)
        waited = time.monotonic() - t0
        if left == 0:
            break
        if waited > 600:
            print("writer still has %.2f GB dirty after %.0f s" % (left / 1e9, waited))
            sys.exit(1)
        time.sleep(0.05)
    print("writer drained %.2f GB dirty in %.2f s (%.2f GB/s) before the warm pass" %
          (first / 1e9, waited, first / 1e9 / max(waited, 1e-9)))


main()
