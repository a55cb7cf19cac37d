"""Where a Speculative Streaming iteration spends its time on this CPU (default pair, shipped adapter):
the two-pass build's streams' pass (its layers and the LM head) and tree verification, or the fused
build's one pass and its streams' head, and the commit, next to an AR step. Timers wrap the
library's methods in place; the runs are the library's own.

    python benchmarks/streaming/profile_pass.py [TREE_NODES] [PASSES]   # 6 prompts, 96 tokens, gamma 3,
    # 2 wide, 6 nodes; PASSES: two-pass (the layout profile-tree6.txt measured) or fused
"""

import statistics
import sys
import time

import specviz
from specviz.methods import streaming, trees
from specviz.models.kv import CachedLM
from specviz.models.pair import load_pair
from specviz.prompts import take

TIMES: dict[str, list[float]] = {}


def timed(name, fn):
    def wrap(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        TIMES.setdefault(name, []).append(time.perf_counter() - start)
        return out

    return wrap


pair = load_pair("default")
lm = streaming.streaming_model(pair.target, "auto")
lm._stream_layer = timed("one stream layer", lm._stream_layer)
if len(sys.argv) <= 2 or sys.argv[2] == "two-pass":  # the fused pass scores the tree with lm.logits too
    lm.logits = timed("streams' LM head", lm.logits)
streaming.StreamDrafter.propose = timed("streams' pass (propose)", streaming.StreamDrafter.propose)
CachedLM.forward_tree_hidden = timed("tree verification", CachedLM.forward_tree_hidden)
CachedLM.forward_tree_by = timed("fused pass (verify + streams)", CachedLM.forward_tree_by)
lm.stream_head = timed("streams' head (fused)", lm.stream_head)
CachedLM.forward = timed("decoding forward (AR step)", CachedLM.forward)
trees.commit_tree = timed("commit", trees.commit_tree)
CachedLM.keep_path = timed("keep path in the cache", CachedLM.keep_path)

options = {
    "speculation_length": 3,
    "tree_width": 2,
    "tree_nodes": int(sys.argv[1]) if len(sys.argv) > 1 else 6,
    "passes": sys.argv[2] if len(sys.argv) > 2 else "two-pass",
}
prompts = [p for suite in ("humaneval", "gsm8k", "mtbench") for p in take(suite, 2)]
specviz.generate("streaming", pair, prompts[0].text, max_new_tokens=8, **options)  # warm-up
specviz.generate("autoregressive", pair, prompts[0].text, max_new_tokens=8)
TIMES.clear()
totals = {"autoregressive": [0, 0.0], "streaming": [0, 0.0]}
for prompt in prompts:
    for method, kw in (("autoregressive", {}), ("streaming", options)):
        s = specviz.generate(method, pair, prompt.text, max_new_tokens=96, **kw).summary
        totals[method][0] += s.new_tokens
        totals[method][1] += s.wall_s
ar, st = (1e3 * totals[m][1] / totals[m][0] for m in ("autoregressive", "streaming"))
iterations = len(TIMES.get("tree verification", TIMES.get("fused pass (verify + streams)", [])))
print(
    f"{options}: AR {ar:.1f} ms/token, streaming {st:.1f} ms/token ({ar / st:.3f}x AR), "
    f"{totals['streaming'][0] / iterations:.2f} tokens per iteration"
)
for name, values in TIMES.items():
    print(
        f"{name:28s} n = {len(values):5d}  median {1e3 * statistics.median(values):6.2f} ms  total {sum(values):6.2f} s"
    )
