"""e2e_plot.py — TTFT against prompt length (recompute, kvtier from L1, from
L2) from bench/e2e_bench.py's ttft lines: e2e_plot.py RESULTS.jsonl OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(l) for l in open(sys.argv[1]) if '"mode": "ttft"' in l]
n = [r["tokens"] for r in rows]
fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
ax.plot(n, [r["ttft_recompute_ms"] for r in rows], "o-", label="recompute (prefill)")
ax.plot(n, [r["ttft_l1_ms"] for r in rows], "s-", label="kvtier, prefix in L1 (DRAM)")
if all("ttft_l2_ms" in r for r in rows):
    ax.plot(n, [r["ttft_l2_ms"] for r in rows], "^-", label="kvtier, prefix in L2 (NVMe)")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(n, [str(x) for x in n])
ax.set_xlabel("prompt tokens")
ax.set_ylabel("time to first token, ms (median of 5)")
gpu = rows[0].get("gpu", "GPU not recorded")
ax.set_title(f"Qwen3-8B architecture (random bf16 weights, sdpa)\n{gpu}")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2])
