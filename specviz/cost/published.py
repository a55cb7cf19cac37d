"""Published GPU measurements, what the cost model predicts for them, and the engine fit.

`published.csv` (beside this file) holds numbers copied from their sources, one row each with the
place it comes from: forward-pass speeds (tokens/s at batch 1) and speculative speedups with the
mean accepted tokens per step (Spec-Bench's leaderboard; the PEARL, DISCO, SSSD and Speculative
Streaming papers; gpt-fast). Its columns `chip`, `shape`, `precision` and `stack` name our
hardware preset, model shape, dtype and engine for the rows the cost model can predict; rows
where they are empty (tensor parallel, mixtures of experts, unclear units) are kept as reference.

A forward row is predicted as one decoding step of its model on its chip under its engine, at the
mean context its benchmark implies (`CONTEXT`). A Spec-Bench row is predicted from its mean
accepted tokens per step τ and the forward passes its method runs per step with Spec-Bench's
settings (`specbench_passes`):

    speedup = τ · T_AR / Σ_passes count · T_pass

An engine's parameters (achieved fraction of peak bandwidth, how its kernels overlap memory traffic
with math, per-forward and per-layer overhead, a speculative step's bookkeeping) are fit on the rows
`role` marks "fit" and tested on the rest. Its compute rate is not fit: every fit row is memory-bound
(batch 1, at most 64 tokens on an A100 or H800, below their ridge points), so the fit cannot tell
one (any rate above half the A100's measured GEMM rate fits them equally well); the chip's
published GEMM rate stands in (`Hardware.gemm_flops`). The RTX 3090 rows are where that matters:
a 64-token verification pass sits near the 3090's ridge (75.7 TFLOP/s / 936 GB/s = 81 FLOP/byte,
64 tokens are ~64 FLOP/byte of fp16 weights), so its cost rests on that rate and on the overlap.
"""

from __future__ import annotations

import csv
import operator
from dataclasses import dataclass, replace
from functools import cache, reduce
from pathlib import Path
from typing import Any

import numpy as np

from specviz.cost.hardware import ENGINES, PRESETS, Engine
from specviz.cost.roofline import eager_costs, operator_costs, overlap_time
from specviz.cost.shapes import ModelShape, get_shape

DATA = Path(__file__).with_name("published.csv")
SPEC_BENCH = "Spec-Bench"
# Mean tokens in context while decoding, per benchmark (not published: our reading of each setup).
CONTEXT = {
    SPEC_BENCH: 512,  # prompts of ~100-600 tokens (MT-Bench, RAG, summarisation), answers up to 1024
    "PEARL": 512,  # HumanEval prompts (~150 tokens), answers up to 1024 tokens
    "gpt-fast": 100,  # a 5-token prompt, 200 new tokens
    "PyTorch blog": 100,  # gpt-fast's own benchmark
}
SPEC_BENCH_METHODS = ("SpS", "PLD", "REST", "Lookahead", "Medusa", "EAGLE")  # the ones modelled
# Each Spec-Bench method's counterpart in the race (a registry name), and how the two differ; None: no
# counterpart (a trained head, or Jacobi iterations, that specviz does not run).
RACE_COUNTERPARTS: dict[str, tuple[str | None, str]] = {
    "SpS": (
        "heuristic",
        (
            "a small draft model with Hugging Face's γ schedule (Spec-Bench's SpS runs HF assisted "
            "generation, vicuna-68m drafting); Vanilla SD is the same with a fixed γ"
        ),
    ),
    "PLD": (
        "prompt_lookup",
        "prompt lookup decoding: drafts copied from n-gram matches in the prompt and the output so far, no draft model",
    ),
    "REST": (
        "sssd",
        (
            "a draft tree retrieved from a datastore (REST); SSSD builds its tree from n-gram matches in "
            "a datastore and in the prompt and output"
        ),
    ),
    "Lookahead": (None, "Jacobi iterations on the target itself (no counterpart in the race)"),
    "Medusa": (
        None,
        (
            "trained extra heads on the target (no counterpart; Speculative Streaming is the nearest: the "
            "target drafts with its own extra streams)"
        ),
    ),
    "EAGLE": (None, "a trained one-layer draft head on the target's features (no counterpart in the race)"),
}
# Where each source of published.csv is published: paper or repository, by its name in the CSV's `source`.
SOURCE_LINKS: dict[str, str] = {
    "Spec-Bench": "https://github.com/hemingkx/Spec-Bench (Xia et al. 2024, arXiv:2401.07851)",
    "PEARL": "https://arxiv.org/abs/2408.11850 (Liu et al. 2025)",
    "gpt-fast": "https://github.com/pytorch-labs/gpt-fast",
    "PyTorch blog": "https://pytorch.org/blog/accelerating-generative-ai-2/",
}


