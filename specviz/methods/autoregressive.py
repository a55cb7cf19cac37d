"""The baseline: the target alone, one forward pass per token."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from specviz.cost.families import TARGET_ALONE
from specviz.decoding import Decoding
from specviz.methods import BASELINE, register
from specviz.methods.options import MethodOptions
from specviz.models.kv import CachedLM
from specviz.records import IterationRecord
from specviz.verify import verify


@dataclass(frozen=True)
class NoOptions(MethodOptions):
    pass


@register(
    BASELINE,
    label="Autoregressive",
    short_label="AR",
    description="The target model alone, one token per forward pass: the baseline every speedup is measured against.",
    paper="the baseline: the target model alone, one token per pass",
    options=NoOptions,
    family=TARGET_ALONE,
    needs_draft=False,
    in_default_race=True,
    hf_peers=("hf_greedy",),
    rank=0,
)
def autoregressive(dec: Decoding, opts: NoOptions) -> Iterator[IterationRecord]:
    target = CachedLM(dec.pair.target)
    while not dec.done:
        t_start = dec.now()
        logits = target.forward(dec.ids[len(target) :])  # [1, V]
        verdict = verify([], logits, None, dec.sampling, dec.generator)
        yield dec.commit(
            drafted=[], verdict=verdict, speculation_length=0, t_start=t_start, t_drafted=t_start, draft_forwards=0
        )
