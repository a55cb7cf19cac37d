"""What the cost model predicts for a bench run's `eagle` rows, next to what the run measured.

Greedy EAGLE-2 is deterministic (its node budget reads scores and the cost model, never the clock),
so rerunning it on the run's prompts gives the same trees; the rerun checks that every output equals
the run's, then counts per suite (or Spec-Bench category) the tokens per target pass, the nodes each
pass verified and the head passes each iteration, and predicts the speedup over the target alone as
tokens / (sum over iterations of T(n+1)/T(1) + head passes x a head pass), with two sets of costs:

- measured on this CPU (benchmarks/eagle/README.md, "What a draft step and a tree pass cost"): T(n)/T(1)
  at n = 1, 2, 4, 6, 9, 17, 33 new tokens, linear between, and a 2-row head pass at 0.075 of a step;
- the roofline the budget itself uses (`eagle.pass_costs`: this machine's preset).

    python benchmarks/eagle/predict.py benchmarks/eagle/costmodel-suites/results.json.gz
"""

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from specviz.cost import shape_from_model
from specviz.harness import Variant, run_interleaved
from specviz.methods.eagle import EagleOptions, pass_costs
from specviz.models.pair import load_target_pair
from specviz.prompts import column_of, load_source

MEASURED_TOKENS = [1, 2, 4, 6, 9, 17, 33]  # new tokens in a target forward after a 256-token cache
MEASURED_RATIO = [1.00, 1.20, 1.29, 1.38, 1.58, 1.96, 2.69]  # T(n)/T(1), quiet, 2 threads (README)
MEASURED_HEAD = 0.075  # a 2-row head pass with its 8k logits and top-k, in target steps (README)


def measured_verify(nodes: int) -> float:
    """T(nodes + 1)/T(1) from the README's table (the pass also reads the token before the tree)."""
    return float(np.interp(nodes + 1, MEASURED_TOKENS, MEASURED_RATIO))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a bench run's results.json(.gz) with eagle rows")
    args = p.parse_args()
    opener = gzip.open if args.results.suffix == ".gz" else open
    with opener(args.results, "rt") as f:
        result = json.load(f)
    rows = [r for r in result["runs"] if r["method"] == "eagle"]
    wanted = {r["prompt_id"] for r in rows}
    suites = dict.fromkeys(r["suite"] for r in rows)
    prompts = [q for s in suites for q in load_source(s) if q.id in wanted]
    pair = load_target_pair(result["config"]["pair"])
    max_new = result["config"]["max_new_tokens"]
    runs = run_interleaved(
        pair, [Variant("eagle", "eagle")], prompts, max_new_tokens=max_new, keep_records=True, desc="eagle rerun"
    )
    recorded = {r["prompt_id"]: r["output_ids"] for r in rows}
    assert all(run.output_ids == recorded[run.prompt_id] for run in runs), "the rerun's outputs differ from the run's"
    measured = {  # group -> eagle's measured speedup over the target alone (the bench's own summary)
        s.get("suite") or s.get("category"): s["speedup_vs_autoregressive"]
        for s in result["by_suite"] + result["by_category"]
        if s["method"] == "eagle"
    }
    measured["all"] = next(s["speedup_vs_autoregressive"] for s in result["summary"] if s["method"] == "eagle")
    print(table(runs, pair, measured))


def group(run) -> str:
    """A run's group, named as the bench's summary names it: its Spec-Bench column, else its suite."""
    return column_of(run.category) if run.category else run.suite


def table(runs, pair, measured: dict[str, float]) -> str:
    """Per group and over all: the rerun's counts, the two predictions and the run's measured speedup."""
    verify, head = pass_costs(shape_from_model(pair.target), torch.device("cpu"), 8192, EagleOptions().tree_width, 256)
    groups: dict[str, list] = defaultdict(list)
    for run in runs:
        groups[group(run)].append(run)
        groups["all"].append(run)
    columns = "tokens per pass | nodes per pass | head passes | predicted (measured costs) | predicted (roofline)"
    lines = [f"| group | {columns} | measured |", "|---|--:|--:|--:|--:|--:|--:|"]
    for name, rs in groups.items():
        records = [x for r in rs for x in r.records]
        tokens, passes = sum(len(x.emitted) for x in records), len(records)
        cost_measured = sum(measured_verify(x.speculation_length) + x.draft_forwards * MEASURED_HEAD for x in records)
        cost_roofline = sum(verify[x.speculation_length] + x.draft_forwards * head for x in records)
        lines.append(
            f"| {name} | {tokens / passes:.2f} | {sum(x.speculation_length for x in records) / passes:.2f} | "
            f"{sum(x.draft_forwards for x in records) / passes:.2f} | {tokens / cost_measured:.2f}x | "
            f"{tokens / cost_roofline:.2f}x | {measured[name]:.2f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
