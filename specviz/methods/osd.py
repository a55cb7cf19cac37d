"""Online Speculative Decoding (Liu et al. 2023, Algorithm 1): vanilla speculative decoding whose
draft keeps learning from the target's distributions on the requests it serves.

The learner lives across requests: it is the method's session (`run(..., session=learner)`), made
once per series with `new_session` (per visitor in the app, per variant in the benchmark), so one
user's adaptation never changes another's draft. Without a session a run has nothing to carry its
lessons to: it is vanilla SD.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.cost.families import CHAIN
from specviz.decoding import Decoding
from specviz.errors import SpecvizError
from specviz.extras import OnlineExtra
from specviz.methods import register
from specviz.methods.drafting import ModelDrafter, StaticLength
from specviz.methods.options import MethodOptions, count
from specviz.methods.speculative import speculative_decoding
from specviz.records import IterationRecord

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair


@dataclass(frozen=True)
class OsdOptions(MethodOptions):
    speculation_length: int = count(4, limit="speculation_length", help="γ: tokens drafted per iteration")


def osd_session(pair: ModelPair) -> Any:
    """One learner for a series of requests, starting from the pair's draft."""
    from specviz.osd.learner import OnlineLearner

    assert pair.draft is not None, "OSD learns from the pair's draft (the runner refuses a pair without one)"
    return OnlineLearner(pair.draft)


@register(
    "osd",
    label="Online SD",
    short_label="OSD",
    description=(
        "Vanilla SD whose draft is distilled online, every few requests, on the target's distributions where it was"
        " wrong."
    ),
    paper="Liu et al. 2023, Online Speculative Decoding",
    options=OsdOptions,
    family=CHAIN,
    in_default_race=True,
    rank=15,
    session=osd_session,
    extras=(OnlineExtra,),
)
def osd(dec: Decoding, opts: OsdOptions) -> Iterator[IterationRecord]:
    from specviz.osd.learner import OnlineLearner

    if dec.session is not None and not isinstance(dec.session, OnlineLearner):  # checked before the first step
        raise SpecvizError(
            f"osd's session must be an OnlineLearner (from new_session), got {type(dec.session).__name__}"
        )
    return online_decoding(dec, opts, dec.session)


def online_decoding(dec: Decoding, opts: OsdOptions, learner: Any) -> Iterator[IterationRecord]:
    """Algorithm 1 for one request: serve with the learner's draft, fill R, hand it to the learner."""
    if learner is None:  # a lone request: nothing to learn for
        yield from speculative_decoding(dec, ModelDrafter(dec), StaticLength(opts.speculation_length))
        return
    draft = learner.begin_request()  # fixed for this whole request
    version = learner.version
    buffer = learner.request_buffer()  # R: filled by the loop after each verification
    tag = (OnlineExtra(draft_version=version),)  # every record says which draft served it
    policy = StaticLength(opts.speculation_length)
    yield from speculative_decoding(dec, ModelDrafter(dec, draft), policy, updater=buffer, extra=tag)
    learner.end_request(buffer, dec.ids)  # R -> Q; every I requests: update the draft
