"""What the tree-pruning layer saves of a fused pass, by insertion layer and by nodes pruned (default
pair, shipped adapter, a 6-node tree of the method's usual shape, γ = 3, a HumanEval prompt): the
median of REPS interleaved runs of each pass, the pruning decision included (the early-exit head over
the frequent tokens at the parent rows, as the method runs it); the kept nodes are fixed per row of
the table, so only the cost varies. Beside them: unpruned passes of fewer candidate rows (what a row
costs) and the pruning decision alone. A timing: run it alone on the machine.

    python benchmarks/streaming/prune_cost.py [REPS] > benchmarks/streaming/prune-cost.txt
"""

import os
import statistics
import sys
import time

import torch
from one_prompt import PARENTS, back, cache, last, lm, prompt, tree

from specviz.methods.streaming import frequent_vocab
from specviz.models.devices import output_embeddings
from specviz.models.tree_pruning import TreePruner

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
KEPT = {
    "3 of 6 nodes pruned": [0, 1, 3],
    "5 of 6 nodes pruned": [0],
}  # kept rows: 0, then 1 + node (closed under parents)
LAYERS = (8, 14, 20, 23, 26)

vocab = frequent_vocab(len(output_embeddings(lm.tuned)))
head = lm.head_rows(vocab) if vocab is not None else output_embeddings(lm.tuned)
norm = lm.tuned.get_decoder().norm
parent_rows = sorted({1 + p for p in PARENTS})
hidden = head.shape[1]


def fused(layer: int | None, kept: list[int]):
    """One fused pass; with `layer`, the pruning layer there keeps the rows 0 and 1 + `kept`."""
    lm.pruner = TreePruner(hidden, layer) if layer is not None else None

    def prune(h: torch.Tensor) -> list[int]:
        assert lm.pruner is not None
        lm.pruner.early_logits(h[parent_rows], norm, head).softmax(-1)  # the decision's cost
        return [0, *(1 + i for i in kept)]

    def run():
        cache.forward_tree_by(
            last,
            tree,
            PARENTS,
            lambda i, p, m, a: lm.fused_tree_pass(i, p, m, a, 1 + len(PARENTS), None, prune if layer else None),
        )

    return run


def rows_pass(n: int):
    """A fused pass over the first n nodes of the tree (1 + n candidate rows), no pruning: what rows cost."""
    return lambda: cache.forward_tree_by(
        last, tree[:n], PARENTS[:n], lambda i, p, m, a: lm.fused_tree_pass(i, p, m, a, 1 + n)
    )


probe, decider = torch.randn(len(parent_rows), hidden), TreePruner(hidden, 26)
parts = {"AR step (1 token)": lambda: cache.forward(last), "fused pass, no pruning": fused(None, [])}
for label, kept in KEPT.items():
    for layer in LAYERS:
        parts[f"pruned at layer {layer}, {label}"] = fused(layer, kept)
for n in (0, 1, 3):
    parts[f"fused pass of {1 + n} candidate rows (the tree's first {n} nodes), no pruning"] = rows_pass(n)
parts[f"the pruning decision alone ({len(parent_rows)} parent rows, {len(head)} tokens)"] = lambda: (
    TreePruner(hidden, 26).early_logits(probe, norm, head).softmax(-1).tolist()
)
times: dict[str, list[float]] = {name: [] for name in parts}
with torch.inference_mode():
    for rep in range(REPS + 1):  # interleaved, so that the machine's drift hits every part alike
        for name, step in parts.items():
            start = time.perf_counter()
            step()
            if rep:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            back()
lm.pruner = None
ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
ar, whole = ms["AR step (1 token)"], ms["fused pass, no pruning"]
print(
    f"median of {REPS} runs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, torch threads "
    f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at the end, prompt of {len(prompt)} tokens"
)
print()
print("| pass | ms | AR steps | vs the unpruned pass |")
print("|---|--:|--:|--:|")
for name, t in ms.items():
    print(f"| {name} | {t:.2f} | {t / ar:.3f} | {t / whole:.3f} |")
