"""DISCO's Table 1 and 2 on one pair: latency of static, heuristic, confidence, DISCO and oracle lengths.

    python -m specviz.bench disco --pair default --suites humaneval,mbpp --limit 8 --max-new-tokens 128

Every variant decodes every prompt greedily, interleaved prompt by prompt with a rotating order
after a warm-up, so machine drift hits all alike; latency is wall ms per generated token and
speedups are ratios to the autoregressive target measured in the same run. SL-opt is the static
length that was fastest on the classifier's validation text (its card), unless --sl-opt is given.
The oracle is an upper bound that peeks at the target's greedy output (labelled so everywhere).
Writes results.json, table.md and figures (HTML) under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

import numpy as np

from specviz import metrics
from specviz.harness import (
    Variant,
    add_comparison_args,
    add_output_args,
    comparison_prompts,
    describe_machine,
    mark_parity,
    run_interleaved,
)

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair
    from specviz.prompts import Prompt


def variants(static: list[int], sl_opt: int, heuristic_start: int) -> list[Variant]:
    rows = [Variant("Target (AR)", "autoregressive")]
    rows += [Variant(f"SL-{k}", "vanilla", {"speculation_length": k}) for k in static]
    if sl_opt not in static:
        rows.append(Variant(f"SL-opt ({sl_opt})", "vanilla", {"speculation_length": sl_opt}))
    rows += [
        Variant("dynHeur", "heuristic", {"speculation_length": heuristic_start}),
        Variant("Confidence (0.4)", "confidence"),
        Variant("DISCO", "disco"),
        Variant("Oracle (upper bound)", "oracle"),
    ]
    return rows


def run_all(
    pair: ModelPair, prompts: list[Prompt], rows: list[Variant], max_new_tokens: int, warmup: bool, progress: bool
) -> tuple[list, list]:
    """Returns (runs: one dict per variant x prompt, iterations: one dict per record)."""
    done = run_interleaved(
        pair,
        rows,
        prompts,
        max_new_tokens=max_new_tokens,
        warmup=warmup,
        keep_records=True,
        progress=progress,
        desc="disco",
    )
    runs = [r.to_dict(RUN_KEYS) for r in mark_parity(done, pair, prompts, judge=False)]
    iterations = [
        {
            "variant": run.variant,
            "method": run.method,
            "suite": run.suite,
            "prompt_id": run.prompt_id,
            "iteration": r.iteration,
            "position": r.position,
            "speculation_length": r.speculation_length,
            "accepted": r.accepted,
            "oracle_sl": r.oracle_sl,
            "ms": round(1e3 * (r.t_end - r.t_start), 3),
            "draft_ms": round(r.draft_ms, 3),
            "verify_ms": round(r.verify_ms, 3),
            "draft_forwards": r.draft_forwards,
        }
        for run in done
        for r in run.records
    ]
    return runs, iterations


RUN_KEYS = (
    "variant",
    "method",
    "suite",
    "prompt_id",
    "new_tokens",
    "wall_s",
    "drafted",
    "accepted",
    "iterations",
    "output_ids",
    "matches_autoregressive",
)  # a run's fields in results.json (output_ids left out there)


def table(runs: list[dict], iterations: list[dict], order: list[str]) -> list[dict]:
    """Per suite (and 'all') x variant: latency, speedup, acceptance, mean SL, distance to the oracle SL."""
    rows = []
    suites = list(dict.fromkeys(r["suite"] for r in runs))
    for suite in [*suites, "all"]:
        mine = [r for r in runs if suite in ("all", r["suite"])]
        ar = metrics.tokens_per_s(*_totals([r for r in mine if r["method"] == "autoregressive"]))
        for name in order:
            rs = [r for r in mine if r["variant"] == name]
            its = [
                it
                for it in iterations
                if it["variant"] == name and suite in ("all", it["suite"]) and it["oracle_sl"] is not None
            ]
            err = [abs(it["speculation_length"] - it["oracle_sl"]) for it in its if it["method"] != "autoregressive"]
            tokens, wall = _totals(rs)
            rows.append(
                {
                    "suite": suite,
                    "label": name,
                    "method": rs[0]["method"] if rs else None,
                    "runs": len(rs),
                    "tokens": tokens,
                    "ms_per_token": metrics.ms_per_token(tokens, wall),
                    "speedup": metrics.speedup(ar, metrics.tokens_per_s(tokens, wall)),
                    "acceptance_rate": metrics.acceptance_rate(
                        sum(r["accepted"] for r in rs), sum(r["drafted"] for r in rs)
                    ),
                    "mean_sl": float(np.mean([it["speculation_length"] for it in its])) if its else None,
                    "sl_abs_error": float(np.mean(err)) if err else None,
                    "matches_autoregressive": all(r["matches_autoregressive"] for r in rs),
                }
            )
    return rows


def _totals(runs: list[dict]) -> tuple[int, float]:
    """(new tokens, wall seconds) over runs."""
    return sum(r["new_tokens"] for r in runs), sum(r["wall_s"] for r in runs)


def oracle_stats(iterations: list[dict]) -> list[dict]:
    """DISCO's Table 2: the oracle SL per iteration of the oracle run, mean and std per suite."""
    out = []
    for suite in dict.fromkeys(it["suite"] for it in iterations):
        sl = [it["speculation_length"] for it in iterations if it["method"] == "oracle" and it["suite"] == suite]
        if sl:
            out.append(
                {
                    "suite": suite,
                    "iterations": len(sl),
                    "oracle_sl_mean": float(np.mean(sl)),
                    "oracle_sl_std": float(np.std(sl)),
                    "oracle_sl_median": float(np.median(sl)),
                }
            )
    return out


