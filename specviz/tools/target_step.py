"""Where a race's target step goes on this CPU: the roofline's T(1) prices one decoding step as reading every
weight once at the copy rate plus the FLOPs at the matmul rate; a race's step is longer. This times, for the
default pair's target on one thread, on the engine the app runs and on transformers' eager forward, the race's
own step (the autoregressive method's `verify_ms`), the bare forward pass on the same tokens, the weight
matmuls alone (every matrix of the pass on one token, as the engine multiplies it) and the copy the
roofline's bandwidth comes from, in wall time and in this process's CPU time (which does not count the
time other processes held the core), with the load average before and after.

    python -m specviz.tools.target_step --out benchmarks/roofline/target_step.json

Run it without OMP_NUM_THREADS set, so that `default_threads` records the threads torch gives the app's races.
Writes one JSON object (the Theory tab reads it: specviz.ui.theory.target_step_note).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from specviz.models.modelpair import ModelPair

PROMPT = "Write a Python function that returns the n-th Fibonacci number."  # the Race tab's default prompt


def _clocks(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def _ms(samples: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(samples) * 1e3, "mean_ms": statistics.mean(samples) * 1e3}


class _CountCalls(torch.overrides.TorchFunctionMode):
    """Counts the torch operations Python calls (each one a trip from Python into torch's dispatcher; reads of
    a tensor's attributes such as `.shape` are not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if "__get__" not in getattr(func, "__name__", ""):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _race_steps(pair: ModelPair, max_new_tokens: int, repeats: int) -> tuple[list[float], list[float], list[int]]:
    """The race's own step, by its clock (each record's verify_ms) and by this process's CPU time from one
    record to the next, `repeats` times over; with the tokens it emitted, for the bare pass to replay."""
    from specviz.methods import BASELINE
    from specviz.runner import run

    list(run(BASELINE, pair, PROMPT, max_new_tokens=8))  # warm-up, untimed
    steps_wall: list[float] = []  # the race's own clock: each record's verify_ms
    steps_cpu: list[float] = []  # this process's CPU time from one record to the next
    emitted: list[int] = []
    for _ in range(repeats):
        records, ticks = [], []
        for record in run(BASELINE, pair, PROMPT, max_new_tokens=max_new_tokens):
            records.append(record)
            ticks.append(time.process_time())
        steps_wall += [r.verify_ms / 1e3 for r in records[1:]]  # the first step also reads the prompt
        steps_cpu += [b - a for a, b in itertools.pairwise(ticks)]
        emitted = [t for r in records for t in r.emitted]
    return steps_wall, steps_cpu, emitted


def _forward_passes(
    target: PreTrainedModel, prompt_ids: list[int], emitted: list[int], repeats: int
) -> tuple[list[float], list[float], int]:
    """The bare forward pass on the race's tokens, one at a time over the prompt's cache (what the race's
    step costs without the method around it), and the torch calls one pass makes from Python."""
    from specviz.models.kv import CachedLM

    fwd_wall: list[float] = []
    fwd_cpu: list[float] = []
    for _ in range(repeats):
        lm = CachedLM(target)
        lm.forward(prompt_ids)
        for token in emitted[:-1]:
            w, c = _clocks(functools.partial(lm.forward, [token]))
            fwd_wall.append(w)
            fwd_cpu.append(c)
    counter = _CountCalls()
    with counter:
        lm.forward([emitted[-1]])
    return fwd_wall, fwd_cpu, counter.calls


def _weight_matmuls(target: PreTrainedModel, repeats: int) -> dict[str, Any]:
    """Every weight matrix of the pass times one token's activations, as the step multiplies them (the fast
    step's fused, oneDNN-packed matrices; on the eager path the model's Linear layers): the weight reads the
    roofline prices, without the rest of the pass."""
    from specviz.models import fast

    linears = list({id(m.weight): m for m in target.modules() if isinstance(m, torch.nn.Linear)}.values())
    n_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    step = fast.decoder(target)
    if step is not None:
        c = target.config
        d, attn = torch.randn(1, c.hidden_size), torch.randn(1, step.n_heads * step.head_dim)
        ffn = torch.randn(1, c.intermediate_size)
        calls: list[tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]]
        calls = [(m, x) for layer in step.layers for m, x in zip(layer.products(), (d, attn, d, ffn), strict=True)]
        calls.append((step.head, d))
    else:
        calls = [(m, torch.randn(1, m.in_features)) for m in linears]

    def matmuls() -> None:
        for product, x in calls:
            product(x)

    matmuls()  # warm-up
    mm = [_clocks(matmuls) for _ in range(5 * repeats)]
    mm_wall, mm_cpu = [w for w, _ in mm], [c for _, c in mm]
    return {
        **_ms(mm_wall),
        "best_ms": min(mm_wall) * 1e3,
        "cpu_ms": statistics.median(mm_cpu) * 1e3,
        "n_matrices": len(linears),
        "n_products": len(calls),
        "bytes": n_bytes,
        "gb_per_s": n_bytes / min(mm_wall) / 1e9,  # best wall time
        "cpu_gb_per_s": n_bytes / statistics.median(mm_cpu) / 1e9,  # median CPU time
    }


