"""Drafters propose, policies choose the speculation length, updaters learn (as Hugging Face separates
`get_candidates` from `update_candidate_strategy`). The speculative loop combines one of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from specviz.decoding import Decoding
from specviz.extras import Extra
from specviz.models.kv import CachedLM
from specviz.records import IterationRecord
from specviz.sampling import probabilities, sample


@dataclass
class Draft:
    tokens: list[int]  # proposed continuation x_1..x_k
    q: torch.Tensor | None  # [k, V] draft probabilities over the target's vocabulary; None: no distribution
    forwards: int  # draft-model forward passes spent proposing it
    extra: tuple[Extra, ...] = ()  # the method's fields for the record (specviz.extras)


class SpeculationPolicy(Protocol):
    def speculation_length(self) -> int:
        """The most tokens to draft in this iteration."""

    def keep_drafting(self, i: int, token: int, q_i: torch.Tensor | None) -> bool:
        """After drafting token i (0-based) with distribution q_i: draft another one?"""

    def update(self, drafted: int, accepted: int) -> None:
        """Learn from the verification of this iteration."""


class Drafter(Protocol):
    def propose(self, k: int, policy: SpeculationPolicy) -> Draft:
        """Up to k tokens to follow the committed ids."""

    def rollback(self, position: int, accepted: int) -> None:
        """The target kept `accepted` drafts after `position` committed tokens: forget the rest."""


class Updater(Protocol):
    def observe(self, record: IterationRecord, target_logits: torch.Tensor) -> None:
        """After a verification: the committed record and the target's logits [k+1, V] that verified it
        (row i scores the token at position record.position + i). Online drafts learn from these (OSD);
        the target pass already paid for them."""


@dataclass
class StaticLength:
    """Static speculation length: always draft gamma tokens."""

    gamma: int

    def speculation_length(self) -> int:
        return self.gamma

    def keep_drafting(self, i: int, token: int, q_i: torch.Tensor | None) -> bool:
        return True

    def update(self, drafted: int, accepted: int) -> None:
        pass


@dataclass
class HeuristicLength(StaticLength):
    """Hugging Face's dynamic schedule: gamma += 2 after a full acceptance, else gamma - 1 (min 1)."""

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.gamma = self.gamma + 2 if accepted == drafted else max(1, self.gamma - 1)


class ModelDrafter:
    """Drafts with the pair's small causal LM, one token per forward pass, keeping its own KV cache.

    lm: a ready CachedLM of the draft (e.g. one that times its passes); generator: the draws of the
    draft's own sampling (default: the run's; PEARL drafts in another thread and gives it its own)."""

    def __init__(
        self,
        dec: Decoding,
        model: PreTrainedModel | None = None,
        *,
        lm: CachedLM | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.dec = dec
        self.lm = lm if lm is not None else CachedLM(model if model is not None else dec.pair.draft_model)
        self.generator = generator if generator is not None else dec.generator
        self.vocab = dec.pair.vocab_size

    def propose(self, k: int, policy: SpeculationPolicy) -> Draft:
        """Up to k tokens after the committed ids."""
        return self.draft_after(self.dec.ids, k, policy)

    def draft_after(self, context: list[int], k: int, policy: SpeculationPolicy) -> Draft:
        """Up to k tokens after `context`, which the draft's cache holds a prefix of (the committed ids,
        or those plus drafts no verification has seen yet)."""
        dec, tokens, qs = self.dec, [], []
        pending = context[len(self.lm) :]  # tokens the draft has not seen yet
        for i in range(k):
            logits = self.lm.forward(pending)[-1]  # [V_draft]
            q_i = fit_vocab(probabilities(logits, dec.sampling), self.vocab)  # [V]
            x = int(logits.argmax()) if dec.sampling.greedy else int(sample(q_i, self.generator))
            tokens.append(x)
            qs.append(q_i)
            pending = [x]
            if not policy.keep_drafting(i, x, q_i):
                break
        return Draft(tokens, torch.stack(qs) if qs else None, forwards=len(tokens))

    def rollback(self, position: int, accepted: int) -> None:
        self.lm.truncate(min(len(self.lm), position + accepted))


def fit_vocab(q: torch.Tensor, vocab: int) -> torch.Tensor:
    """Draft probabilities over the target's vocabulary: padded with q = 0 (the draft never proposes
    those tokens, which keeps verification exact) or cut to the target's width."""
    width = q.shape[-1]
    if width == vocab:
        return q
    if width > vocab:
        q = q[..., :vocab]
        return q / q.sum(dim=-1, keepdim=True)
    return torch.nn.functional.pad(q, (0, vocab - width))
