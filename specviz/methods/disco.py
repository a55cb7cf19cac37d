"""Dynamic speculation length decided per draft token: DISCO's classifier and HF's confidence rule.

DISCO (Mamou et al. 2024): after drafting x_i, a tiny classifier on q_i predicts whether x_i will be
accepted; drafting continues while C_i >= tau and fewer than SL_max tokens were drafted, then the
target verifies. `confidence` is the unsupervised variant Hugging Face ships
(`assistant_confidence_threshold`): stop when the draft's top-1 probability falls below 0.4.
Both only shorten or lengthen the draft; verification is unchanged, so both are lossless.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specviz.cost.families import CHAIN
from specviz.decoding import Decoding
from specviz.extras import ConfidenceExtra, DiscoExtra
from specviz.methods import register
from specviz.methods.drafting import Draft, Drafter, ModelDrafter, SpeculationPolicy
from specviz.methods.options import MethodOptions, asset, count, number
from specviz.methods.speculative import speculative_decoding
from specviz.models.disco import DiscoModel, classifier_for, load_disco
from specviz.records import IterationRecord


@dataclass
class ScoredLength:
    """Draft while score(q_i, i) >= threshold, at most `max_length` tokens; keeps the scores for the record."""

    max_length: int  # SL_max
    threshold: float  # tau
    scores: list[float] = field(default_factory=list)  # this iteration's scores, one per drafted token

    def speculation_length(self) -> int:
        self.scores = []
        return self.max_length

    def score(self, i: int, q_i: torch.Tensor) -> float:
        raise NotImplementedError

    def keep_drafting(self, i: int, token: int, q_i: torch.Tensor | None) -> bool:
        if q_i is None:
            return True
        s = self.score(i, q_i)
        self.scores.append(round(s, 4))
        return s >= self.threshold

    def update(self, drafted: int, accepted: int) -> None:
        pass

    def extra(self) -> DiscoExtra | ConfidenceExtra:
        """This iteration's fields for the record's `extra`."""
        raise NotImplementedError


@dataclass
class DiscoLength(ScoredLength):
    model: DiscoModel = field(kw_only=True)  # the classifier and its tuned τ, SL_max

    def score(self, i: int, q_i: torch.Tensor) -> float:
        return self.model.classifier.score(q_i, i)  # C_i = P(x_i accepted)

    def extra(self) -> DiscoExtra:
        # τ and SL_max on every record: a reader (the Race's panel) needs no classifier file to name them
        return DiscoExtra(tuple(self.scores), self.threshold, self.max_length)


@dataclass
class ConfidenceLength(ScoredLength):
    def score(self, i: int, q_i: torch.Tensor) -> float:
        return float(q_i.max())  # the draft's top-1 probability

    def extra(self) -> ConfidenceExtra:
        return ConfidenceExtra(tuple(self.scores))


class ScoredDrafter:
    """A drafter whose drafts carry what `scored` (the run's policy) decided by in the record's `extra`:
    its scores (DISCO's with its τ and SL_max)."""

    def __init__(self, inner: Drafter, scored: ScoredLength) -> None:
        self.inner, self.scored = inner, scored

    def propose(self, k: int, policy: SpeculationPolicy) -> Draft:
        draft = self.inner.propose(k, policy)
        return replace(draft, extra=(*draft.extra, self.scored.extra()))

    def rollback(self, position: int, accepted: int) -> None:
        self.inner.rollback(position, accepted)


@dataclass(frozen=True)
class DiscoOptions(MethodOptions):
    threshold: float | None = number(
        None,
        0.0,
        1.0,
        help="τ: draft while the classifier's P(accepted) is at least this; empty: the value tuned for the pair "
        "(in the classifier's card)",
    )
    max_speculation_length: int | None = count(
        None, limit="speculation_length", help="SL_max: most tokens drafted per iteration; empty: the tuned value"
    )
    classifier: str = asset("", help='path to a classifier .safetensors; "": the pair\'s shipped one')


def chosen_tuned(records: list[IterationRecord], options: dict[str, Any]) -> dict[str, str]:
    """The τ and SL_max a run drafted with where its options left them to the pair's tuned classifier, for
    its panel (a record saved before they were recorded names none)."""
    disco = next((d for r in records if (d := r.extras(DiscoExtra))), None)
    if disco is None:
        return {}
    tuned = {"threshold": disco.disco_threshold, "max_speculation_length": disco.disco_max_speculation_length}
    return {
        name: f"{value} (tuned for this pair, the default)"
        if value is not None
        else "tuned (the default; its value is not in this saved race)"
        for name, value in tuned.items()
        if options.get(name) is None
    }


@register(
    "disco",
    label="DISCO",
    short_label="DISCO",
    description=(
        "A tiny classifier on the draft's distribution decides after each draft token whether to keep drafting."
    ),
    paper="Mamou et al. 2024 (DISCO: dynamic speculation lookahead)",
    options=DiscoOptions,
    family=CHAIN,
    dynamic_length=True,
    in_default_race=True,
    rank=40,
    extras=(DiscoExtra,),
    chosen=chosen_tuned,
)
def disco(dec: Decoding, opts: DiscoOptions) -> Iterator[IterationRecord]:
    model = load_disco(opts.classifier) if opts.classifier else classifier_for(dec.pair.name)
    policy = DiscoLength(
        max_length=opts.max_speculation_length or model.max_speculation_length,
        threshold=model.threshold if opts.threshold is None else opts.threshold,
        model=model,
    )
    return speculative_decoding(dec, ScoredDrafter(ModelDrafter(dec), policy), policy)


@dataclass(frozen=True)
class ConfidenceOptions(MethodOptions):
    threshold: float = number(
        0.4, 0.0, 1.0, help="stop drafting once the draft's top-1 probability is below this (HF's default)"
    )
    max_speculation_length: int = count(
        16,
        limit="speculation_length",
        help="SL_max: most tokens drafted per iteration; the Race's limit of 16, so the default runs there too "
        "(Hugging Face's default cap is 20)",
    )


@register(
    "confidence",
    label="Confidence",
    short_label="Conf.",
    description="Keep drafting while the draft's top-1 probability stays above a threshold (0.4).",
    paper="Hugging Face assisted generation (assistant_confidence_threshold); DISCO's unsupervised variant",
    options=ConfidenceOptions,
    family=CHAIN,
    dynamic_length=True,
    rank=35,
    extras=(ConfidenceExtra,),
)
def confidence(dec: Decoding, opts: ConfidenceOptions) -> Iterator[IterationRecord]:
    policy = ConfidenceLength(max_length=opts.max_speculation_length, threshold=opts.threshold)
    return speculative_decoding(dec, ScoredDrafter(ModelDrafter(dec), policy), policy)