@cache
def load_rows(path: Path = DATA) -> tuple[dict[str, str], ...]:
    """The published rows, each a dict of the CSV's columns plus `id` (its data line, from 1)."""
    with open(path, newline="") as f:
        return tuple({**row, "id": str(i)} for i, row in enumerate(csv.DictReader(f), 1))


def context_of(row: dict[str, str]) -> int:
    return next((n for key, n in CONTEXT.items() if row["source"].startswith(key)), CONTEXT[SPEC_BENCH])


# ----- the passes a step runs -----------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """A forward pass of one decoding step, `count` times per step (an average may be fractional)."""

    shape: ModelShape
    tokens: int
    count: float = 1.0
    growing_cache: bool = True  # Hugging Face's DynamicCache; False: a preallocated cache (Medusa/EAGLE/REST code)
    own_call: bool = True  # a forward call of its own (pays the per-forward overhead); False: runs inside another
    overhead_layers: int | None = None  # layers whose launch overhead it pays (None: the shape's)


def medusa_heads(target: ModelShape, heads: int = 4) -> ModelShape:
    """Medusa's heads as a zero-layer 'model': per head a residual block (h x h) and an LM head (h x V),
    i.e. an LM head of heads·(V + h) rows (the same weight reads and FLOPs)."""
    return replace(
        target,
        name=f"Medusa heads ({target.name})",
        n_layers=0,
        vocab_size=heads * (target.vocab_size + target.hidden_size),
    )


def eagle_head(target: ModelShape) -> ModelShape:
    """EAGLE's draft: one decoder layer of the target's width, an input projection (2h -> h) and the
    target's LM head (as one head of V + 2h rows: the same weight reads)."""
    return replace(
        target, name=f"EAGLE head ({target.name})", n_layers=1, vocab_size=target.vocab_size + 2 * target.hidden_size
    )


def heuristic_schedule(alpha: float, start: int = 5, cap: int = 64) -> tuple[float, float]:
    """(tokens per step, mean γ) of Hugging Face's assisted generation with its default "heuristic"
    schedule (transformers 4.37, Spec-Bench's SpS): γ starts at 5, +2 after a fully accepted block,
    else -1 (at least 1); i.i.d. acceptance α. From the schedule's stationary distribution."""
    gammas = np.arange(1, cap + 1)
    full = alpha**gammas  # P(all γ drafts accepted)
    P = np.zeros((cap, cap))
    P[np.arange(cap), np.minimum(gammas + 2, cap) - 1] += full
    P[np.arange(cap), np.maximum(gammas - 1, 1) - 1] += 1 - full
    pi = np.zeros(cap)
    pi[start - 1] = 1.0
    for _ in range(2000):
        pi = pi @ P
    tokens = (1 - alpha ** (gammas + 1)) / (1 - alpha)
    return float(pi @ tokens), float(pi @ gammas)


@cache
def sps_gamma(tau: float) -> float:
    """The mean γ of the heuristic schedule whose tokens per step equal τ (α found by bisection)."""
    lo, hi = 1e-6, 0.999
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if heuristic_schedule(mid)[0] < tau else (lo, mid)
    return heuristic_schedule((lo + hi) / 2)[1]