def markdown(rows: list[dict], oracle: list[dict], header: str) -> str:
    def fmt(x: float | None, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        header,
        "",
        "| suite | method | ms/token | speedup | acceptance | mean SL | mean abs(SL - oracle SL) | = AR |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    lines.extend(
        f"| {r['suite']} | {r['label']} | {fmt(r['ms_per_token'], '.1f')} | {fmt(r['speedup'])} | "
        f"{fmt(r['acceptance_rate'])} | {fmt(r['mean_sl'])} | {fmt(r['sl_abs_error'])} | "
        f"{'yes' if r['matches_autoregressive'] else 'NO'} |"
        for r in rows
    )
    lines += [
        "",
        "Oracle speculation length per iteration (Table 2):",
        "",
        "| suite | iterations | mean ± std | median |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {o['suite']} | {o['iterations']} | {o['oracle_sl_mean']:.2f} ± {o['oracle_sl_std']:.2f} "
        f"| {o['oracle_sl_median']:.0f} |"
        for o in oracle
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.bench disco", description=__doc__.split("\n\n")[0])
    add_comparison_args(p, suites="humaneval,mbpp", limit=5, max_new_tokens=128)
    p.add_argument("--static", default="3,5,8", help="static speculation lengths to run")
    p.add_argument("--sl-opt", type=int, default=None, help="SL-opt (default: from the DISCO classifier's card)")
    p.add_argument("--heuristic-start", type=int, default=5, help="dynHeur's initial speculation length")
    add_output_args(p, "disco")
    args = p.parse_args(argv)

    import pandas as pd

    from specviz.errors import SpecvizError
    from specviz.models.disco import classifier_for
    from specviz.plots.disco import chosen_vs_oracle_per_iteration, oracle_sl_histogram, sl_error_bars
    from specviz.prompts import prompt_sources
    from specviz.train.disco import load_named_pair

    try:
        pair = load_named_pair(args.pair)
        clf = classifier_for(pair.name)
        sl_opt = args.sl_opt or int(clf.card.get("static_sl_opt", 5))
        prompts = comparison_prompts(args)
        rows = variants([int(k) for k in args.static.split(",") if k.strip()], sl_opt, args.heuristic_start)
        runs, iterations = run_all(pair, prompts, rows, args.max_new_tokens, not args.no_warmup, not args.quiet)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = table(runs, iterations, [v.label for v in rows])
    oracle = oracle_stats(iterations)
    header = (
        f"DISCO comparison: pair {pair.name}, {len(prompts)} prompts "
        f"({', '.join(prompt_sources(args))}, offset {args.offset}), greedy, max {args.max_new_tokens} new tokens, "
        f"classifier '{clf.name}' (tau={clf.threshold}, "
        f"SL_max={clf.max_speculation_length}{', borrowed' if clf.card.get('borrowed') else ''}), SL-opt={sl_opt}"
    )
    text = markdown(summary, oracle, header)
    print(text)

    args.out.mkdir(parents=True, exist_ok=True)
    machine = describe_machine(pair.info.get("device", "cpu"))
    result = {
        "config": {**vars(args), "out": str(args.out), "sl_opt": sl_opt, "prompts": [q.id for q in prompts]},
        "pair": pair.info,
        "device": machine,
        "classifier": {
            "name": clf.name,
            "threshold": clf.threshold,
            "max_speculation_length": clf.max_speculation_length,
        },
        "summary": summary,
        "oracle_sl": oracle,
        "runs": [{k: v for k, v in r.items() if k != "output_ids"} for r in runs],
        "iterations": iterations,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    (args.out / "table.md").write_text(text + "\n")
    df = pd.DataFrame(iterations)
    first = df[df["prompt_id"] == prompts[0].id].copy()
    first["method"] = first["variant"]
    dynamic = [v.label for v in rows if v.method in ("heuristic", "confidence", "disco", "oracle")]
    figures = {
        "chosen_vs_oracle.html": chosen_vs_oracle_per_iteration(first, dynamic),
        "oracle_sl_histogram.html": oracle_sl_histogram(
            df[df["method"] == "oracle"].assign(oracle_sl=lambda d: d["speculation_length"])
        ),
        "sl_error.html": sl_error_bars([r for r in summary if r["suite"] != "all" and r["sl_abs_error"] is not None]),
    }
    for name, fig in figures.items():
        fig.write_html(args.out / name, include_plotlyjs="cdn")
    print(f"wrote {args.out}/results.json, table.md, {', '.join(figures)}")
    return 0
