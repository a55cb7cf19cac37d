"""Speculative decoding with a draft model: static (vanilla) and Hugging Face's heuristic length.

Leviathan et al. 2023 (Algorithm 1) and Chen et al. 2023: the draft proposes gamma tokens, the
target scores all of them in one forward pass, the acceptance rule in `specviz.verify` keeps a
prefix and adds one token of the target's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from specviz.cost.families import CHAIN
from specviz.decoding import Decoding
from specviz.extras import Extra
from specviz.methods import register
from specviz.methods.drafting import Drafter, HeuristicLength, ModelDrafter, SpeculationPolicy, StaticLength, Updater
from specviz.methods.options import MethodOptions, count
from specviz.models.kv import CachedLM
from specviz.records import IterationRecord
from specviz.verify import verify


@dataclass(frozen=True)
class SpeculativeOptions(MethodOptions):
    speculation_length: int = count(
        4, limit="speculation_length", help="γ: tokens drafted per iteration, the same in each"
    )


@dataclass(frozen=True)
class HeuristicOptions(SpeculativeOptions):
    speculation_length: int = count(
        4,
        limit="speculation_length",
        help="γ of the first iteration; then 2 more after a full acceptance, 1 fewer (at least 1) otherwise",
    )


def speculative_decoding(
    dec: Decoding,
    drafter: Drafter,
    policy: SpeculationPolicy,
    updater: Updater | None = None,
    extra: Sequence[Extra] = (),
) -> Iterator[IterationRecord]:
    """Draft, verify, update: exactly one target forward pass per iteration. `extra`: fields every record
    of the run carries beside its draft's (`specviz.extras`: OSD's draft version)."""
    target = CachedLM(dec.pair.target)
    while not dec.done:
        t_start = dec.now()
        draft = drafter.propose(min(policy.speculation_length(), dec.remaining - 1), policy)
        t_drafted = dec.now()
        k = len(draft.tokens)
        logits = target.forward(dec.ids[len(target) :] + draft.tokens, n_logits=k + 1)  # [k+1, V]
        verdict = verify(draft.tokens, logits, draft.q, dec.sampling, dec.generator)
        position = len(dec.ids)
        record = dec.commit(
            drafted=draft.tokens,
            verdict=verdict,
            speculation_length=k,
            t_start=t_start,
            t_drafted=t_drafted,
            draft_forwards=draft.forwards,
            extra=(*draft.extra, *extra),
        )
        target.truncate(position + verdict.accepted)  # keep the prefix and the accepted drafts
        drafter.rollback(position, verdict.accepted)
        policy.update(k, verdict.accepted)
        if updater is not None:
            updater.observe(record, logits)
        yield record


@register(
    "vanilla",
    label="Vanilla SD",
    short_label="Vanilla",
    description="A draft model proposes a fixed number of tokens, the target verifies them in one pass.",
    paper="Leviathan et al. 2023; Chen et al. 2023",
    options=SpeculativeOptions,
    family=CHAIN,
    in_default_race=True,
    hf_peers=("hf_assisted", "hf_assisted_default"),
    rank=10,
)
def vanilla(dec: Decoding, opts: SpeculativeOptions) -> Iterator[IterationRecord]:
    return speculative_decoding(dec, ModelDrafter(dec), StaticLength(opts.speculation_length))


@register(
    "heuristic",
    label="Dynamic (heuristic)",
    short_label="Dynamic",
    description="Hugging Face's schedule: draft 2 more tokens after a full acceptance, 1 fewer otherwise.",
    paper="Hugging Face assisted generation; DISCO's dynHeur baseline",
    options=HeuristicOptions,
    family=CHAIN,
    dynamic_length=True,
    hf_peers=("hf_assisted_heuristic",),
    rank=20,
)
def heuristic(dec: Decoding, opts: HeuristicOptions) -> Iterator[IterationRecord]:
    return speculative_decoding(dec, ModelDrafter(dec), HeuristicLength(opts.speculation_length))