def specbench_passes(method: str, target: ModelShape, tau: float) -> list[Pass]:
    """The forward passes of one step of `method` as Spec-Bench runs it (eval.sh and its inference
    scripts: fp16, batch 1, greedy)."""
    if method == "SpS":  # HF assisted generation, drafter vicuna-68m (2 layers), heuristic γ
        gamma = sps_gamma(tau)
        return [Pass(target, round(gamma) + 1), Pass(get_shape("Vicuna-68M"), 1, count=gamma)]
    if method == "PLD":  # prompt lookup: up to 10 copied tokens (window 3), no draft model
        return [Pass(target, 11)]
    if method == "Lookahead":  # level 5, window 7, guess set 7: 7·4 lookahead + 7·4 verify tokens + 1
        return [Pass(target, 57)]
    if method == "REST":  # datastore retrieval (host side, not modelled): a 64-token draft tree
        return [Pass(target, 64, growing_cache=False)]
    if method == "Medusa":  # 4 heads, tree mc_sim_7b_63 (63 nodes + root), Medusa's preallocated cache
        heads = medusa_heads(target)
        return [
            Pass(target, 64, growing_cache=False),
            Pass(heads, 64, growing_cache=False, own_call=False, overhead_layers=4),
        ]
    if method == "EAGLE":  # EAGLE-1, tree mc_sim_7b_63: ~6 draft passes of ~10 tree tokens each
        return [Pass(target, 64, growing_cache=False), Pass(eagle_head(target), 10, count=6, growing_cache=False)]
    raise ValueError(f"no recipe for {method}")


def row_passes(row: dict[str, str]) -> tuple[Pass, list[Pass]] | None:
    """(the autoregressive step, the passes of one of the row's steps) of a predictable row, else None."""
    if not (row["chip"] and row["shape"] and row["stack"]):
        return None
    shape = get_shape(row["shape"]).with_dtype(row["precision"])
    baseline = Pass(shape, 1)
    if row["kind"] == "forward":
        return baseline, [baseline]
    if row["source"].startswith(SPEC_BENCH) and row["category"] == "Overall" and row["method"] in SPEC_BENCH_METHODS:
        return baseline, specbench_passes(row["method"], shape, float(row["mean_accepted"]))
    return None


def published_value(row: dict[str, str]) -> float:
    """Seconds per decoding step (forward rows, from tokens/s at batch 1) or the speedup."""
    return 1.0 / float(row["value"]) if row["kind"] == "forward" else float(row["value"])


# ----- predictions, for one engine or a grid of them -------------------------------------------

FITTED = ("memory_efficiency", "overlap_exponent", "overhead_s", "overhead_per_layer_s", "step_overhead_per_layer_s")


def _pass_seconds(p: Pass, row: dict[str, str], eager: Engine, grid: dict[str, np.ndarray]) -> np.ndarray:
    """Seconds of one pass for every engine parameter set in `grid` (arrays of equal length)."""
    chip, L = PRESETS[row["chip"]], context_of(row)
    ops = operator_costs(p.shape, 1, p.tokens, L) + eager_costs(
        p.shape, 1, p.tokens, L, eager.eager_attention, eager.growing_cache and p.growing_cache
    )
    gemm, bandwidth = chip.gemm_flops_per_s(p.shape.dtype) * eager.compute_efficiency, chip.memory_bandwidth
    t = sum(
        overlap_time(
            np.asarray(op.flops / gemm), op.bytes / (grid["memory_efficiency"] * bandwidth), grid["overlap_exponent"]
        )
        for op in ops
    )
    layers = p.shape.n_layers if p.overhead_layers is None else p.overhead_layers
    return t + grid["overhead_per_layer_s"] * layers + (grid["overhead_s"] if p.own_call else 0.0)


def _predict(row: dict[str, str], engine: Engine, grid: dict[str, np.ndarray]) -> np.ndarray:
    predictable = row_passes(row)
    if predictable is None:
        raise ValueError(f"no prediction for the row {row}: it names no chip, shape and stack, or no method we model")
    baseline, passes = predictable
    step = reduce(operator.add, (p.count * _pass_seconds(p, row, engine, grid) for p in passes))
    if row["kind"] == "forward":
        return step
    bookkeeping = grid["step_overhead_per_layer_s"] * baseline.shape.n_layers
    return float(row["mean_accepted"]) * _pass_seconds(baseline, row, engine, grid) / (step + bookkeeping)


