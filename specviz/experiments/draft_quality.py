"""How good is a pair's draft: α, mean accepted length, c, and Leviathan's predicted speedup next to
the measured one, per prompt suite (greedy, autoregressive and vanilla run interleaved per prompt).

    python -m specviz.bench draft_quality --pair default --suites humaneval,gsm8k,mtbench --limit 20
    python -m specviz.bench draft_quality --pair default --gammas 2,3,4,5,6 --limit 4   # speculation length sweep

α is the i.i.d. maximum-likelihood estimate from the accept/reject pattern
(`specviz.cost.from_records.estimate_alpha`); c = draft milliseconds per drafted token / the
autoregressive step's milliseconds; verify ratio = T(γ+1)/T(1), both from the records' timings.
The prediction with verify ratio 1 is Leviathan's Theorem 3.8; the other uses the measured ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

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


def suite_row(suite: str, vanilla: list, baseline: list, gamma: int) -> dict[str, Any]:
    """Totals of one suite's records (lists of per-prompt record tuples) -> α, c, predictions, measurement."""
    from specviz.cost.formulas import expected_tokens, improvement_factor, speedup_with_verify_cost
    from specviz.cost.from_records import estimate_alpha

    v = [r for run in vanilla for r in run]
    b = [r for run in baseline for r in run]
    drafting = [r for r in v if r.drafted]
    drafted = sum(len(r.drafted) for r in drafting)
    accepted = sum(r.accepted for r in drafting)
    t1 = sum(r.verify_ms for r in b if r.target_forwards) / max(1, sum(1 for r in b if r.target_forwards))
    alpha = estimate_alpha(drafting) or 0.0
    c = sum(r.draft_ms for r in drafting) / max(1, drafted) / t1
    ratio = sum(r.verify_ms for r in drafting) / max(1, len(drafting)) / t1

    def tokens(runs: list) -> int:
        return sum(len(r.emitted) for run in runs for r in run)

    def seconds(runs: list) -> float:
        return sum(run[-1].t_end for run in runs if run)

    ar_tps = metrics.tokens_per_s(tokens(baseline), seconds(baseline))
    vanilla_tps = metrics.tokens_per_s(tokens(vanilla), seconds(vanilla))
    return {
        "suite": suite,
        "gamma": gamma,
        "prompts": len(vanilla),
        "acceptance_rate": metrics.acceptance_rate(accepted, drafted) or 0.0,
        "alpha_iid": alpha,
        "mean_accepted_length": metrics.mean_accepted_length(tokens(vanilla), sum(r.target_forwards for r in v)) or 0.0,
        "c": c,
        "verify_ratio": ratio,
        "E_tokens": expected_tokens(min(alpha, 1.0), gamma),
        "leviathan_speedup": improvement_factor(min(alpha, 1.0), gamma, c),
        "predicted_speedup_measured_verify": speedup_with_verify_cost(min(alpha, 1.0), gamma, c, ratio),
        "measured_speedup": metrics.speedup(ar_tps, vanilla_tps),
        "ar_tokens_per_s": ar_tps,
        "vanilla_tokens_per_s": vanilla_tps,
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specviz.bench draft_quality", description=__doc__.split("\n\n")[0])
    add_comparison_args(p, suites="humaneval,gsm8k,mtbench", limit=20, max_new_tokens=128)
    p.add_argument(
        "--gammas", default="4", help="vanilla's speculation lengths γ, comma-separated (each one runs on every prompt)"
    )
    add_output_args(p, "draft_quality", warmup=False)
    return p


def _variants(gammas: list[int]) -> list[Variant]:
    """Autoregressive (the measured speedup's baseline and T(1)), then vanilla at each γ."""
    variants = [Variant("autoregressive", "autoregressive")]
    variants += [Variant(f"vanilla γ={g}", "vanilla", {"speculation_length": g}) for g in gammas]
    return variants


def _run_variants(args: argparse.Namespace, pair: ModelPair, prompts: list, variants: list[Variant]) -> list:
    """Every variant on every prompt, interleaved per prompt (so drift hits all alike), parity marked."""
    return mark_parity(
        run_interleaved(
            pair,
            variants,
            prompts,
            max_new_tokens=args.max_new_tokens,
            keep_records=True,
            progress=not args.quiet,
            desc="draft quality",
        ),
        pair,
        prompts,
        judge=False,
    )


def _records_by_suite(
    done: list, variants: list[Variant], suites: list[str], gammas: list[int]
) -> dict[str, dict[object, list]]:
    """runs[suite][key]: the per-prompt record tuples, key "autoregressive" or γ."""
    key = dict(zip((v.label for v in variants), ["autoregressive", *gammas], strict=True))  # label -> this module's key
    runs: dict[str, dict[object, list]] = {s: {m: [] for m in ["autoregressive", *gammas]} for s in suites}
    for r in done:
        runs[r.suite][key[r.variant]].append(r.records)
    return runs


def _rows(runs: dict[str, dict[object, list]], suites: list[str], gammas: list[int]) -> list[dict[str, Any]]:
    """One row per (γ, suite), then one per γ over every suite ("all")."""
    rows = [suite_row(s, runs[s][g], runs[s]["autoregressive"], g) for g in gammas for s in suites]
    every = [
        suite_row(
            "all", [r for s in suites for r in runs[s][g]], [r for s in suites for r in runs[s]["autoregressive"]], g
        )
        for g in gammas
    ]
    return rows + every


def _report_text(args: argparse.Namespace, pair_name: str, mismatches: int, rows: list[dict[str, Any]]) -> str:
    """draft_quality.md: the run's settings in one line, then the rows as a markdown table."""
    cols = [
        "suite",
        "gamma",
        "prompts",
        "acceptance_rate",
        "alpha_iid",
        "mean_accepted_length",
        "c",
        "verify_ratio",
        "leviathan_speedup",
        "predicted_speedup_measured_verify",
        "measured_speedup",
        "ar_tokens_per_s",
        "vanilla_tokens_per_s",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines.extend(
        "| " + " | ".join(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |"
        for row in rows
    )
    return (
        f"draft quality: pair {pair_name}, γ = {args.gammas}, greedy, max {args.max_new_tokens} new tokens, "
        f"{args.limit} prompts per suite; greedy outputs differing from autoregressive: {mismatches}\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _write_outputs(args: argparse.Namespace, pair_name: str, result: dict[str, Any]) -> None:
    """draft_quality.json and .md under --out, the report printed, then the closing line."""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "draft_quality.json").write_text(json.dumps(result, indent=1))
    text = _report_text(args, pair_name, result["greedy_mismatches"], result["rows"])
    (args.out / "draft_quality.md").write_text(text)
    print(text)
    print(f"wrote {args.out}/draft_quality.json and .md")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    from specviz.errors import SpecvizError
    from specviz.models.pair import load_pair

    try:
        pair = load_pair(args.pair)
        prompts = comparison_prompts(args)
        suites = list(dict.fromkeys(q.suite for q in prompts))  # a prompt file's rows carry its name
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gammas = [int(g) for g in args.gammas.split(",")]
    variants = _variants(gammas)
    done = _run_variants(args, pair, prompts, variants)
    runs = _records_by_suite(done, variants, suites, gammas)
    result: dict[str, Any] = {
        "pair": {"name": pair.name, **pair.info},
        "machine": describe_machine(pair.info.get("device", "cpu")),
        "config": vars(args) | {"out": str(args.out)},
        "greedy_mismatches": sum(not r.matches_autoregressive for r in done),
        "rows": _rows(runs, suites, gammas),
    }
    _write_outputs(args, pair.name, result)
    return 0
