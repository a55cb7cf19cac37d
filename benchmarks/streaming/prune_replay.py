"""Where to insert the tree-pruning layer, and at what threshold: tokens each choice would lose.

Default pair, shipped adapter, the method's tree (γ = 3, 2 wide, 6 nodes, the frequent head). At
every state greedy decoding can reach in the target's greedy answers to held-out corpus prompts
(`python -m specviz.train.corpus teacher-text --temperature 0 --split val`: prompts no adapter or
pruner trained on), each answer position as the accepted node, the next tree is built as the
method builds it and replayed against the target's own continuation:

- accepted: the nodes greedy verification keeps without pruning, and with pruning (a node on the
  target's path survives when its early-exit probability at its parent, read at the parent's
  position, is at or above the threshold: exact, since an on-path parent's hidden state is the
  teacher-forced one);
- pruned: the share of the tree's nodes whose parent is on the target's path (the root's children
  included) that the pruner drops (exact for those; off-path parents' children are not replayed).

Each candidate layer's pruner comes from `python -m specviz.train.pruning` (`--pruners`), and the
untrained one (U = 0, the logit lens) beside it. Counts only, no timing.

    python benchmarks/streaming/prune_replay.py --records 60 > benchmarks/streaming/prune-replay.txt
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from specviz.methods.streaming import frequent_vocab, stream_tree, streaming_model
from specviz.methods.trees import greedy_path
from specviz.models.devices import output_embeddings
from specviz.models.pair import load_pair
from specviz.models.tree_pruning import TreePruner

WIDTH, NODES = 2, 6  # the method's defaults
THRESHOLDS = (0.001, 0.003, 0.01, 0.03, 0.1)

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--data", type=Path, default=Path("runs/corpus/teacher_greedy_val.jsonl"))
ap.add_argument("--pruners", type=Path, default=Path("runs/pruning/checkpoint.pt"))
ap.add_argument("--records", type=int, default=60)
args = ap.parse_args()

pair = load_pair("default")
lm = streaming_model(pair.target, "auto")
gamma, norm = lm.cfg.gamma, lm.tuned.get_decoder().norm
vocab = frequent_vocab(len(output_embeddings(lm.tuned)))
assert vocab is not None, "the frequent-token set does not fit this target"
rows = lm.head_rows(vocab)
column = torch.full((len(output_embeddings(lm.tuned)),), -1, dtype=torch.long)
column[vocab] = torch.arange(len(vocab))
hidden = rows.shape[1]
saved = torch.load(args.pruners, weights_only=True)["pruners"]
pruners: dict[str, TreePruner] = {}
for layer, state in saved.items():
    trained = TreePruner(hidden, int(layer))
    trained.load_state_dict(state)
    pruners[f"layer {layer}, trained"] = trained
    pruners[f"layer {layer}, logit lens"] = TreePruner(hidden, int(layer))
records = [json.loads(line) for line in args.data.read_text().splitlines()][: args.records]

totals: dict[str, float] = defaultdict(float)
with torch.inference_mode():
    for r in records:
        full = r["prompt_ids"] + r["output_ids"]
        n = len(r["prompt_ids"])
        ids = torch.tensor([full])
        hs = lm.tuned(ids, output_hidden_states=True).hidden_states
        nodes = torch.arange(n - 1, len(full) - 1)  # accepted node at p: the target's next token is full[p + 1]
        _, s = lm(ids, nodes=nodes)
        streams = lm.stream_head(s[0], rows).softmax(-1)
        early = {name: pr.early_logits(hs[pr.layer][0], norm, rows).softmax(-1) for name, pr in pruners.items()}
        for k, p in enumerate(nodes.tolist()):
            depth = min(gamma, len(full) - (p + 2))
            if depth <= 0:
                continue
            tree = stream_tree(streams[k, :depth], WIDTH, NODES, vocab)
            after = full[p + 2 : p + 2 + depth]
            path = greedy_path(tree.tokens, tree.parents, after)
            on_path = {-1: p + 1, **{node: p + 2 + d for d, node in enumerate(path)}}  # node -> its position
            totals["states"] += 1
            totals["accepted"] += len(path)
            evaluable = [i for i, parent in enumerate(tree.parents) if parent in on_path]
            totals["evaluable nodes"] += len(evaluable)
            cols = column[torch.tensor(tree.tokens)]
            for name, q in early.items():
                prob = [float(q[on_path[tree.parents[i]], cols[i]]) for i in evaluable]
                for t in THRESHOLDS:
                    kept = 0
                    for node in path:  # the greedy path survives while every node on it does
                        if float(q[on_path[tree.parents[node]], cols[node]]) < t:
                            break
                        kept += 1
                    totals[f"{name} @{t} accepted"] += kept
                    totals[f"{name} @{t} pruned"] += sum(x < t for x in prob)

states = totals["states"]
print(
    f"{len(records)} held-out records, {int(states)} states; tree {WIDTH} wide, {NODES} nodes, γ {gamma}; "
    f"accepted per state without pruning {totals['accepted'] / states:.3f} "
    f"(tokens per pass {1 + totals['accepted'] / states:.3f})"
)
print()
print("| pruner | threshold | accepted per state | tokens per pass lost | nodes pruned (with an on-path parent) |")
print("|---|--:|--:|--:|--:|")
for name in pruners:
    for t in THRESHOLDS:
        acc = totals[f"{name} @{t} accepted"] / states
        lost = (totals["accepted"] - totals[f"{name} @{t} accepted"]) / states
        pruned = totals[f"{name} @{t} pruned"] / totals["evaluable nodes"]
        print(f"| {name} | {t} | {acc:.3f} | {lost:.3f} | {pruned:.1%} |")