def _as_grid(engine: Engine) -> dict[str, np.ndarray]:
    return {k: np.array([getattr(engine, k)]) for k in FITTED}


def predict(row: dict[str, str], engine: Engine | None = None) -> float:
    """The cost model's figure for a predictable row (seconds per step, or the speedup)."""
    engine = engine or ENGINES[row["stack"]]
    return float(_predict(row, engine, _as_grid(engine))[0])


# ----- which rows fit, which test ----------------------------------------------------------------

FIT_FORWARD = {  # stack -> (chip, shape, precision) of the forward rows an engine is fit on
    "HF eager": {
        ("H800", "Llama-2-7B", "bfloat16"),
        ("H800", "DeepSeek-Coder-1.3B", "bfloat16"),
        ("H800", "Llama-2-70B", "bfloat16"),
    },
    "compiled": {
        ("A100 80GB", "Llama-2-7B", "bfloat16"),
        ("A100 80GB", "Llama-2-7B", "int8"),
        ("A100 80GB", "Llama-2-70B", "int8"),
    },
}
FIT_SPEC_BENCH = {("A100 80GB", "Vicuna-13B"), ("A100 80GB", "Vicuna-33B")}  # Vicuna-7B (A100, 3090) is held out


def role(row: dict[str, str]) -> str:
    """'fit', 'test', or why the row is not predicted."""
    if row_passes(row) is None:
        if row["kind"] == "speedup" and row["source"].startswith(SPEC_BENCH) and row["category"] == "Overall":
            return "not modelled (no recipe for this method)"
        return "not predicted (see its chip/shape/stack columns)"
    if row["kind"] == "forward":
        fit = (row["chip"], row["shape"], row["precision"]) in FIT_FORWARD.get(row["stack"], set())
        fit = fit and row["source"].startswith(("PEARL", "gpt-fast README"))
    else:
        fit = (row["chip"], row["shape"]) in FIT_SPEC_BENCH
    return "fit" if fit else "test"


# ----- the fit ------------------------------------------------------------------------------------


def fit_engine(
    base: Engine, rows: list[dict[str, str]], rounds: int = 3, fixed: dict[str, float] | None = None
) -> Engine:
    """The engine parameters with the least mean |log(predicted / published)| over `rows` (grid
    search, zoomed in around the best cell `rounds` times). `base` gives the name and the flags;
    `fixed` holds parameters at given values instead of fitting them."""
    speculative = any(r["kind"] == "speedup" for r in rows)  # many-token passes: the only rows near a ridge
    axes = {
        "memory_efficiency": np.geomspace(0.3, 1.0, 13),
        "overlap_exponent": np.linspace(1.0, 8.0, 15) if speculative else np.array([np.inf]),
        "overhead_s": np.linspace(0.0, 4e-3, 9),
        "overhead_per_layer_s": np.linspace(0.0, 0.6e-3, 13),
        "step_overhead_per_layer_s": np.linspace(0.0, 0.3e-3, 13) if speculative else np.zeros(1),
    }
    axes |= {k: np.array([v]) for k, v in (fixed or {}).items()}
    published = np.array([published_value(r) for r in rows])
    for _ in range(rounds):
        mesh = np.meshgrid(*axes.values(), indexing="ij")
        grid = {k: m.ravel() for k, m in zip(axes, mesh, strict=True)}
        loss = np.mean(
            [np.abs(np.log(_predict(r, base, grid) / v)) for r, v in zip(rows, published, strict=True)], axis=0
        )
        best: dict[str, Any] = {k: float(g[np.argmin(loss)]) for k, g in grid.items()}  # Engine fields, floats
        axes = {k: _zoom(a, best[k]) for k, a in axes.items()}
    return replace(base, **best)


