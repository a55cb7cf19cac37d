"""The contract between the engine and everything else: one plain record per speculative iteration.

Every method yields `IterationRecord`s; the UI, plots, benchmark and tests consume nothing else.
Records hold plain Python values and, in `extra`, each method's own fields as typed dataclasses (one
per family, declared in `specviz.extras`, written once by `Decoding.commit`), read through typed
accessors (`record.tree()`, `record.pearl()`, `record.stop`, ...). Dicts exist only on the wire:
`to_dict` writes a record as plain JSON values (`extra` as one flat object, the form saved races and
the benchmark's files have always had), and `from_dict` reads one back, checking a record from a file
field by field.

Vocabulary (the papers'): the *draft* proposes `drafted` tokens, the *target* verifies them in one
forward pass and `accepted` of them survive; the step then `emitted` those accepted tokens plus
one token chosen by the target itself (the correction after a rejection, or the bonus token after
a full acceptance). p is the target distribution, q the draft distribution.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, TypeVar

from specviz import extras
from specviz.errors import SpecvizError
from specviz.extras import MOST_RUN_S, CommitExtra, EngineExtra, PearlExtra, TreeExtra

F = TypeVar("F", bound=extras.Extra)


@dataclass(frozen=True)
class RunBounds:
    """What one run's records must fit in, where it is known (a saved race knows the vocabulary where its
    pair is one this server knows by name: specviz.serving.saved)."""

    method: str | None = None  # the run's method: every record's `method`
    records: int | None = None  # how many records the run has: each `iteration` is below it
    prompt_tokens: int | None = None  # the prompt's length: the first position
    # the run's budget: position + emitted stays within prompt_tokens + max_new_tokens
    max_new_tokens: int | None = None
    vocab_size: int | None = None  # token ids are below it
    families: tuple[type, ...] = extras.FAMILIES  # the extra families the method writes (specviz.extras)


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
    extra: tuple[extras.Extra, ...] = ()  # the method's own fields: one family each (specviz.extras)

    @property
    def rejected(self) -> tuple[int, ...]:
        """Drafted tokens the target turned down (shown struck through in the app)."""
        return self.drafted[self.accepted :]

    @property
    def drafted_count(self) -> int:
        """Tokens drafted in this iteration: `drafted`, and the rejected drafts of an outside engine, which it
        counts but does not name (`EngineExtra.unreported`)."""
        engine = self.extras(EngineExtra)
        return len(self.drafted) + (engine.unreported if engine is not None else 0)

    def to_dict(self) -> dict[str, Any]:
        """The record as plain values (the tuples themselves: immutable, and `asdict`'s copy of every one
        cost a 16 MB saved race's download seconds), `extra` as one object of the families' fields."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["extra"] = {key: value for family in self.extra for key, value in family.to_extra().items()}
        return out

    def extras(self, family: type[F]) -> F | None:
        """This record's fields of one family of `specviz.extras` (None: it has none)."""
        return next((e for e in self.extra if type(e) is family), None)

    def tree(self) -> TreeExtra | None:
        """The tree a tree method verified in this iteration (SSSD, Speculative Streaming)."""
        return self.extras(TreeExtra)

    def pearl(self) -> PearlExtra | None:
        """PEARL's mode and rounds in this iteration."""
        return self.extras(PearlExtra)

    @property
    def stop(self) -> str | None:
        """Why the run ended at this iteration ("eos" or "max_new_tokens"); None before its last."""
        return self._commit().stop

    @property
    def uniforms(self) -> tuple[float, ...] | None:
        """Sampling: the u each kept draft was tested with (u < min(1, p/q) accepts); None under greedy decoding."""
        return self._commit().u

    def _commit(self) -> CommitExtra:
        """The fields `Decoding.commit` writes: every record has them (CommitExtra has no required field)."""
        commit = self.extras(CommitExtra)
        assert commit is not None  # `extras.of` returns None only when a required field is missing
        return commit

    @classmethod
    def from_dict(cls, d: Any, bounds: RunBounds = RunBounds(), where: str = "a record") -> IterationRecord:
        """Inverse of `to_dict` (JSON turns tuples into lists; this turns them back), checking every
        field against its type and `bounds`: a record from a file is a SpecvizError naming the field
        ("{where}: ..."), never an exception further on."""
        if not isinstance(d, Mapping):
            raise SpecvizError(f"{where} is not an object")
        try:
            r = cls(**_fields_of(d))
            _check(r, bounds)
            wire = d.get("extra", {})
            extras.checked(wire, r, bounds.families, bounds.vocab_size)
        except SpecvizError as e:
            raise SpecvizError(f"{where}: {e}") from None
        return replace(r, extra=extras.parse(wire, bounds.families))


def _fields_of(d: Mapping[str, Any]) -> dict[str, Any]:
    """The record's fields of `d`, each of its type (tuples for lists) and within int64."""
    types_ = extras.hints(IterationRecord)
    out = {}
    for f in fields(IterationRecord):
        if f.name == "extra" or (f.name not in d and f.default is None):
            continue
        if f.name not in d:
            raise SpecvizError(f"'{f.name}' is missing")
        out[f.name] = extras.typed(d[f.name], types_[f.name], f"'{f.name}'")
    return out


def _check(r: IterationRecord, b: RunBounds) -> None:
    """What the fields' types do not say: the run's bounds, and the fields' agreement with each other."""
    k = len(r.drafted)
    room = None if b.prompt_tokens is None or b.max_new_tokens is None else b.prompt_tokens + b.max_new_tokens
    problems = {
        "belongs to another method": b.method is not None and r.method != b.method,
        f"'iteration' must be below the run's {b.records} records": b.records is not None and r.iteration >= b.records,
        f"'position' must be at least the prompt's {b.prompt_tokens} tokens": b.prompt_tokens is not None
        and r.position < b.prompt_tokens,
        f"'position' and 'emitted' go past the prompt and max_new_tokens ({room} tokens)": room is not None
        and r.position + len(r.emitted) > room,
        "accepts more tokens than it drafted": r.accepted > k,
        "'drafted' holds more tokens than 'speculation_length'": k > r.speculation_length,
        "'emitted' must be the accepted drafts and at most one token of the target's own": r.emitted[: r.accepted]
        != r.drafted[: r.accepted]
        or not r.accepted <= len(r.emitted) <= r.accepted + 1,
        f"token ids in 'drafted' and 'emitted' must be below the vocabulary's size ({b.vocab_size})": b.vocab_size
        is not None
        and any(t >= b.vocab_size for t in (*r.drafted, *r.emitted)),
        "'p_target' and 'q_draft' must be null or hold one probability (0 to 1) per drafted token": any(
            x is not None and (len(x) != k or not all(0.0 <= v <= 1.0 + 1e-6 for v in x))
            for x in (r.p_target, r.q_draft)
        ),
        f"'oracle_sl' must be at most max_new_tokens ({b.max_new_tokens})": r.oracle_sl is not None
        and b.max_new_tokens is not None
        and r.oracle_sl > b.max_new_tokens,
        "'t_start', 'draft_ms' and 'verify_ms' must not be negative": min(r.t_start, r.draft_ms, r.verify_ms) < 0,
        "'t_end' must not come before 't_start'": r.t_end < r.t_start,
        f"'t_end', 'draft_ms' and 'verify_ms' must be within a day ({MOST_RUN_S:.0f} s) of the run's start": max(
            r.t_end, r.draft_ms / 1e3, r.verify_ms / 1e3
        )
        > MOST_RUN_S,
    }
    problem = next((p for p, bad in problems.items() if bad), None)
    if problem:
        raise SpecvizError(problem)


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
