"""The draft's data: the teacher corpus's answers with their prompts, split, batched and collated
into sparse distillation targets (the target's top-k where a work folder kept it, else the answer token)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.train import corpus as corpus_mod

if TYPE_CHECKING:
    import argparse

    from transformers import PreTrainedTokenizerBase


@dataclass
class Example:
    ids: list[int]  # prompt (chat template applied) + answer
    answer_start: int  # index of the first answer token in `ids`
    greedy: bool
    topk: tuple[np.ndarray, np.ndarray] | None  # ([a, k] ids, [a, k] log-probabilities) of the target, if kept
    source: str = ""  # the prompt file it answers (corpus.SOURCES)


class CorpusData:
    """The corpus answers with their prompts, split by `corpus.held_out` (`splits.CORPUS`), and batches of them."""

    def __init__(self, args: argparse.Namespace, tokenizer: PreTrainedTokenizerBase, max_len: int) -> None:
        records = corpus_mod.all_answers(args.corpus, args.work)
        if not records:
            raise SpecvizError(
                "no corpus answers: pass --corpus (the shipped folder) and/or --work (a generation work folder)"
            )
        ids, logp = corpus_mod.WorkFolder(args.work, args.top_k).topk()  # rows of the work folder's answers
        prompts = {s.name: corpus_mod.read_source(args.data, s) for s in corpus_mod.SOURCES}
        self.train: list[Example] = []
        self.val: list[Example] = []
        for r in records:
            prompt = corpus_mod.encode_chat(tokenizer, prompts[r["source"]][r["line"]])
            keep = min(len(r["output_ids"]), max_len - len(prompt))
            if keep <= 0:
                continue
            row = None if args.answers_only else r.get("row")  # only a work folder's answers have top-k rows
            topk = (ids[row : row + keep], logp[row : row + keep]) if row is not None else None
            ex = Example(
                prompt + [int(x) for x in r["output_ids"][:keep]], len(prompt), r["temperature"] == 0, topk, r["source"]
            )
            (self.val if corpus_mod.held_out(r["source"], r["line"]) else self.train).append(ex)
        if not self.val and len(self.train) > 1:  # too few prompts to hit the held-out hash: hold out a tenth
            greedy = [e for e in self.train if e.greedy]
            self.val = greedy[len(greedy) - max(1, len(self.train) // 10) :]
            self.train = [e for e in self.train if all(e is not v for v in self.val)]
        if not self.train:
            raise SpecvizError("every corpus answer is held out: generate more")
        self.answer_tokens = sum(len(e.ids) - e.answer_start for e in self.train)
        self.with_topk = sum(e.topk is not None for e in self.train)

    def token_counts(self, vocab: int) -> np.ndarray:
        """How often each token id appears in the training answers."""
        return np.bincount(np.concatenate([np.asarray(e.ids[e.answer_start :]) for e in self.train]), minlength=vocab)

    def epoch_batches(self, epoch: int, seed: int, batch_tokens: int) -> list[list[int]]:
        """Indices of training examples in batches of about `batch_tokens` padded tokens: shuffled,
        then sorted by length within pools of 64 batches (little padding), batches shuffled again."""
        rng = random.Random(seed * 1000 + epoch)
        order = list(range(len(self.train)))
        rng.shuffle(order)
        mean = max(1, sum(len(e.ids) for e in self.train) // len(self.train))
        pool = 64 * max(1, batch_tokens // mean)
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lambda i: len(self.train[i].ids))
            batch: list[int] = []
            for i in chunk:
                if batch and (len(batch) + 1) * len(self.train[i].ids) > batch_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(i)
            if batch:
                batches.append(batch)
        rng.shuffle(batches)
        return batches


def collate(
    examples: list[Example], index_of: torch.Tensor, pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [B, T] (right-padded), flat positions [N] whose next token is an answer token, and the
    target there as (head indices [N, k], weights [N, k]): p renormalised on the head's tokens among
    the stored top-k, or the answer token alone (weight 1). Positions whose target has no head token
    are left out (the head cannot learn them)."""
    width = max(len(e.ids) for e in examples) - 1
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    positions, targets, weights = [], [], []
    k = max((e.topk[0].shape[1] for e in examples if e.topk is not None), default=1)
    for b, e in enumerate(examples):
        seq = torch.tensor(e.ids)
        ids[b, : len(seq) - 1] = seq[:-1]
        answer = seq[e.answer_start :]  # [a]
        pos = torch.arange(e.answer_start - 1, len(seq) - 1) + b * width  # row predicting answer[i]
        if e.topk is not None:
            tid = index_of[torch.from_numpy(e.topk[0].astype(np.int64))]  # [a, k] head index or -1
            p = torch.from_numpy(e.topk[1].astype(np.float32)).exp() * (tid >= 0)  # [a, k]
        else:
            tid = torch.full((len(answer), k), -1, dtype=torch.long)
            tid[:, 0] = index_of[answer]
            p = (tid >= 0).float()
        mass = p.sum(-1)  # [a]
        ok = mass > 0
        positions.append(pos[ok])
        targets.append(tid.clamp(min=0)[ok])
        weights.append(p[ok] / mass[ok, None])
    return ids, torch.cat(positions), torch.cat(targets), torch.cat(weights)
