"""Speculative Streaming's Table 1 and 2 on one target: call reduction, speedup, extra parameters.

    python -m specviz.bench streaming --pair default --suites humaneval,gsm8k --limit 4 --max-new-tokens 64

Table 1 (vs autoregressive decoding of the *tuned* model, the model streaming reproduces): the
call-reduction ratio (generated tokens per target forward pass), wall speedup and the parameters the
adapter adds. Table 2 (vs vanilla speculative decoding with the pair's draft, when it has one):
target calls, draft calls and latency. Every variant decodes every prompt greedily, interleaved
prompt by prompt with a rotating order after a warm-up; speed figures are ratios measured in the
same run. Also reported: how often the tuned model's greedy output equals the original target's.
Writes results.json and table.md under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from specviz import metrics
from specviz.harness import (
    Variant,
    add_comparison_args,
    add_output_args,
    comparison_prompts,
    describe_machine,
    run_interleaved,
)

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair
    from specviz.prompts import Prompt


def variants(gamma: int, width: int, nodes: int, adapter: str, draft: bool) -> list[Variant]:
    rows = [
        Variant("AR (original target)", "autoregressive"),
        Variant("AR (tuned target)", "streaming", {"speculation_length": 0, "adapter": adapter}),
        Variant(f"Streaming (path, gamma={gamma})", "streaming", {"speculation_length": gamma, "adapter": adapter}),
    ]
    if width > 1:
        rows.append(
            Variant(
                f"Streaming (tree {width}-wide, <= {nodes} nodes)",
                "streaming",
                {"speculation_length": gamma, "tree_width": width, "tree_nodes": nodes, "adapter": adapter},
            )
        )
    if draft:
        rows.append(Variant(f"Vanilla SD (draft, gamma={gamma})", "vanilla", {"speculation_length": gamma}))
    return rows


def run_all(
    pair: ModelPair, prompts: list[Prompt], rows: list[Variant], max_new_tokens: int, warmup: bool, progress: bool
) -> list[dict]:
    """One dict per variant x prompt (parity is judged per baseline in `table`)."""
    done = run_interleaved(
        pair, rows, prompts, max_new_tokens=max_new_tokens, warmup=warmup, progress=progress, desc="streaming"
    )
    return [r.to_dict(RUN_KEYS) for r in done]


RUN_KEYS = (
    "variant",
    "method",
    "suite",
    "prompt_id",
    "new_tokens",
    "wall_s",
    "target_forwards",
    "draft_forwards",
    "drafted",
    "accepted",
    "output_ids",
)  # a run's fields in results.json (output_ids left out there)


def table(runs: list[dict], order: list[str], extra_params: dict[str, int]) -> list[dict]:
    """Per suite (and 'all') x variant. Streaming is compared with AR of the tuned model, the
    others with AR of the original target; parity is checked against the same references."""
    rows = []
    for suite in [*dict.fromkeys(r["suite"] for r in runs), "all"]:
        mine = [r for r in runs if suite in ("all", r["suite"])]
        refs = {name: {r["prompt_id"]: r for r in mine if r["variant"] == name} for name in order[:2]}
        for name in order:
            rs = [r for r in mine if r["variant"] == name]
            ref_name = order[1] if rs and rs[0]["method"] == "streaming" else order[0]
            ref = refs[ref_name]
            tokens, wall, forwards = _count(rs, "new_tokens"), _seconds(rs, "wall_s"), _count(rs, "target_forwards")
            ref_tokens, ref_wall = _count(ref.values(), "new_tokens"), _seconds(ref.values(), "wall_s")
            rows.append(
                {
                    "suite": suite,
                    "label": name,
                    "method": rs[0]["method"],
                    "runs": len(rs),
                    "tokens": tokens,
                    "target_forwards": forwards,
                    "draft_forwards": _count(rs, "draft_forwards"),
                    "tokens_per_target_forward": metrics.mean_accepted_length(tokens, forwards),
                    "ms_per_token": metrics.ms_per_token(tokens, wall),
                    "baseline": ref_name,
                    "speedup": metrics.speedup(
                        metrics.tokens_per_s(ref_tokens, ref_wall), metrics.tokens_per_s(tokens, wall)
                    ),
                    "acceptance_rate": metrics.acceptance_rate(_count(rs, "accepted"), _count(rs, "drafted"))
                    or 0.0,  # 0, not None, for AR
                    "extra_params": extra_params.get(rs[0]["method"], 0),
                    "matches_baseline": all(r["output_ids"] == ref[r["prompt_id"]]["output_ids"] for r in rs),
                }
            )
    return rows


def _count(runs: Iterable[dict[str, Any]], key: str) -> int:
    """The sum of one whole-number field over runs."""
    return sum(r[key] for r in runs)


def _seconds(runs: Iterable[dict[str, Any]], key: str) -> float:
    """The sum of one field of seconds over runs."""
    return sum(r[key] for r in runs)


def tuned_agreement(runs: list[dict], original: str, tuned: str) -> dict[str, float]:
    """How close the tuned model's greedy output stays to the original target's."""
    a = {r["prompt_id"]: r["output_ids"] for r in runs if r["variant"] == original}
    b = {r["prompt_id"]: r["output_ids"] for r in runs if r["variant"] == tuned}
    same, total, whole = 0, 0, 0
    for pid, x in a.items():
        y = b[pid]
        m = min(len(x), len(y))  # the tokens both have
        n = next((i for i, (u, v) in enumerate(zip(x[:m], y[:m], strict=True)) if u != v), m)
        same, total, whole = same + n, total + len(x), whole + (x == y)
    return {"identical_outputs": whole / max(1, len(a)), "tokens_before_first_difference": same / max(1, total)}


def markdown(rows: list[dict], agreement: dict, header: str) -> str:
    def fmt(x: float | None, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        header,
        "",
        (
            "| suite | method | tokens / target forward | ms/token | speedup | vs | target calls | draft calls | "
            "extra params | = baseline |"
        ),
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    lines.extend(
        f"| {r['suite']} | {r['label']} | {fmt(r['tokens_per_target_forward'])} | "
        f"{fmt(r['ms_per_token'], '.1f')} | {fmt(r['speedup'])} | {r['baseline']} | {r['target_forwards']} | "
        f"{r['draft_forwards']} | {r['extra_params']:,} | {'yes' if r['matches_baseline'] else 'NO'} |"
        for r in rows
    )
    lines += [
        "",
        (
            f"Tuned vs original greedy output: {agreement['identical_outputs']:.0%} of outputs identical, "
            f"{agreement['tokens_before_first_difference']:.0%} of tokens before the first difference."
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.bench streaming", description=__doc__.split("\n\n")[0])
    add_comparison_args(
        p,
        suites="humaneval,gsm8k",
        limit=4,
        max_new_tokens=64,
        pair_help="default | tiny-random | a preset (the draft is optional)",
    )
    p.add_argument("--gamma", type=int, default=3, help="streams used (at most the adapter's)")
    p.add_argument(
        "--tree-width", type=int, default=3, help="top tokens per stream for the tree variant (1: no tree row)"
    )
    p.add_argument("--tree-nodes", type=int, default=12)
    p.add_argument("--adapter", default="auto", help="auto | untrained | a .safetensors path")
    add_output_args(p, "streaming")
    args = p.parse_args(argv)

    from specviz.errors import SpecvizError
    from specviz.methods.streaming import streaming_model
    from specviz.models.pair import load_target_pair
    from specviz.prompts import prompt_sources

    try:
        pair = load_target_pair(args.pair)
        prompts = comparison_prompts(args)
        rows = variants(args.gamma, args.tree_width, args.tree_nodes, args.adapter, pair.draft is not None)
        lm = streaming_model(pair.target, args.adapter)
        extra = {"streaming": lm.extra_parameters(), "vanilla": pair.info.get("draft_params", 0)}
        runs = run_all(pair, prompts, rows, args.max_new_tokens, not args.no_warmup, not args.quiet)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = table(runs, [v.label for v in rows], extra)
    agreement = tuned_agreement(runs, rows[0].label, rows[1].label)
    header = (
        f"Speculative streaming: pair {pair.name}, adapter '{args.adapter}' (N_s={lm.cfg.stream_layers}, "
        f"gamma={lm.cfg.gamma}, LoRA rank {lm.cfg.lora_rank}), {len(prompts)} prompts "
        f"({', '.join(prompt_sources(args))}, offset {args.offset}), greedy, max {args.max_new_tokens} new tokens, "
        f"on {pair.device!s} ({describe_machine(str(pair.device))['threads']} threads)"
    )
    text = markdown(summary, agreement, header)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "config": {**vars(args), "out": str(args.out), "prompts": [q.id for q in prompts]},
        "pair": pair.info,
        "device": describe_machine(str(pair.device)),
        "adapter": asdict(lm.cfg),
        "summary": summary,
        "tuned_vs_original": agreement,
        "runs": [{k: v for k, v in r.items() if k != "output_ids"} for r in runs],
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "table.md").write_text(text + "\n")
    print(f"wrote {args.out}/results.json and table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
