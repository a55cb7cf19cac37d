"""PEARL's comparison on one pair: autoregressive, vanilla SD, PEARL and its two ablations (Tables 3, 6).

    python -m specviz.bench pearl --pair default --suites humaneval,gsm8k --limit 5 --max-new-tokens 128

Every variant decodes every prompt greedily, interleaved prompt by prompt with a rotating order
after a warm-up. PEARL variants run twice: "threads" (the draft and the target truly at the same
time, a thread each; CUDA streams on GPU) and "sequential" (the same rounds one job after the
other, so each forward is timed without interference). Reported per variant:

- measured tokens/s and speedups vs autoregressive and vs vanilla (ratios within this run);
- parallel-ideal tokens/s: the sequential run's wall time minus, in every round, the shorter
  job's time (what separate hardware for the two models would give, with these forward times);
- mean accepted tokens per drafting phase (Table 6): tokens emitted from a (re)start of drafting
  to the step that emits a target token (a correction or a bonus); for vanilla, one iteration;
- the share of the run each model waits (idle fraction), from the per-forward timestamps;
- PEARL's and Leviathan's predicted speedups from `specviz.cost` at the α implied by vanilla's
  tokens per iteration and the measured c = T_target / T_draft.

Writes results.json, table.md, timeline.html (vanilla vs PEARL on the first prompt) and
speedup.html under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
from specviz.records import IterationRecord

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from specviz.models.modelpair import ModelPair
    from specviz.prompts import Prompt


def variants(window: int, vanilla_gamma: int, modes: list[str]) -> list[Variant]:
    rows = [
        Variant("autoregressive", "autoregressive"),
        Variant(f"vanilla (γ={vanilla_gamma})", "vanilla", {"speculation_length": vanilla_gamma}),
    ]
    rows.extend(
        Variant(f"{method} [{mode}]", method, {"window": window, "concurrent": mode == "threads"})
        for mode in modes
        for method in ("pearl", "pearl-no-pre", "pearl-no-post")
    )
    return rows


def tokens_per_phase(records: Sequence[IterationRecord]) -> list[int]:
    """Tokens emitted in each drafting phase: a phase ends with a step that emits a target token."""
    phases, current = [], 0
    for r in records:
        current += len(r.emitted)
        if len(r.emitted) > r.accepted or r.stop:
            phases.append(current)
            current = 0
    return phases + ([current] if current else [])


def ideal_seconds(records: Sequence[IterationRecord]) -> float:
    """Parallel-ideal duration of a run: each record's own estimate, or its wall time (no overlap possible)."""
    return sum(p.ideal_s if (p := r.pearl()) else r.t_end - r.t_start for r in records)


def run_all(
    pair: ModelPair, prompts: list[Prompt], rows: list[Variant], max_new_tokens: int, warmup: bool, progress: bool
) -> list[dict]:
    """One dict per variant x prompt: the counts, the parallel-ideal time, the phases and idle shares
    (and, on the first prompt, the records for the timeline)."""
    from specviz.plots.timeline import idle_fractions

    done = run_interleaved(
        pair,
        rows,
        prompts,
        max_new_tokens=max_new_tokens,
        warmup=warmup,
        keep_records=True,
        progress=progress,
        desc="pearl",
    )
    return [
        {
            **run.to_dict(RUN_KEYS),
            "ideal_s": ideal_seconds(run.records),
            "phases": tokens_per_phase(run.records) if run.method != "autoregressive" else [],
            "idle": idle_fractions(run.records),
            "records": [r.to_dict() for r in run.records] if run.prompt_id == prompts[0].id else None,
            "matches_autoregressive": run.matches_autoregressive,
        }
        for run in mark_parity(done, pair, prompts, judge=False)
    ]


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
    "target_forwards",
    "draft_forwards",
    "output_ids",
)  # a run's counts in results.json (output_ids left out there)