def _zoom(axis: np.ndarray, best: float) -> np.ndarray:
    """A finer axis around `best`, one old step either side (kept within the old range, >= 0)."""
    if len(axis) == 1:  # a parameter the rows cannot tell stays where it is
        return axis
    step = (axis[-1] - axis[0]) / max(1, len(axis) - 1)
    return np.linspace(max(axis[0], best - step), min(axis[-1], best + step), 9)


def calibrate(rows: tuple[dict[str, str], ...] | None = None) -> dict[str, Engine]:
    """Every engine fit on its 'fit' rows."""
    rows = load_rows() if rows is None else rows
    return {
        name: fit_engine(e, [r for r in rows if r["stack"] == name and role(r) == "fit"]) for name, e in ENGINES.items()
    }


def fit_loss(engine: Engine, rows: list[dict[str, str]]) -> float:
    """The fit's criterion: mean |log(predicted / published)| over `rows`."""
    return float(np.mean([abs(np.log(predict(r, engine) / published_value(r))) for r in rows]))


def overlap_sensitivity(exponents: tuple[float, ...] = (1.5, 2.0, 2.5, 3.0, 4.0, np.inf)) -> list[dict[str, Any]]:
    """HF eager refit with its overlap exponent p held at each value: the fit loss, and how many
    held-out Spec-Bench methods land within 15 % per chip. The fit rows pin p down only loosely, so
    this says how much the held-out result rests on it."""
    fit_rows = [r for r in load_rows() if r["stack"] == "HF eager" and role(r) == "fit"]
    held = [r for r in load_rows() if r["stack"] == "HF eager" and role(r) == "test" and r["kind"] == "speedup"]
    out = []
    for p in exponents:
        engine = fit_engine(ENGINES["HF eager"], fit_rows, fixed={"overlap_exponent": p})
        within = {
            chip: sum(abs(predict(r, engine) / published_value(r) - 1) <= 0.15 for r in held if r["chip"] == chip)
            for chip in sorted({r["chip"] for r in held})
        }
        out.append(
            {
                "overlap_exponent": p,
                "fit_loss": fit_loss(engine, fit_rows),
                "within_15": within,
                "held_out": {chip: sum(r["chip"] == chip for r in held) for chip in within},
            }
        )
    return out


# ----- the report ---------------------------------------------------------------------------------