def _copy_rates() -> dict[str, float]:
    """The roofline's bandwidth: best of five copies of 256 MB (as measure_this_machine), in wall and CPU time."""
    src = torch.empty(256 * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    copies = [_clocks(lambda: dst.copy_(src)) for _ in range(5)]
    return {
        "copy_gb_per_s": 2 * src.numel() * 4 / min(w for w, _ in copies) / 1e9,  # best wall time
        "copy_cpu_gb_per_s": 2 * src.numel() * 4 / min(c for _, c in copies) / 1e9,  # best CPU time
    }


def _engine(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int, repeats: int) -> dict[str, Any]:
    """The race's step, the bare pass and the weight matmuls on the engine SPECVIZ_FAST selects now."""
    from specviz.models.fast import engine_name

    steps_wall, steps_cpu, emitted = _race_steps(pair, max_new_tokens, repeats)
    fwd_wall, fwd_cpu, calls = _forward_passes(pair.target, prompt_ids, emitted, repeats)
    return {
        "engine": engine_name(pair.target),
        "steps": len(steps_wall) // repeats,
        "race_step": {**_ms(steps_wall), "cpu_ms": statistics.median(steps_cpu) * 1e3},
        "forward": {**_ms(fwd_wall), "cpu_ms": statistics.median(fwd_cpu) * 1e3},
        "torch_calls_per_forward": calls,
        "weight_matmuls": _weight_matmuls(pair.target, repeats),
    }


@torch.inference_mode()
def measure(pair_name: str = "default", max_new_tokens: int = 64, threads: int = 1, repeats: int = 2) -> dict[str, Any]:
    """The race's target step and its parts for `pair_name`'s target, `threads` torch threads (plain dicts):
    on the engine the app runs (top level) and on transformers' eager forward ("eager")."""
    from specviz.models.pair import encode_prompt, load_pair

    before_threads = torch.get_num_threads()
    before_fast = os.environ.get("SPECVIZ_FAST")
    torch.set_num_threads(threads)
    try:
        load_before = list(os.getloadavg())
        pair = load_pair(pair_name)
        prompt_ids = encode_prompt(pair, PROMPT)
        default = _engine(pair, prompt_ids, max_new_tokens, repeats)
        os.environ["SPECVIZ_FAST"] = "0"
        eager = _engine(pair, prompt_ids, max_new_tokens, repeats)
        copy_rates = _copy_rates()
        return {
            "command": f"python -m specviz.tools.target_step --threads {threads} --max-new-tokens {max_new_tokens}",
            "pair": pair.name,
            "threads": threads,
            "default_threads": before_threads,  # torch's threads before this set them (the app's races use these)
            "cores": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": list(os.getloadavg()),
            "prompt_tokens": len(prompt_ids),
            **default,
            "eager": eager,
            **copy_rates,
        }
    finally:
        torch.set_num_threads(before_threads)
        if before_fast is None:
            os.environ.pop("SPECVIZ_FAST", None)
        else:
            os.environ["SPECVIZ_FAST"] = before_fast


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.tools.target_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="default")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/roofline/target_step.json"))
    args = p.parse_args(argv)
    result = measure(args.pair, args.max_new_tokens, args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
