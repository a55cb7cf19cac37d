"""OSD learner settings replayed offline on a recorded stream (a results.json of `python -m specviz.bench osd`).

Every output of the stream is the target's greedy text, so the acceptance of any draft version on a
request is a teacher-forced replay (`specviz.oracle.replay_chain`), and the target's distributions
at any position come from one teacher-forced target pass per request. The learner is the library's
own `OnlineLearner`, fed what `osd` would record. Prints α over the 50 requests before requests 50,
100, 150 and 200, online vs static.

    python benchmarks/osd/osd_replay.py benchmarks/osd/v2/results.json.gz [CONFIG_INDICES e.g. 0,2]
"""

import sys

import numpy as np
import torch

from specviz.models.pair import load_pair
from specviz.oracle import draft_predictions, replay_chain
from specviz.osd.buffers import RequestBuffer, TargetDistributions
from specviz.osd.learner import OnlineLearner, OsdConfig
from specviz.reports import read_json

CONFIGS = [
    ("refused positions, lr 3e-4", OsdConfig(positions="wrong", lr=3e-4)),
    ("refused positions, lr 1e-4", OsdConfig(positions="wrong", lr=1e-4)),
    ("refused positions, lr 3e-5", OsdConfig(positions="wrong", lr=3e-5)),
    ("every verified position, lr 3e-5", OsdConfig(positions="all", lr=3e-5)),
    ("every verified position, lr 1e-4", OsdConfig(positions="all", lr=1e-4)),
]


def iterations(hits: np.ndarray, gamma: int, max_new: int):
    return replay_chain(hits, lambda j, left: min(gamma, max_new - j - 1))


def acceptance(hits: np.ndarray, gamma: int, max_new: int) -> tuple[int, int]:
    """(accepted, tested) of greedy SD with this draft on this request."""
    accepted = tested = 0
    for _, k, kept, emitted in iterations(hits, gamma, max_new):
        accepted, tested = accepted + kept, tested + kept + (kept < k and emitted > kept)
    return accepted, tested


def replay(pair, rows, targets, cfg: OsdConfig, gamma: int, max_new: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Per request: (online, static) (accepted, tested), the learner updating as `osd` would."""
    learner, out = OnlineLearner(pair.draft, cfg), []
    for r, dist in zip(rows, targets):
        sequence, start, output = r["prompt_ids"] + r["output_ids"], len(r["prompt_ids"]), np.asarray(r["output_ids"])
        hits = draft_predictions(learner.serving, sequence, start) == output
        out.append((acceptance(hits, gamma, max_new), acceptance(draft_predictions(pair.draft, sequence, start) == output, gamma, max_new)))
        recorded = []
        for j, k, kept, emitted in iterations(hits, gamma, max_new):
            if cfg.positions == "all":
                recorded += range(j, j + emitted)
            elif kept < k and emitted > kept:
                recorded.append(j + kept)
        buffer = RequestBuffer(cfg.positions, cfg.top_k)
        if recorded:
            rows_ = torch.tensor(recorded)
            buffer.positions = [start + j for j in recorded]
            buffer.parts = [TargetDistributions(dist.log_p[rows_], dist.indices[rows_], dist.vocab)]
        learner.end_request(buffer, sequence)
    return out


def main() -> None:
    result = read_json(sys.argv[1])  # plain or gzip'd
    rows, gamma, max_new = result["rows"], int(result["args"]["speculation_length"]), int(result["args"]["max_new_tokens"])
    chosen = [int(i) for i in sys.argv[2].split(",")] if len(sys.argv) > 2 else range(len(CONFIGS))
    pair = load_pair(result["args"]["pair"])
    targets = []
    with torch.inference_mode():
        for r in rows:  # the target's distribution at every output position, top-64 as the learner keeps it
            sequence, start = r["prompt_ids"] + r["output_ids"], len(r["prompt_ids"])
            logits = pair.target(input_ids=torch.tensor([sequence])).logits[0, start - 1 : len(sequence) - 1]
            targets.append(TargetDistributions.from_logits(logits, 64))
    for i in chosen:
        label, cfg = CONFIGS[i]
        per_request = replay(pair, rows, targets, cfg, gamma, max_new)

        def alpha(who: int, end: int) -> float:
            part = [x[who] for x in per_request[max(0, end - 50) : end]]
            return sum(a for a, _ in part) / max(1, sum(t for _, t in part))

        marks = {end: (round(alpha(0, end), 3), round(alpha(1, end), 3)) for end in (50, 100, 150, 200)}
        print(f"{label}: online/static alpha over the 50 requests before {marks}; gain at the end {marks[200][0] - marks[200][1]:+.3f}")


if __name__ == "__main__":
    main()
