"""Speculative Streaming in one pass per iteration (issue 39) against the two-pass build and
autoregressive decoding: `python -m specviz.bench streaming`'s tables (its runs, interleaved prompt by
prompt after a warm-up, and its per-suite table), with these rows:

- AR of the original target, and AR of the tuned one (streaming at speculation_length 0; with the
  shipped streams-only adapter it is the same model, so the two AR rows also show the run's noise)
- fused, the streams' head over the frequent tokens (the registered default)
- fused, the full 49k-token head
- two-pass, the full head (the earlier build)

The streaming rows use the method's defaults (γ = 3 of the adapter, 2 wide, 6 nodes).

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

ROWS = [
    Variant("AR (original target)", "autoregressive"),
    Variant("AR (tuned target)", "streaming", {"speculation_length": 0}),
    Variant("Streaming fused, frequent head", "streaming", {}),
    Variant("Streaming fused, full head", "streaming", {"stream_vocab": "full"}),
    Variant("Streaming two-pass, full head", "streaming", {"passes": "two-pass", "stream_vocab": "full"}),
]

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
add_comparison_args(p, suites="humaneval,gsm8k,mtbench", limit=20, max_new_tokens=128)
add_output_args(p, "streaming-fused")
args = p.parse_args()
pair = load_target_pair(args.pair)
prompts = comparison_prompts(args)
lm = streaming_model(pair.target, "auto")
runs = run_all(pair, prompts, ROWS, args.max_new_tokens, not args.no_warmup, not args.quiet)
summary = table(runs, [v.label for v in ROWS], {"streaming": lm.extra_parameters()})
threads = describe_machine(str(pair.device))["threads"]
header = (
    f"Speculative streaming, fused vs two-pass: pair {pair.name}, shipped adapter (N_s={lm.cfg.stream_layers}, "
    f"gamma={lm.cfg.gamma}), {len(prompts)} prompts ({', '.join(prompt_sources(args))}), greedy, "
    f"max {args.max_new_tokens} new tokens, on {pair.device!s} ({threads} threads)"
)
text = markdown(summary, tuned_agreement(runs, ROWS[0].label, ROWS[1].label), header)
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