def table(runs: list[dict], order: list[str], window: int, vanilla_gamma: int, c: float) -> list[dict]:
    """Per suite (and 'all') x variant: measured and ideal speed, phases, idle shares, predictions."""
    from specviz.cost import alpha_from_tokens_per_iteration, pearl_speedup, pearl_tokens_per_step
    from specviz.cost.formulas import vanilla_speedup_pearl_units

    rows = []
    suites = list(dict.fromkeys(r["suite"] for r in runs))
    for suite in [*suites, "all"]:
        mine = [r for r in runs if suite in ("all", r["suite"])]
        speed = {name: _tps(mine, name, "wall_s") for name in order}
        ar, vanilla = speed[order[0]], speed[order[1]]
        van = [r for r in mine if r["variant"] == order[1]]
        per_iter = metrics.mean_accepted_length(
            sum(r["new_tokens"] for r in van), sum(r["target_forwards"] for r in van)
        )
        alpha = alpha_from_tokens_per_iteration(min(max(per_iter or 0.0, 1.0), vanilla_gamma + 1), vanilla_gamma)
        for name in order:
            rs = [r for r in mine if r["variant"] == name]
            wall = sum(r["wall_s"] for r in rs)
            phases = [n for r in rs for n in r["phases"]]
            ideal = _tps(mine, name, "ideal_s")
            method = rs[0]["method"] if rs else None
            predicted = (
                {
                    "autoregressive": 1.0,
                    "vanilla": vanilla_speedup_pearl_units(alpha, c, vanilla_gamma),
                    "pearl": pearl_speedup(alpha, c, window),
                }.get(method)
                if method is not None
                else None
            )
            rows.append(
                {
                    "suite": suite,
                    "variant": name,
                    "method": method,
                    "runs": len(rs),
                    "tokens": sum(r["new_tokens"] for r in rs),
                    "tokens_per_s": speed[name],
                    "speedup_vs_ar": metrics.speedup(ar, speed[name]),
                    "speedup_vs_vanilla": metrics.speedup(vanilla, speed[name]),
                    "ideal_tokens_per_s": ideal,
                    "ideal_speedup_vs_ar": metrics.speedup(ar, ideal),
                    "ideal_speedup_vs_vanilla": metrics.speedup(vanilla, ideal),
                    "mean_tokens_per_phase": sum(phases) / len(phases) if phases else None,
                    "acceptance_rate": metrics.acceptance_rate(
                        sum(r["accepted"] for r in rs), sum(r["drafted"] for r in rs)
                    ),
                    "draft_idle": _weighted(rs, "draft", wall),
                    "target_idle": _weighted(rs, "target", wall),
                    "alpha_from_vanilla": alpha,
                    "predicted_speedup_vs_ar": predicted,
                    "predicted_pearl_tokens_per_step": pearl_tokens_per_step(alpha, window)
                    if method == "pearl"
                    else None,
                    "matches_autoregressive": all(r["matches_autoregressive"] for r in rs),
                }
            )
    return rows


def _tps(runs: list[dict], name: str, seconds: str) -> float | None:
    """Tokens/s of variant `name` over `runs`, by the measured ("wall_s") or parallel-ideal ("ideal_s") clock."""
    rs = [r for r in runs if r["variant"] == name]
    return metrics.tokens_per_s(sum(r["new_tokens"] for r in rs), sum(r[seconds] for r in rs))


def _weighted(runs: list[dict], lane: str, wall: float) -> float | None:
    return sum(r["idle"][lane] * r["wall_s"] for r in runs) / wall if wall > 0 else None


