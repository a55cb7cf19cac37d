"""Speculative Streaming in one pass per iteration (issue 39) against autoregressive decoding:
`python -m specviz.bench streaming`'s tables (its runs, interleaved prompt by prompt after a warm-up,
and its per-suite table). Beside AR of the original target and AR of the tuned one (streaming at
speculation_length 0; with the shipped streams-only adapter it is the same model, so the two AR rows
also show the run's noise), one of three sets of rows:

- `--rows layouts`: the layouts, without pruning: fused with the streams' head over the frequent
  tokens, fused with the full 49k-token head, and the two-pass build (full head);
- `--rows widths`: the paper's Figure 5 on this CPU: trees 2, 3 and 4 wide (6, 12, 20 nodes), each
  without and with the tree-pruning layer at threshold 0.01;
- `--rows pruning`: the method's default (2 wide, 6 nodes, no pruning) with the earlier adapter
  (`--old-adapter FILE`) and with the shipped one, and the shipped one with its tree-pruning layer at
  threshold 0.01.

The streaming rows otherwise use the method's defaults (γ = 3 of the adapter, 2 wide, 6 nodes).

    python benchmarks/streaming/fused_bench.py --suites humaneval,gsm8k,mtbench --limit 20 \\
        --max-new-tokens 128 --out benchmarks/streaming/fused
"""

import argparse
import json
import sys
from dataclasses import asdict

from specviz.experiments.streaming import markdown, run_all, table, tuned_agreement
from specviz.harness import Variant, add_comparison_args, add_output_args, comparison_prompts, describe_machine
from specviz.methods.streaming import streaming_model
from specviz.models.pair import load_target_pair
from specviz.prompts import prompt_sources

BASELINES = [
    Variant("AR (original target)", "autoregressive"),
    Variant("AR (tuned target)", "streaming", {"speculation_length": 0}),
]
ROWS = {
    "layouts": [
        Variant("Streaming fused, frequent head", "streaming", {"prune_threshold": 0.0}),
        Variant("Streaming fused, full head", "streaming", {"stream_vocab": "full", "prune_threshold": 0.0}),
        Variant("Streaming two-pass, full head", "streaming", {"passes": "two-pass", "stream_vocab": "full"}),
    ],
    # --old-adapter: the adapter before training went on (e.g. `git show 5f0c2a1:assets/streaming/...`)
    # the paper's Figure 5: wider trees, with and without the pruning layer (threshold 0.01)
    "widths": [
        Variant(f"Streaming fused, {k} wide, {n} nodes{', pruned' if t else ''}", "streaming", opts)
        for k, n in ((2, 6), (3, 12), (4, 20))
        for t in (0.0, 0.01)
        for opts in [{"tree_width": k, "tree_nodes": n, "prune_threshold": t}]
    ],
    "pruning": [
        Variant("Streaming fused, earlier adapter", "streaming", {"adapter": "OLD"}),
        Variant("Streaming fused, shipped adapter (the default)", "streaming", {}),
        Variant("Streaming fused, shipped adapter, pruned at 0.01", "streaming", {"prune_threshold": 0.01}),
    ],
}

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
add_comparison_args(p, suites="humaneval,gsm8k,mtbench", limit=20, max_new_tokens=128)
add_output_args(p, "streaming-fused")
p.add_argument("--rows", choices=list(ROWS), default="layouts", help="which streaming rows run beside the baselines")
p.add_argument("--old-adapter", help="the earlier adapter's file, for --rows pruning")
args = p.parse_args()
if args.rows == "pruning" and not args.old_adapter:
    p.error("--rows pruning needs --old-adapter")
variants = BASELINES + [
    Variant(v.label, v.method, {k: args.old_adapter if x == "OLD" else x for k, x in v.options.items()})
    for v in ROWS[args.rows]
]
pair = load_target_pair(args.pair)
prompts = comparison_prompts(args)
lm = streaming_model(pair.target, "auto")
runs = run_all(pair, prompts, variants, args.max_new_tokens, not args.no_warmup, not args.quiet)
summary = table(runs, [v.label for v in variants], {"streaming": lm.extra_parameters()})
threads = describe_machine(str(pair.device))["threads"]
header = (
    f"Speculative streaming, rows '{args.rows}': pair {pair.name}, shipped adapter (N_s={lm.cfg.stream_layers}, "
    f"gamma={lm.cfg.gamma}), {len(prompts)} prompts ({', '.join(prompt_sources(args))}), greedy, "
    f"max {args.max_new_tokens} new tokens, on {pair.device!s} ({threads} threads)"
)
text = markdown(summary, tuned_agreement(runs, BASELINES[0].label, BASELINES[1].label), header)
print(text)
args.out.mkdir(parents=True, exist_ok=True)
result = {
    "config": {**vars(args), "out": str(args.out), "prompts": [q.id for q in prompts]},
    "device": describe_machine(str(pair.device)),
    "adapter": asdict(lm.cfg),
    "summary": summary,
    "runs": [{k: v for k, v in r.items() if k != "output_ids"} for r in runs],
}
(args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
(args.out / "table.md").write_text(text + "\n")
sys.exit(0)
