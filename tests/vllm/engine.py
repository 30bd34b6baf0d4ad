"""engine.py — one vLLM engine on the CPU, in a process of its own (so
vLLM's prefix cache starts empty), for tests/vllm: reads a job (JSON, argv[1]),
greedily generates its prompts with or without KvtierConnector, and writes
the outputs and vLLM's own counters as JSON (argv[2]).

The job: {"prompts": [[token ids]], "max_tokens": n, "connector": socket path
or null, "extra": {kv_connector_extra_config beyond socket_path},
"kv_cache_bytes": n, "max_model_len": n, "max_num_seqs": n,
"max_num_batched_tokens": n, "prefix_caching": bool, "model": a model
directory (tests/vllm/model by default), "block_size": n,
"tensor_parallel_size": n}. With "batches": [[[token ids]], ...] in place of
"prompts", batch i > 0 waits for the file OUT.go<i> and writes OUT.start<i>
before it runs (the test kills or restarts kvtierd in between), and each
batch's outputs are written to OUT.<i> when it ends. The model is
tests/vllm/model, a hand-written Qwen3 config, with the weights the test
wrote beside it (conftest.py's `model`), else vLLM's dummy ones; it runs
without its tokenizer, and nothing is downloaded."""

import faulthandler
import json
import logging
import os
import signal
import sys
import time
from typing import Any

# The connector's log at INFO in every process (vLLM's spawned engine core and
# workers import this file as their main module, so this line runs there too).
logging.basicConfig(format="%(process)d %(name)s %(levelname)s %(message)s")
logging.getLogger("kvtier").setLevel(logging.INFO)
# SIGUSR1 prints every thread's stack (a test that times out asks for them).
faulthandler.register(signal.SIGUSR1, all_threads=True)

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")
BLOCK_SIZE = 32  # vLLM's CPU attention takes multiples of 32


def kv_transfer_config(socket_path: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The --kv-transfer-config of docs/vllm.md, pointed at the test's kvtierd."""
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"socket_path": socket_path, **extra}}


def counters(llm: Any) -> dict[str, float]:
    """vLLM's own counters (Prometheus names without the vllm: prefix), summed over engines."""
    out: dict[str, float] = {}
    for m in llm.get_metrics():
        if type(m).__name__ == "Counter":
            name = m.name.removeprefix("vllm:")
            out[name] = out.get(name, 0) + m.value
    return out


def outputs(outs: list[Any]) -> list[dict[str, Any]]:
    return [{"token_ids": list(o.outputs[0].token_ids),
             "logprobs": [{str(k): v.logprob for k, v in lp.items()} for lp in o.outputs[0].logprobs],
             "num_cached_tokens": o.num_cached_tokens} for o in outs]


def wait_for_file(path: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {timeout_s} s")
        time.sleep(0.02)


def run(job: dict[str, Any], out: str) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model = job.get("model", MODEL)
    weights = any(f.endswith(".safetensors") for f in os.listdir(model))
    args: dict[str, Any] = dict(model=model, load_format="auto" if weights else "dummy",
                                skip_tokenizer_init=True, dtype="bfloat16",
                                block_size=job.get("block_size", BLOCK_SIZE),
                                tensor_parallel_size=job.get("tensor_parallel_size", 1),
                                max_model_len=job.get("max_model_len", 2048),
                                enforce_eager=True, seed=0, disable_log_stats=False,
                                max_num_seqs=job.get("max_num_seqs", 8),
                                kv_cache_memory_bytes=job.get("kv_cache_bytes", 64 << 20))
    if job.get("max_num_batched_tokens"):
        args["max_num_batched_tokens"] = job["max_num_batched_tokens"]
    if not job.get("prefix_caching", True):
        args["enable_prefix_caching"] = False
    if job.get("connector"):
        args["kv_transfer_config"] = kv_transfer_config(job["connector"], job.get("extra", {}))
    llm = LLM(**args)
    params = SamplingParams(max_tokens=job.get("max_tokens", 4), temperature=0.0, logprobs=1,
                            detokenize=False, ignore_eos=True)
    batches = job.get("batches") or [job["prompts"]]
    results = []
    for i, prompts in enumerate(batches):
        if i:
            wait_for_file(f"{out}.go{i}")
            open(f"{out}.start{i}", "w").close()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                            use_tqdm=False)
        results.append(outputs(outs))
        with open(f"{out}.{i}.tmp", "w") as f:
            json.dump({"outputs": results[-1], "counters": counters(llm)}, f)
        os.rename(f"{out}.{i}.tmp", f"{out}.{i}")
    return {"outputs": results[0] if "prompts" in job else results, "counters": counters(llm)}


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    result = run(job, sys.argv[2])
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":  # vLLM spawns its engine processes: they re-import this file
    main()
