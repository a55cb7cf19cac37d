"""ORACLE: the speculation length an all-knowing policy would choose (DISCO's upper bound).

Before the run it decodes the target greedily (the continuation every lossless greedy method must
reproduce) and, in one teacher-forced pass of the draft, finds how many tokens the draft would get
right from each position (`specviz.oracle`). Each iteration then drafts exactly that many tokens:
all are accepted and the target adds one, so no draft token is ever wasted. It peeks at the answer,
so it is an upper bound, never a real method; the look-ahead is done before the clock starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from specviz.cost.families import CHAIN
from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.methods import get_method, register
from specviz.methods.drafting import ModelDrafter, StaticLength
from specviz.methods.options import MethodOptions
from specviz.methods.speculative import speculative_decoding
from specviz.oracle import draft_agreement_runs
from specviz.records import IterationRecord


@dataclass(frozen=True)
class OracleOptions(MethodOptions):
    pass


def greedy_continuation(dec: Decoding) -> list[int]:
    """prompt + the target's greedy output under the same budget and EOS rule (an untimed side run)."""
    side = Decoding(dec.pair, dec.ids, "autoregressive", dec.max_new_tokens, dec.sampling, seed=0)
    for _ in get_method("autoregressive").generate(side, None):
        pass
    return side.ids


@dataclass
class OracleLength(StaticLength):
    """gamma = runs[position - start]: the draft's run of correct guesses from here on."""

    dec: Decoding = field(kw_only=True)
    runs: np.ndarray = field(kw_only=True)  # runs[j] = draft hits in a row from position start + j
    start: int = field(kw_only=True)

    def speculation_length(self) -> int:
        j = len(self.dec.ids) - self.start
        return int(self.runs[j]) if 0 <= j < len(self.runs) else 0

    def keep_drafting(self, i: int, token: int, q_i: torch.Tensor | None) -> bool:
        return True


@register(
    "oracle",
    label="Oracle SL (upper bound)",
    short_label="Oracle",
    description=(
        "ORACLE, not a real method: peeks at the target's greedy output and drafts exactly as many tokens as will be"
        " accepted."
    ),
    paper="Mamou et al. 2024 (DISCO's oracle speculation length)",
    options=OracleOptions,
    family=CHAIN,
    dynamic_length=True,
    is_oracle=True,
    supports_sampling=False,
    rank=90,
)
def oracle(dec: Decoding, opts: OracleOptions) -> Iterator[IterationRecord]:
    if not dec.sampling.greedy:
        raise SpecvizError("the oracle peeks at the target's greedy output: run it with temperature 0")
    start = len(dec.ids)
    sequence = greedy_continuation(dec)  # before the first step: dec's clock has not started yet
    runs = draft_agreement_runs(dec.pair.draft_model, sequence, start) if len(sequence) > start else np.zeros(0, int)
    policy = OracleLength(gamma=0, dec=dec, runs=runs, start=start)
    yield from speculative_decoding(dec, ModelDrafter(dec), policy)
