"""One Speculative Streaming iteration, part by part, fused (one pass) next to two-pass (default pair,
shipped adapter): the median of REPS runs of each part on a HumanEval prompt, a 6-node tree of the
method's usual shape (2 wide, γ = 3), nothing else. The library's own calls, timed one at a time.

    OMP_NUM_THREADS=1 python benchmarks/streaming/profile_iteration.py [REPS]
"""

import os
import statistics
import sys
import time

import torch
from one_prompt import PARENTS, P, back, cache, last, lm, prompt, tree

from specviz.methods.streaming import frequent_vocab
from specviz.models.devices import output_embeddings

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 15

rows = lm.head_rows(ids) if (ids := frequent_vocab(len(output_embeddings(lm.tuned)))) is not None else None


def fused_pass():
    return cache.forward_tree_by(
        last, tree, PARENTS, lambda i, p, m, a: lm.fused_tree_pass(i, p, m, a, 1 + len(PARENTS))
    )


with torch.inference_mode():
    _, streams, _ = fused_pass()
    node = streams[0]  # [gamma, H]
    back()
    _, hidden = cache.forward_tree_hidden(last, [], [], lm.first_stream_layer)  # the cache now holds `last`
    back()


def streams_pass():
    cache.forward(last)
    lm.stream_logits(hidden[0], P, cache.layer_kv)


parts = {  # name: (what to time, what to undo after it, untimed)
    "AR step (1 token, Hugging Face forward)": (lambda: cache.forward(last), back),
    "two-pass: tree verification (7 rows, HF forward)": (
        lambda: cache.forward_tree_hidden(last, tree, PARENTS, lm.first_stream_layer),
        back,
    ),
    "two-pass: AR step + streams' own pass (4 layers, full head, 3 rows)": (streams_pass, back),
    "fused: the one pass (7 rows + 7 x 3 stream rows in the top 4 layers)": (fused_pass, back),
    "streams' head, full 49,152 tokens (3 rows)": (lambda: lm.stream_head(node), lambda: None),
}
if rows is not None:
    parts[f"streams' head, frequent {len(rows)} tokens (3 rows)"] = (lambda: lm.stream_head(node, rows), lambda: None)
times: dict[str, list[float]] = {name: [] for name in parts}
with torch.inference_mode():
    for rep in range(REPS + 1):  # interleaved, so that the machine's drift hits every part alike
        for name, (step, undo) in parts.items():
            start = time.perf_counter()
            step()
            if rep:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            undo()
print(
    f"median of {REPS} runs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, "
    f"load average {os.getloadavg()[0]:.1f} at the end, prompt of {len(prompt)} tokens"
)
for name, values in times.items():
    print(f"{name:72s} {1e3 * statistics.median(values):8.2f} ms")
ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
names = list(ms)
ar, verify, streams_and_ar, fused, full_head = (ms[n] for n in names[:5])
two_pass = verify + streams_and_ar - ar
print(f"{'two-pass iteration (verification + streams pass)':72s} {two_pass:8.2f} ms = {two_pass / ar:.2f} AR steps")
heads = [("full", full_head)] + ([("frequent", ms[names[5]])] if len(names) > 5 else [])
for name, head in heads:
    label = f"fused iteration (the pass + {name} head)"
    print(f"{label:72s} {fused + head:8.2f} ms = {(fused + head) / ar:.2f} AR steps")
