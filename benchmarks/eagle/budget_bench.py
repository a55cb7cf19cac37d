"""EAGLE-2's node budget on this machine: fixed trees against trees sized each pass by the cost model
(`EagleOptions.budget`), beside the target alone, interleaved prompt by prompt after a warm-up. Per row:
tokens/s, speedup, tokens per target pass, the mean nodes a pass verified and the head passes an
iteration, and whether every output is the target alone's. Then whether the head's confidence reads as
an acceptance rate, as EAGLE-2's budget assumes: the fixed trees' nodes binned by their score (the
product of the head's probabilities along the path), and how many of each bin the target accepted.

    python benchmarks/eagle/budget_bench.py --suites humaneval,gsm8k,mtbench --limit 2 --offset 20 \\
        --max-new-tokens 128 --out benchmarks/eagle/budget
"""

import argparse
import json
import sys

from specviz.harness import (
    Variant,
    add_comparison_args,
    add_output_args,
    comparison_prompts,
    describe_machine,
    run_interleaved,
)
from specviz.models.pair import load_target_pair
from specviz.prompts import prompt_sources

AR = Variant("target alone", "autoregressive")
TREES = [(6, 2, 3), (10, 2, 3), (16, 3, 4), (30, 3, 4)]  # nodes (N) / width / depth
ROWS = [AR] + [
    Variant(f"{n} / {k} / {d}, {budget}", "eagle", {"tree_nodes": n, "tree_width": k, "depth": d, "budget": budget})
    for n, k, d in TREES
    for budget in ("fixed", "cost model")
    if not (budget == "fixed" and n == 30)  # a 30-node pass costs ~2.8 steps here: measured in the README's tables
]


def summarise(rows: list) -> list[dict]:
    """One line per variant over all prompts."""
    ar = {r.prompt_id: r for r in rows if r.variant == AR.label}
    ar_rate = sum(r.new_tokens for r in ar.values()) / sum(r.wall_s for r in ar.values())
    out = []
    for v in ROWS:
        rs = [r for r in rows if r.variant == v.label]
        tokens, wall, passes = (sum(getattr(r, k) for r in rs) for k in ("new_tokens", "wall_s", "target_forwards"))
        drafting = [x for r in rs for x in r.records if x.speculation_length or x.draft_forwards]
        out.append(
            {
                "variant": v.label,
                "tokens_per_s": round(tokens / wall, 2),
                "speedup": round(tokens / wall / ar_rate, 3),
                "tokens_per_pass": round(tokens / passes, 3),
                "nodes_per_pass": round(sum(x.speculation_length for x in drafting) / max(len(drafting), 1), 2),
                "head_passes": round(sum(x.draft_forwards for x in drafting) / max(len(drafting), 1), 2),
                "same_as_target": all(r.output_ids == ar[r.prompt_id].output_ids for r in rs),
            }
        )
    return out


def calibration(rows: list, bins: int = 10) -> list[dict]:
    """The fixed trees' nodes by score bin: how many, their mean score, the fraction the target accepted."""
    counts = [[0, 0.0, 0] for _ in range(bins)]  # nodes, sum of scores, accepted
    for r in rows:
        if r.method != "eagle" or "fixed" not in r.variant:
            continue
        for x in r.records:
            tree = x.tree()
            if tree is None:
                continue
            kept = set(tree.accepted_path)
            for i, score in enumerate(tree.tree_scores):
                b = counts[min(int(score * bins), bins - 1)]
                b[0], b[1], b[2] = b[0] + 1, b[1] + score, b[2] + (i in kept)
    return [
        {
            "bin": f"{i / bins:.1f}-{(i + 1) / bins:.1f}",
            "nodes": n,
            "mean_score": round(t / n, 3),
            "accepted": round(a / n, 3),
        }
        for i, (n, t, a) in enumerate(counts)
        if n
    ]


def markdown(summary: list[dict], header: str) -> str:
    columns = "nodes / width / depth, budget | tokens/s | speedup | tokens per pass | nodes per pass | head passes"
    lines = [header, "", f"| {columns} | same as the target |", "|---|--:|--:|--:|--:|--:|:-:|"]
    lines += [
        f"| {s['variant']} | {s['tokens_per_s']:.2f} | {s['speedup']:.2f} | {s['tokens_per_pass']:.2f} | "
        f"{s['nodes_per_pass']:.1f} | {s['head_passes']:.2f} | {'yes' if s['same_as_target'] else 'NO'} |"
        for s in summary
    ]
    return "\n".join(lines)


p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
add_comparison_args(p, suites="humaneval,gsm8k,mtbench", limit=2, max_new_tokens=128)
add_output_args(p, "eagle-budget")
args = p.parse_args()
pair = load_target_pair(args.pair)
prompts = comparison_prompts(args)
runs = run_interleaved(
    pair, ROWS, prompts, max_new_tokens=args.max_new_tokens, warmup=not args.no_warmup, keep_records=True,
    progress=not args.quiet, desc="eagle budget",
)  # fmt: skip
summary, cal = summarise(runs), calibration(runs)
threads = describe_machine(str(pair.device))["threads"]
text = markdown(
    summary,
    f"EAGLE-2's node budget: pair {pair.name}, {len(prompts)} prompts ({', '.join(prompt_sources(args))}, "
    f"offset {args.offset}), greedy, {args.max_new_tokens} new tokens, on {pair.device!s} ({threads} threads)",
)
text += "\n\nThe fixed trees' nodes by score (the head's confidence in the path) and the fraction the target kept:\n\n"
text += "| score | nodes | mean score | accepted |\n|---|--:|--:|--:|\n"
text += "\n".join(f"| {c['bin']} | {c['nodes']} | {c['mean_score']:.3f} | {c['accepted']:.3f} |" for c in cal)
print(text)
args.out.mkdir(parents=True, exist_ok=True)
result = {
    "config": {**vars(args), "out": str(args.out), "prompts": [q.id for q in prompts]},
    "device": describe_machine(str(pair.device)),
    "summary": summary,
    "calibration": cal,
    "runs": [r.to_dict() for r in runs],
}
(args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
(args.out / "table.md").write_text(text + "\n")
sys.exit(0)
