"""The contract between the engine and everything else: one plain record per speculative iteration.

Every method yields `IterationRecord`s; the UI, plots, benchmark and tests consume nothing else.
Records hold plain Python values only, so `json.dumps(dataclasses.asdict(r))` always works and a
run can be saved, replayed and diffed.

Vocabulary (the papers'): the *draft* proposes `drafted` tokens, the *target* verifies them in one
forward pass and `accepted` of them survive; the step then `emitted` those accepted tokens plus
one token chosen by the target itself (the correction after a rejection, or the bonus token after
a full acceptance). p is the target distribution, q the draft distribution.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class IterationRecord:
    """What one speculative iteration did (autoregressive decoding: one record per token)."""

    method: str  # registry name of the method that produced this record
    iteration: int  # 0-based index of the iteration within the run
    position: int  # tokens in context (prompt + emitted so far) before this step
    speculation_length: int  # how many tokens the method chose to draft (0 for autoregressive)
    drafted: tuple[int, ...]  # proposed token ids (main path for tree methods)
    accepted: int  # how many of `drafted` the target accepted (a prefix of `drafted`)
    emitted: tuple[int, ...]  # tokens appended this step: drafted[:accepted] + the target's own token(s)
    p_target: tuple[float, ...] | None  # p(x) of each drafted token under the target
    q_draft: tuple[float, ...] | None  # q(x) of each drafted token under the draft; None: no distribution
    draft_forwards: int  # forward passes of the draft model in this step
    target_forwards: int  # forward passes of the target model in this step (1 for every method here)
    t_start: float  # seconds since the run started, when the step began
    t_end: float  # seconds since the run started, when the step ended
    draft_ms: float  # wall milliseconds spent drafting
    verify_ms: float  # wall milliseconds spent in the target's verification (incl. acceptance rule)
    oracle_sl: int | None = None  # tokens the draft would have got right from `position` (filled after the run)
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific plain values

    @property
    def rejected(self) -> tuple[int, ...]:
        """Drafted tokens the target turned down (shown struck through in the app)."""
        return self.drafted[self.accepted :]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IterationRecord:
        """Inverse of `to_dict` (JSON turns tuples into lists; this turns them back)."""
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for name in ("drafted", "emitted", "p_target", "q_draft"):
            if kw.get(name) is not None:
                kw[name] = tuple(kw[name])
        return cls(**kw)


@dataclass(frozen=True)
class RunSummary:
    """Totals over one run of one method on one prompt. Metrics are defined in `specviz.metrics`."""

    method: str
    prompt_tokens: int  # length of the prompt in tokens
    new_tokens: int  # tokens generated (EOS included when it was generated)
    iterations: int
    wall_s: float  # seconds from the start of the run to the end of its last step
    drafted: int
    accepted: int
    target_forwards: int
    draft_forwards: int
    stop_reason: str  # "eos" or "max_new_tokens"
    output_ids: tuple[int, ...]  # the generated tokens, prompt excluded

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