def comparison(engines: dict[str, Engine] | None = None) -> list[dict[str, Any]]:
    """Every predictable row: published vs predicted, relative error, fit or test."""
    out = []
    for row in load_rows():
        if row_passes(row) is None:
            continue
        engine = (engines or ENGINES)[row["stack"]]
        published, predicted = published_value(row), predict(row, engine)
        out.append(
            {
                "id": int(row["id"]),
                "kind": row["kind"],
                "source": row["source"].split(" (")[0],
                "where": row["where"],
                "chip": row["chip"],
                "model": row["shape"],
                "precision": row["precision"],
                "stack": row["stack"],
                "method": row["method"] or "autoregressive",
                "mean_accepted": row["mean_accepted"],
                "published": published,
                "predicted": predicted,
                "error": predicted / published - 1,
                "role": role(row),
            }
        )
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median |error| of forward rows per stack and role; Spec-Bench held-out rows within 15 %."""
    out: dict[str, Any] = {}
    held = [abs(r["error"]) for r in rows if r["kind"] == "forward" and r["role"] == "test"]
    out["forward, every held-out GPU row: median |error|"] = float(np.median(held)) if held else None
    for stack in ENGINES:
        for use in ("fit", "test"):
            errs = [
                abs(r["error"]) for r in rows if r["kind"] == "forward" and r["stack"] == stack and r["role"] == use
            ]
            out[f"forward {stack} {use}: median |error|"] = float(np.median(errs)) if errs else None
            out[f"forward {stack} {use}: rows"] = len(errs)
    spec = [r for r in rows if r["kind"] == "speedup"]
    for use in ("fit", "test"):
        errs = [abs(r["error"]) for r in spec if r["role"] == use]
        out[f"Spec-Bench {use}: median |error|"] = float(np.median(errs)) if errs else None
    for chip, (within, n_held) in held_out_within(rows).items():
        out[f"Spec-Bench Vicuna-7B {chip}: methods within 15 %"] = f"{len(within)} of {n_held} ({', '.join(within)})"
    return out


def held_out_within(rows: list[dict[str, Any]], tolerance: float = 0.15) -> dict[str, tuple[list[str], int]]:
    """Per chip: the held-out Spec-Bench methods whose speedup is predicted within `tolerance`, and
    how many were held out."""
    held = [r for r in rows if r["kind"] == "speedup" and r["role"] == "test"]
    return {
        chip: (
            sorted(r["method"] for r in held if r["chip"] == chip and abs(r["error"]) <= tolerance),
            sum(r["chip"] == chip for r in held),
        )
        for chip in sorted({r["chip"] for r in held})
    }


def engine_line(engine: Engine) -> str:
    overlap = (
        "max(c, m)" if np.isinf(engine.overlap_exponent) else f"(c^p + m^p)^(1/p), p = {engine.overlap_exponent:.2f}"
    )
    return (
        f"{engine.name}: {engine.memory_efficiency:.0%} of peak bandwidth, "
        f"{engine.compute_efficiency:.0%} of the chip's measured GEMM rate (not fit), operator time {overlap}, "
        f"{engine.overhead_s * 1e3:.2f} ms per forward + {engine.overhead_per_layer_s * 1e3:.3f} ms per layer, "
        f"{engine.step_overhead_per_layer_s * 1e3:.3f} ms per layer of a speculative step's bookkeeping"
    )


def report_markdown(engines: dict[str, Engine], rows: list[dict[str, Any]], sensitivity: bool = True) -> str:
    """The published-vs-predicted tables (benchmarks/roofline/published.md)."""
    lines = ["## Engines (fit)", "", *[f"- {engine_line(e)}" for e in engines.values()], "", "## Summary", ""]
    lines += [f"- {k}: {v:.1%}" if isinstance(v, float) else f"- {k}: {v}" for k, v in summary(rows).items()]
    if sensitivity:
        cases = overlap_sensitivity()
        chips = list(cases[0]["within_15"])
        lines += [
            "",
            "## How much rests on HF eager's overlap exponent p",
            "",
            (
                "HF eager refit with p held at each value (the fit picks the lowest loss); held-out Spec-Bench "
                "Vicuna-7B methods within 15 %:"
            ),
            "",
            "| p | fit loss (mean abs log error) | " + " | ".join(chips) + " |",
            "|---|---|" + "---|" * len(chips),
        ]
        lines += [
            f"| {c['overlap_exponent']:g} | {c['fit_loss']:.4f} | "
            + " | ".join(f"{c['within_15'][k]} of {c['held_out'][k]}" for k in chips)
            + " |"
            for c in cases
        ]
    for kind, unit in (("speedup", "×"), ("forward", "ms per step")):
        lines += [
            "",
            f"## {'Speculative speedups' if kind == 'speedup' else 'Forward passes (batch 1)'}",
            "",
            "| row | source | chip | model | stack | method | τ | published | predicted | error | role |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        scale = 1e3 if kind == "forward" else 1.0
        for r in rows:
            if r["kind"] == kind:
                lines.append(
                    f"| {r['id']} | {r['source']} | {r['chip']} | {r['model']} ({r['precision']}) | {r['stack']} | "
                    f"{r['method']} | {r['mean_accepted'] or '–'} | {r['published'] * scale:.2f} {unit} | "
                    f"{r['predicted'] * scale:.2f} {unit} | {r['error']:+.0%} | {r['role']} |"
                )
    return "\n".join(lines) + "\n"


def round_engine(engine: Engine) -> Engine:
    """Fitted values at the precision ENGINES states them (what the test compares)."""
    return replace(
        engine,
        memory_efficiency=round(engine.memory_efficiency, 3),
        overlap_exponent=round(engine.overlap_exponent, 2),
        overhead_s=round(engine.overhead_s, 6),
        overhead_per_layer_s=round(engine.overhead_per_layer_s, 7),
        step_overhead_per_layer_s=round(engine.step_overhead_per_layer_s, 6),
    )
