"""Oracle speculation length: how many tokens the draft would have proposed correctly at each step.

After a run, one teacher-forced forward pass of the draft over the final sequence gives its greedy
prediction at every position; the oracle SL of an iteration starting at `position` is the number of
consecutive positions from there on where that prediction equals what was emitted. It is the
speculation length an all-knowing policy would have chosen (DISCO's oracle), and what the app plots
against the length each method actually chose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from specviz.models.kv import CachedLM
from specviz.models.pair import ModelPair
from specviz.records import IterationRecord


@torch.inference_mode()
def draft_predictions(draft: PreTrainedModel, sequence: Sequence[int], start: int) -> np.ndarray:
    """The draft's greedy guess for sequence[j] given sequence[:j] (teacher-forced), for j in [start, len)."""
    # one teacher-forced pass through the path that drafts (a lean draft's own, int8 on a CPU)
    logits = CachedLM(draft).forward(list(sequence), n_logits=len(sequence) - start + 1)  # rows for j-1 in [start-1, L)
    return logits[:-1].argmax(dim=-1).cpu().numpy()


def agreement_runs(hits: np.ndarray) -> np.ndarray:
    """runs[i] = consecutive True values of `hits` from i on."""
    runs = np.zeros(len(hits) + 1, dtype=np.int64)
    for j in range(len(hits) - 1, -1, -1):
        runs[j] = runs[j + 1] + 1 if hits[j] else 0
    return runs[:-1]


def replay_chain(
    hits: Sequence[bool] | np.ndarray, draft_length: Callable[[int, int], int]
) -> Iterator[tuple[int, int, int, int]]:
    """Greedy speculative decoding replayed on a known greedy output, without running a model.

    hits[j]: the draft's greedy guess for output token j (given the true prefix) is the target's.
    draft_length(j, left): drafts in the iteration that starts at output token j, with `left` tokens
    left. The greedy acceptance rule (`verify`): the leading drafts equal to the target's tokens are
    kept, then the target emits its own. Yields (start j, drafted k, accepted, emitted) per iteration.
    """
    runs = agreement_runs(np.asarray(hits, dtype=bool))
    j, n = 0, len(hits)
    while j < n:
        k = draft_length(j, n - j)
        accepted = min(int(runs[j]), k)
        emitted = min(accepted + 1, n - j)
        yield j, k, accepted, emitted
        j += emitted


def draft_agreement_runs(draft: PreTrainedModel, sequence: Sequence[int], start: int) -> np.ndarray:
    """runs[j - start] = consecutive greedy draft hits from sequence[j] on, for j in [start, len)."""
    return agreement_runs(draft_predictions(draft, sequence, start) == np.asarray(sequence[start:]))


def fill_oracle_sl(
    pair: ModelPair, prompt_ids: Sequence[int], records: Sequence[IterationRecord]
) -> list[IterationRecord]:
    """Copies of `records` with `oracle_sl` set (left None when the pair has no draft model)."""
    if pair.draft is None or not records:
        return list(records)
    sequence = list(prompt_ids) + [t for r in records for t in r.emitted]
    start = records[0].position
    runs = draft_agreement_runs(pair.draft, sequence, start)
    return [dataclasses.replace(r, oracle_sl=int(runs[r.position - start])) for r in records]
