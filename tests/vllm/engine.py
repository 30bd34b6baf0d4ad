"""engine.py — one vLLM engine on the CPU, in a process of its own (so
vLLM's prefix cache starts empty), for tests/vllm: reads a job (JSON, argv[1]),
greedily generates its prompts with or without KvtierConnector, and writes
the outputs and vLLM's own counters as JSON (argv[2]).

The job: {"prompts": [[token ids]], "max_tokens": n, "connector": socket path
or null, "extra": {kv_connector_extra_config beyond socket_path},
"kv_cache_bytes": n, "max_num_seqs": n, "max_num_batched_tokens": n}. The
model is tests/vllm/model: a hand-written Qwen3 config with dummy (seeded
random) weights and no tokenizer, so nothing is downloaded."""

import json
import os
import sys
from typing import Any

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")
BLOCK_SIZE = 32  # vLLM's CPU attention takes multiples of 32


def kv_transfer_config(socket_path: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The --kv-transfer-config of docs/vllm.md, pointed at the test's kvtierd."""
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"socket_path": socket_path, **extra}}


def counters(llm: Any) -> dict[str, float]:
    """vLLM's own counters (Prometheus names without the vllm: prefix), summed over engines."""
    out: dict[str, float] = {}
    for m in llm.get_metrics():
        if type(m).__name__ == "Counter":
            name = m.name.removeprefix("vllm:")
            out[name] = out.get(name, 0) + m.value
    return out


def run(job: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    args: dict[str, Any] = dict(model=MODEL, load_format="dummy", skip_tokenizer_init=True,
                                dtype="bfloat16", block_size=BLOCK_SIZE, max_model_len=2048,
                                enforce_eager=True, seed=0, disable_log_stats=False,
                                max_num_seqs=job.get("max_num_seqs", 8),
                                kv_cache_memory_bytes=job.get("kv_cache_bytes", 64 << 20))
    if job.get("max_num_batched_tokens"):
        args["max_num_batched_tokens"] = job["max_num_batched_tokens"]
    if job.get("connector"):
        args["kv_transfer_config"] = kv_transfer_config(job["connector"], job.get("extra", {}))
    llm = LLM(**args)
    params = SamplingParams(max_tokens=job.get("max_tokens", 4), temperature=0.0, logprobs=1,
                            detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in job["prompts"]], params,
                        use_tqdm=False)
    result = {"outputs": [{"token_ids": list(o.outputs[0].token_ids),
                           "logprobs": [{str(k): v.logprob for k, v in lp.items()}
                                        for lp in o.outputs[0].logprobs],
                           "num_cached_tokens": o.num_cached_tokens} for o in outs],
              "counters": counters(llm)}
    return result


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    result = run(job)
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":  # vLLM spawns its engine processes: they re-import this file
    main()
