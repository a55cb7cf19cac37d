"""Does the streams' head over the frequent tokens (the v2 draft's 8k set) draft the same trees as the
full 49k-token head? Default pair, shipped adapter, the streaming method's tree (γ = 3, 2 wide, 6 nodes).

At every state greedy decoding can reach on the benchmark prompts (each answer position of the
target's greedy answer as the accepted node), the accepted node's streams are scored by both heads
and each head's tree is built as the method builds it (`stream_tree`); counted: identical trees
(same tokens, same shape), and the tokens each tree would get accepted (`greedy_path` against the
target's own continuation). The target's answers are the references of `benchmarks/sssd/quiet`
(greedy, 128 new tokens, 10 prompts each of HumanEval, GSM8K and MT-Bench); the streams come from
one teacher-forced pass per prompt (they equal decoding's: tests/test_streaming_model.py).
No timing: counts only.

    python benchmarks/streaming/head_candidates.py > benchmarks/streaming/head-candidates.txt
"""

import json
from collections import defaultdict
from pathlib import Path

import torch

from specviz.methods.streaming import frequent_vocab, stream_tree, streaming_model
from specviz.methods.trees import greedy_path
from specviz.models.devices import output_embeddings
from specviz.models.pair import encode_prompt, load_pair
from specviz.prompts import take

REFERENCES = Path(__file__).parents[1] / "sssd" / "quiet" / "results.json"
WIDTH, NODES, MAX_NEW = 2, 6, 128  # the method's defaults; the references' answer budget

pair = load_pair("default")
lm = streaming_model(pair.target, "auto")
gamma = lm.cfg.gamma
vocab = frequent_vocab(len(output_embeddings(lm.tuned)))
assert vocab is not None, "the frequent-token set does not fit this target"
rows = lm.head_rows(vocab)
refs = json.loads(REFERENCES.read_text())["references"]
prompts = {p.id: p for suite in {r["suite"] for r in refs} for p in take(suite, 10)}
totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
with torch.inference_mode():
    for ref in refs:
        prompt_ids = encode_prompt(pair, prompts[ref["prompt_id"]].text)
        full = prompt_ids + ref["output_ids"]
        n = len(prompt_ids)
        nodes = torch.arange(n - 1, len(full) - 1)  # accepted node at p: the target's next token is full[p + 1]
        _, s = lm(torch.tensor([full]), nodes=nodes)  # [1, K, gamma, H]
        wide, narrow = lm.stream_head(s[0]).softmax(-1), lm.stream_head(s[0], rows).softmax(-1)
        for k, p in enumerate(nodes.tolist()):
            depth = min(gamma, MAX_NEW - (p + 2 - n) - 1, len(full) - (p + 2))  # the budget, the answer's end
            if depth <= 0:
                continue
            a = stream_tree(wide[k, :depth], WIDTH, NODES)
            b = stream_tree(narrow[k, :depth], WIDTH, NODES, vocab)
            after = full[p + 2 : p + 2 + depth]  # what the target says after its next token
            t = totals[ref["suite"]]
            t["states"] += 1
            t["identical trees"] += (a.tokens, a.parents) == (b.tokens, b.parents)
            t["top-2 inside the set"] += bool(torch.isin(wide[k, :depth].topk(WIDTH, -1).indices, vocab).all())
            t["accepted, full head"] += len(greedy_path(a.tokens, a.parents, after))
            t["accepted, frequent head"] += len(greedy_path(b.tokens, b.parents, after))
every: dict[str, float] = defaultdict(float)
for t in totals.values():
    for key, value in t.items():
        every[key] += value
V = len(output_embeddings(lm.tuned))
print(f"frequent set: {len(vocab)} of {V} tokens; gamma {gamma}, {WIDTH} wide, {NODES} nodes")
for suite, t in [*totals.items(), ("all", every)]:
    states = t["states"]
    print(
        f"{suite:10s} states {int(states):5d}  identical trees {t['identical trees'] / states:.3f}  "
        f"top-2 of every stream inside the set {t['top-2 inside the set'] / states:.3f}  "
        f"drafts accepted per state: full head {t['accepted, full head'] / states:.3f}, "
        f"frequent head {t['accepted, frequent head'] / states:.3f}"
    )
