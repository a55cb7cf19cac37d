"""How fast vLLM's CPU engine decodes the target alone: greedy (temperature 0) generation of
--max-new-tokens tokens (exactly that many, or until one of --stop-token-ids) for each prompt, one
prompt at a time (batch size 1, as a single user would), after one untimed warm-up; each prompt is
timed --repeats times and its median wall time gives its tokens/s. With --speculative-config the same
runs go through vLLM's own speculative decoding (its JSON is passed to
vllm.LLM(speculative_config=...)), and the output also carries vLLM's acceptance counters.

It runs in vLLM's own virtual environment, not specviz's (stdlib and vllm only):

    .venv-vllm/bin/python specviz/tools/vllm_target.py --model DIR --prompts IDS.json \\
        --max-new-tokens 128 --out OUT.json [--repeats 2] \\
        [--speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}']

IDS.json is a JSON list of prompts, each a list of token ids. Writes one JSON object to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# Set before vllm is imported. The KV cache is in GiB; VLLM_CPU_OMP_THREADS_BIND=auto binds the engine's
# OpenMP threads to the cores and keeps one back for the engine's scheduler process (on 2 cores: 1 thread).
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "HF_HUB_OFFLINE": "1",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # lets collective_rpc send _worker_threads to the worker
}


def _worker_threads(worker: object) -> dict[str, Any]:
    """Runs inside vLLM's worker process: the threads its forward passes get."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
    }


def _spec_counters(llm: Any) -> dict[str, float]:
    """vLLM's speculative-decoding counters (drafts, draft tokens, accepted tokens) so far."""
    return {
        m.name.removeprefix("vllm:"): float(m.value)
        for m in llm.get_metrics()
        if m.name.startswith("vllm:spec_decode_num_") and hasattr(m, "value")
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a local model directory (config, safetensors, tokenizer)")
    ap.add_argument("--prompts", required=True, type=Path, help="JSON list of prompts, each a list of token ids")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each prompt (the median is kept)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument(
        "--stop-token-ids",
        default="",
        help="comma-separated ids that end a prompt's output (none: exactly --max-new-tokens)",
    )
    ap.add_argument("--speculative-config", type=json.loads, default=None, help="JSON for LLM(speculative_config=)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    prompts: list[list[int]] = json.loads(args.prompts.read_text())

    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    import vllm  # type: ignore[import-not-found,unused-ignore]
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found,unused-ignore]

    t0 = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype="float32",
        max_model_len=args.max_model_len,
        max_num_seqs=1,
        speculative_config=args.speculative_config,
        disable_log_stats=args.speculative_config is None,
    )
    load_s = time.perf_counter() - t0
    stop = [int(t) for t in args.stop_token_ids.split(",") if t]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens, ignore_eos=not stop, stop_token_ids=stop)

    def generate(ids: list[int]) -> tuple[list[int], float]:
        t = time.perf_counter()
        (out,) = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        return list(out.outputs[0].token_ids), time.perf_counter() - t

    generate(prompts[0])  # warm-up, untimed
    spec_before = _spec_counters(llm) if args.speculative_config else {}
    rows: list[dict[str, Any]] = []
    for ids in prompts:
        runs = [generate(ids) for _ in range(args.repeats)]
        median_s = statistics.median(s for _, s in runs)
        new = len(runs[0][0])
        rows.append(
            {
                "prompt_tokens": len(ids),
                "new_tokens": new,
                "output_ids": runs[0][0],
                "same_output_every_repeat": all(out == runs[0][0] for out, _ in runs),
                "seconds": [round(s, 4) for _, s in runs],
                "median_seconds": round(median_s, 4),
                "tokens_per_s": round(new / median_s, 2),
            }
        )
    total_tokens = sum(r["new_tokens"] for r in rows)
    total_s = sum(r["median_seconds"] for r in rows)
    result: dict[str, Any] = {
        "vllm_version": vllm.__version__,
        "model": str(Path(args.model).resolve()),
        "command": [sys.executable, *sys.argv],
        "env": {k: os.environ.get(k) for k in (*CPU_ENV, "LD_PRELOAD", "OMP_NUM_THREADS")},
        "engine_threads": llm.collective_rpc(_worker_threads),
        "host_cpus": os.cpu_count(),
        "load_seconds": round(load_s, 2),
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "speculative_config": args.speculative_config,
        "tokens_per_s": round(total_tokens / total_s, 2),
        "prompts": rows,
    }
    if args.speculative_config:
        after = _spec_counters(llm)
        result["spec_decode"] = {k: v - spec_before.get(k, 0.0) for k, v in after.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("vllm_version", "load_seconds", "engine_threads", "tokens_per_s")}))


if __name__ == "__main__":
    main()