def markdown(rows: list[dict], header: str) -> str:
    def fmt(x: float | None, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        header,
        "",
        (
            "| suite | variant | tok/s | × AR | × vanilla | ideal tok/s | ideal × AR | ideal × vanilla | "
            "tokens / phase | draft idle | target idle | predicted × AR | = AR |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines.extend(
        f"| {r['suite']} | {r['variant']} | {fmt(r['tokens_per_s'], '.1f')} | {fmt(r['speedup_vs_ar'])} | "
        f"{fmt(r['speedup_vs_vanilla'])} | {fmt(r['ideal_tokens_per_s'], '.1f')} | "
        f"{fmt(r['ideal_speedup_vs_ar'])} | {fmt(r['ideal_speedup_vs_vanilla'])} | "
        f"{fmt(r['mean_tokens_per_phase'])} | {fmt(r['draft_idle'], '.0%')} | {fmt(r['target_idle'], '.0%')} | "
        f"{fmt(r['predicted_speedup_vs_ar'])} | {'yes' if r['matches_autoregressive'] else 'NO'} |"
        for r in rows
    )
    return "\n".join(lines)


def speedup_figure(rows: list[dict]) -> go.Figure:
    """Measured and parallel-ideal speedup over autoregressive decoding per variant (all suites)."""
    import plotly.graph_objects as go

    mine = [r for r in rows if r["suite"] == "all"]
    fig = go.Figure()
    fig.add_bar(
        x=[r["variant"] for r in mine], y=[r["speedup_vs_ar"] for r in mine], name="measured", marker_color="#0072B2"
    )
    fig.add_bar(
        x=[r["variant"] for r in mine],
        y=[r["ideal_speedup_vs_ar"] for r in mine],
        name="parallel-ideal (separate hardware)",
        marker_color="#56B4E9",
    )
    fig.add_scatter(
        x=[r["variant"] for r in mine],
        y=[r["predicted_speedup_vs_ar"] for r in mine],
        mode="markers",
        name="predicted (specviz.cost, α from vanilla)",
        marker={"symbol": "diamond", "size": 10, "color": "#D55E00"},
    )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="autoregressive")
    fig.update_layout(
        title="PEARL vs vanilla SD: speedup over autoregressive decoding",
        barmode="group",
        xaxis_title="variant",
        yaxis_title="speedup (× autoregressive tokens/s)",
    )
    return fig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.bench pearl", description=__doc__.split("\n\n")[0])
    add_comparison_args(p, suites="humaneval,gsm8k", limit=5, max_new_tokens=128)
    p.add_argument("--window", type=int, default=0, help="PEARL's γ (default: round(c), measured)")
    p.add_argument("--vanilla-gamma", type=int, default=0, help="vanilla's γ (default: PEARL's window)")
    p.add_argument("--modes", default="threads,sequential", help="PEARL runs: threads, sequential or both")
    add_output_args(p, "pearl")
    args = p.parse_args(argv)

    from specviz.cost import pearl_window
    from specviz.errors import SpecvizError
    from specviz.methods.pearl_lanes import forward_time_ratio
    from specviz.models.pair import load_pair
    from specviz.plots.timeline import timeline
    from specviz.prompts import prompt_sources

    try:
        pair = load_pair(args.pair)
        prompts = comparison_prompts(args)
        c = forward_time_ratio(pair)
        window = args.window or pearl_window(c)
        vanilla_gamma = args.vanilla_gamma or window
        modes = [m.strip() for m in args.modes.split(",") if m.strip() in ("threads", "sequential")]
        rows = variants(window, vanilla_gamma, modes)
        runs = run_all(pair, prompts, rows, args.max_new_tokens, not args.no_warmup, not args.quiet)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = table(runs, [v.label for v in rows], window, vanilla_gamma, c)
    machine = describe_machine(pair.info.get("device", "cpu"))
    header = (
        f"PEARL comparison: pair {pair.name} on {machine['device']} ({machine.get('threads')} intra-op threads), "
        f"{len(prompts)} prompts ({', '.join(prompt_sources(args))}, offset {args.offset}), greedy, "
        f"max {args.max_new_tokens} new tokens, "
        f"c = T_target/T_draft = {c:.2f}, PEARL window γ = {window}, vanilla γ = {vanilla_gamma}"
    )
    text = markdown(summary, header)
    print(text)

    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "config": {
            **vars(args),
            "out": str(args.out),
            "c": c,
            "window": window,
            "vanilla_gamma": vanilla_gamma,
            "prompts": [q.id for q in prompts],
        },
        "pair": pair.info,
        "device": machine,
        "summary": summary,
        "runs": [{k: v for k, v in r.items() if k not in ("output_ids", "records")} for r in runs],
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    (args.out / "table.md").write_text(text + "\n")
    first = {r["variant"]: r["records"] for r in runs if r["records"] is not None}
    shown = {name: recs for name, recs in first.items() if name.startswith(("vanilla", "pearl ["))}
    (args.out / "timeline_records.json").write_text(json.dumps(shown))
    drawn = {name: [IterationRecord.from_dict(r) for r in recs] for name, recs in shown.items()}
    timeline(drawn, title=f"Mutual waiting on {prompts[0].id}: vanilla vs PEARL ({pair.name})").write_html(
        args.out / "timeline.html", include_plotlyjs="cdn"
    )
    speedup_figure(summary).write_html(args.out / "speedup.html", include_plotlyjs="cdn")
    print(f"wrote {args.out}/results.json, table.md, timeline.html, timeline_records.json, speedup.html")
    return 0
