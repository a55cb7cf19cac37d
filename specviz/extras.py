"""The fields a method adds to its records' `extra`, declared: one frozen dataclass per family.

`IterationRecord.extra` holds these dataclasses, one per family the record has; on the wire (saved
races, the benchmark's files: `IterationRecord.to_dict`) it is one flat object of their fields.
These classes say which keys it may hold, what each means and its type: `record.tree()` is the
record's tree, or None when it has none.

- Every record carries `CommitExtra`, the keys `Decoding.commit` writes itself; a method declares
  its own families in its registry entry, `register(..., extras=(TreeExtra,))`, and the tests check
  that its records hold exactly those keys.
- A field without a default is written on every record of its family; a field with one (None) only
  on some (`stop` on a run's last record, PEARL's `dropped` in pre-verify).
- On the wire a tuple is a JSON list and a nested dataclass (`Phase`) a JSON object; a family's
  `to_extra()` writes that form, `of()` reads it back, checking every value (`SpecvizError` naming
  the field), `checked()` is what a record from a file goes through and `parse()` makes its families.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NewType, TypeVar

from specviz.errors import SpecvizError

INT64_MAX = 2**63 - 1  # every whole number of a record fits int64 (the plots' tables hold them as int64)
# A run's times (seconds since it started) fall within a day: one prompt's run takes seconds to minutes, and a
# time of 1e308 s, valid as a float, overflowed the plots' axes and the replay's clock (issue 53)
MOST_RUN_S = 24 * 3600.0
TokenId = NewType("TokenId", int)  # a token id: 0 <= id < the vocabulary's size (when known)
Parent = NewType("Parent", int)  # a tree node's parent: -1 (the committed context) or an earlier node
SCALARS = (bool, str, float, int, TokenId, Parent)
STOPS = ("eos", "max_new_tokens")
PEARL_MODES = ("pre-verify", "post-verify", "verify")  # the phase a PEARL record comes from
PHASE_MODES = (*PEARL_MODES, "draft")  # a round's mode ("draft": the draft alone, the ablation without pre-verify)


@dataclass(frozen=True)
class Extra:
    """What every family shares: its wire form, and the checks a value's type cannot express."""

    def to_extra(self) -> dict[str, Any]:
        """The plain JSON form of these fields (`IterationRecord.to_dict`'s `extra`); fields left at None are
        not written."""
        return {
            f.name: _wire(getattr(self, f.name)) for f in dataclasses.fields(self) if getattr(self, f.name) is not None
        }

    def check(self, record: Any) -> str | None:
        """What is wrong with these fields on `record` (an IterationRecord), or None."""
        return None


@dataclass(frozen=True)
class CommitExtra(Extra):
    """What `Decoding.commit` adds to every record."""

    # sampling: the uniform each kept draft was tested with (u < min(1, p/q) accepts)
    u: tuple[float, ...] | None = None
    stop: str | None = None  # why the run ended here, on its last record: "eos" or "max_new_tokens"

    def check(self, record: Any) -> str | None:
        if self.u is not None and (len(self.u) != len(record.drafted) or not all(0.0 <= u <= 1.0 for u in self.u)):
            return "extra 'u' must hold one number from 0 to 1 per drafted token"
        if self.stop is not None and self.stop not in STOPS:
            return f"extra 'stop' must be {' or '.join(STOPS)}"
        return None


@dataclass(frozen=True)
class TreeExtra(Extra):
    """The verification tree of a tree method (SSSD, Speculative Streaming: `methods.trees`); nodes
    are listed parents first, and the record's `drafted` is the tree's main path."""

    tree_tokens: tuple[TokenId, ...]  # the token of each node
    tree_parents: tuple[Parent, ...]  # each node's parent: -1 for a child of the committed context
    # each node's drafting score (SSSD: fused n-gram probability; streams: product of probabilities)
    tree_scores: tuple[float, ...]
    tree_sources: tuple[str, ...]  # where each node came from ("input", "datastore", "stream 2", ...)
    accepted_path: tuple[int, ...]  # the nodes the target accepted, from the root down
    sources: tuple[str, ...]  # the source of each token on the main path (before a cut at EOS or the budget)
    batch_size: int | None = None  # SSSD's static batch (`sssd.decode_batch`): sequences verified in the same forward

    def check(self, record: Any) -> str | None:
        n = len(self.tree_tokens)
        if (
            not len(self.tree_parents)
            == len(self.tree_scores)
            == len(self.tree_sources)
            == n
            == record.speculation_length
        ):
            return (
                "extra 'tree_tokens', 'tree_parents', 'tree_scores' and 'tree_sources' must each hold"
                " one value per tree node (speculation_length)"
            )
        if not all(-1 <= p < i for i, p in enumerate(self.tree_parents)):
            return "extra 'tree_parents' must name -1 or an earlier node for each node"
        if any(
            node >= n or self.tree_parents[node] != parent
            for parent, node in itertools.pairwise((-1, *self.accepted_path))
        ):
            return "extra 'accepted_path' must be a path of the tree from its root"
        if len(self.sources) > n:
            return "extra 'sources' has more entries than the tree has nodes"
        return None


@dataclass(frozen=True)
class StreamingPassExtra(Extra):
    """The shape of Speculative Streaming's one target pass (`methods.streaming`, fused layout; the
    two-pass build leaves it unset): what the pass figure draws, so a saved run needs no model to draw it.
    The pass's rows: m committed-token rows and the tree's nodes through all N layers, then in the top
    N_s layers γ stream rows for each candidate node (the last committed token and each tree node)."""

    layers: int  # N: the target's decoder layers (every main row runs through all of them)
    stream_layers: int  # N_s: the top layers where the stream rows run (multi-stream attention)
    gamma: int  # γ: stream rows each candidate node carried in this pass (the streams in use; 0: none ran)
    committed_rows: int  # m: main rows of committed tokens not yet cached (the prompt in the first pass)
    prune_layer: int | None = None  # where the tree-pruning layer dropped nodes (after this many layers)
    pruned: tuple[int, ...] | None = None  # the tree's nodes it dropped (they ran no layer above it, no stream)

    def check(self, record: Any) -> str | None:
        if not 1 <= self.stream_layers <= self.layers:
            return "extra 'stream_layers' must be from 1 to 'layers'"
        if self.committed_rows < 1:
            return "extra 'committed_rows' must be at least 1"
        if (self.pruned is None) != (self.prune_layer is None):
            return "extra 'pruned' and 'prune_layer' go together"
        if self.prune_layer is not None and not 1 <= self.prune_layer <= self.layers - self.stream_layers:
            return "extra 'prune_layer' must be below the stream layers"
        return None


@dataclass(frozen=True)
class Phase:
    """One round of a PEARL record: what ran, when, and whether the two models ran at once."""

    mode: str  # "pre-verify", "post-verify", "verify" (no drafting ahead) or "draft" (the draft alone)
    start: float  # seconds since the run started
    end: float
    parallel: bool  # the draft's and the target's jobs ran at the same time (threads / CUDA streams)


@dataclass(frozen=True)
class PearlExtra(Extra):
    """PEARL's rounds since the previous record (`methods.pearl`): the timeline draws them pass by pass."""

    mode: str  # the phase this record comes from: "pre-verify", "post-verify" or "verify"
    window: int  # γ: tokens per drafting phase
    parallel_threads: tuple[int, int]  # CPU threads of the draft's job and of the target's
    draft_intervals: tuple[tuple[float, float], ...]  # (start, end) seconds of each draft forward pass
    target_intervals: tuple[tuple[float, float], ...]  # the same for the target
    phases: tuple[Phase, ...]  # the rounds, in order
    ideal_s: float  # seconds the record would take with each round's shorter job hidden behind the longer one
    # pre-verify: the drafts dropped after the first one (none when it was accepted)
    dropped: tuple[TokenId, ...] | None = None
    drafted_ahead: tuple[TokenId, ...] | None = None  # post-verify: the drafts past the pending ones
    ahead_kept: bool | None = None  # post-verify: every pending draft was accepted, so the drafts ahead stand

    def check(self, record: Any) -> str | None:
        if self.mode not in PEARL_MODES:
            return f"extra 'mode' must be {', '.join(PEARL_MODES)}"
        if any(p.mode not in PHASE_MODES for p in self.phases):
            return f"extra 'phases' must have the modes {', '.join(PHASE_MODES)}"
        spans = [*self.draft_intervals, *self.target_intervals, *((p.start, p.end) for p in self.phases)]
        if not all(0.0 <= start <= end <= MOST_RUN_S for start, end in spans):
            return (
                "extra 'draft_intervals', 'target_intervals' and 'phases' must each start before they end,"
                f" at 0 s or later and within a day ({MOST_RUN_S:.0f} s)"
            )
        if not 0.0 <= self.ideal_s <= MOST_RUN_S:
            return f"extra 'ideal_s' must be from 0 to a day ({MOST_RUN_S:.0f} s)"
        return None


@dataclass(frozen=True)
class OnlineExtra(Extra):
    """Online speculative decoding's learner (`methods.osd`, when the run has one)."""

    draft_version: int  # updates the online draft had had when this request began


@dataclass(frozen=True)
class NgramExtra(Extra):
    """Prompt lookup's match (`methods.prompt_lookup`)."""

    ngram: int  # n of the suffix whose earlier occurrence the drafts were copied from (0: none matched)


@dataclass(frozen=True)
class DiscoExtra(Extra):
    """DISCO's classifier (`methods.disco`)."""

    disco_scores: tuple[float, ...]  # C_i = P(x_i accepted) after each drafted token; drafting stopped below τ
    # τ and SL_max the run drafted with (the classifier's tuned values unless its options set them), so a reader
    # needs no classifier file; None on records saved before they were recorded
    disco_threshold: float | None = None  # τ
    disco_max_speculation_length: int | None = None  # SL_max

    def check(self, record: Any) -> str | None:
        if self.disco_threshold is not None and not 0.0 <= self.disco_threshold <= 1.0:
            return "extra 'disco_threshold' must be a number from 0 to 1"
        if self.disco_max_speculation_length is not None and self.disco_max_speculation_length < 1:
            return "extra 'disco_max_speculation_length' must be at least 1"
        return None


@dataclass(frozen=True)
class ConfidenceExtra(Extra):
    """Hugging Face's confidence rule (`methods.disco`)."""

    # the draft's top-1 probability after each drafted token; drafting stopped below the threshold
    confidence_scores: tuple[float, ...]


@dataclass(frozen=True)
class EngineExtra(Extra):
    """A step of an inference engine that specviz drives from outside (`methods.vllm`): what its API
    reports, and what it does not."""

    # drafts the engine drafted and rejected this step: it reports how many, never which ids ('drafted' holds
    # the accepted ones only)
    unreported: int
    # engine steps whose tokens arrived in the same network chunk as this one (1: the step was timed alone;
    # more: the chunk's time is shared out evenly among them)
    steps_in_chunk: int = 1
    # False: a one-token step that the engine's per-step counts cannot place for certain (a step that
    # drafted nothing and one whose every draft was rejected both emit one token)
    placed: bool = True

    def check(self, record: Any) -> str | None:
        if self.unreported < 0 or self.steps_in_chunk < 1:
            return "extra 'unreported' must be at least 0 and 'steps_in_chunk' at least 1"
        if record.accepted + self.unreported > record.speculation_length:
            return "extra 'unreported' and the accepted drafts exceed 'speculation_length'"
        return None


FAMILIES: tuple[type[Extra], ...] = (
    CommitExtra,
    TreeExtra,
    StreamingPassExtra,
    PearlExtra,
    OnlineExtra,
    NgramExtra,
    DiscoExtra,
    ConfidenceExtra,
    EngineExtra,
)
F = TypeVar("F", bound=Extra)


@functools.cache
def keys(families: tuple[type[Extra], ...]) -> frozenset[str]:
    """Every key the families may write."""
    return frozenset(f.name for family in families for f in dataclasses.fields(family))


def required(family: type) -> frozenset[str]:
    """The keys a family (a dataclass of this module) writes on every record it is on."""
    return _required(family)


# `required` and `hints` hand their class to the caches as a plain `type`: mypy does not see a
# `type[X]` as Hashable, which functools.cache asks of its arguments (python/mypy#11470).
@functools.cache
def _required(family: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(family) if f.default is dataclasses.MISSING)


def of(extra: Mapping[str, Any], family: type[F], vocab_size: int | None = None) -> F | None:
    """`family`'s fields of a record's `extra`, typed; None when a field it always writes is missing.
    A value of the wrong type is a SpecvizError naming its field."""
    if not required(family) <= extra.keys():
        return None
    types_ = hints(family)
    return family(
        **{name: typed(extra[name], tp, f"extra '{name}'", vocab_size) for name, tp in types_.items() if name in extra}
    )


def in_order(found: Sequence[Extra]) -> tuple[Extra, ...]:
    """A record's families in FAMILIES' order (what `parse` gives, so that a record read back equals
    the one written), each at most once."""
    ordered = tuple(sorted(found, key=lambda e: FAMILIES.index(type(e))))
    if len({type(e) for e in ordered}) < len(ordered):
        raise ValueError(f"a record holds one of each family of extras, got {[type(e).__name__ for e in ordered]}")
    return ordered


def parse(extra: Mapping[str, Any], families: tuple[type[Extra], ...] = FAMILIES) -> tuple[Extra, ...]:
    """The families whose fields `extra` (the wire form, `checked` already) holds, typed; every record
    has a CommitExtra, whose fields are all optional."""
    found = []
    for family in families:
        if family is CommitExtra or extra.keys() & keys((family,)):
            view = of(extra, family)
            if view is not None:
                found.append(view)
    return tuple(found)


def checked(
    extra: Any, record: Any, families: tuple[type[Extra], ...] = FAMILIES, vocab_size: int | None = None
) -> None:
    """Raise a SpecvizError (naming the field) unless `extra` holds only the families' keys, each
    family whole, every value of its type and consistent with `record` (an IterationRecord)."""
    if not isinstance(extra, Mapping):
        raise SpecvizError("'extra' must be an object")
    allowed = keys(families)
    unknown = next((str(k) for k in extra if k not in allowed), None)
    if unknown is not None:
        raise SpecvizError(f"extra '{unknown[:40]}' is not a field this method writes")
    for family in families:
        present = extra.keys() & keys((family,))
        missing = sorted(required(family) - present)
        if present and missing:
            raise SpecvizError(f"extra '{missing[0]}' is missing (it comes with '{sorted(present)[0]}')")
        view = of(extra, family, vocab_size) if present else None
        problem = view.check(record) if view is not None else None
        if problem:
            raise SpecvizError(problem)


def typed(value: Any, tp: Any, name: str, vocab_size: int | None = None) -> Any:
    """`value` (plain JSON) as the type `tp` says (tuples for lists, dataclasses for objects), or a
    SpecvizError: "{name} must be <what tp is, in words>"."""
    try:
        return _typed(value, tp, vocab_size)
    except _Mismatch:
        raise SpecvizError(f"{name} must be {words(tp, vocab_size)}") from None


class _Mismatch(Exception):
    pass


def _typed(value: Any, tp: Any, vocab_size: int | None) -> Any:
    origin, args = _parts(tp)
    if origin in (typing.Union, types.UnionType):  # X | None
        return None if value is None else _typed(value, next(a for a in args if a is not type(None)), vocab_size)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or (args[-1] is not Ellipsis and len(value) != len(args)):
            raise _Mismatch
        if (
            args[-1] is Ellipsis and args[0] in SCALARS
        ):  # the common case, a list of numbers: no type to unpack per item
            return tuple(_scalar(v, args[0], vocab_size) for v in value)
        items = args[:1] * len(value) if args[-1] is Ellipsis else args
        return tuple(_typed(v, a, vocab_size) for v, a in zip(value, items, strict=True))  # len checked above
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        types_ = hints(tp)
        if not isinstance(value, Mapping) or value.keys() != types_.keys():
            raise _Mismatch
        return tp(**{k: _typed(value[k], t, vocab_size) for k, t in types_.items()})
    return _scalar(value, tp, vocab_size)


@functools.cache
def _parts(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """(origin, args) of a field's type, found once per type (a saved race's checks asked ~10^6 times)."""
    return typing.get_origin(tp), typing.get_args(tp)


def _scalar(value: Any, tp: Any, vocab_size: int | None) -> Any:
    if tp in (bool, str):
        if isinstance(value, tp):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    elif isinstance(value, int) and not isinstance(value, bool):  # int, TokenId, Parent
        most = vocab_size - 1 if tp is TokenId and vocab_size else INT64_MAX
        if (-1 if tp is Parent else 0) <= value <= most:
            return value
    raise _Mismatch


def words(tp: Any, vocab_size: int | None = None) -> str:
    """A type as a message says it: 'a list, each a token id (a whole number from 0 to 2**63 - 1)'."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return f"null or {words(next(a for a in args if a is not type(None)), vocab_size)}"
    if origin is tuple:
        if args[-1] is Ellipsis:
            return f"a list, each {words(args[0], vocab_size)}"
        return f"a list of {len(args)}: {', '.join(words(a, vocab_size) for a in args)}"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"an object with {', '.join(hints(tp))}"
    most = f"{vocab_size - 1}" if tp is TokenId and vocab_size else "2**63 - 1"
    return {
        bool: "true or false",
        str: "text",
        float: "a finite number",
        TokenId: f"a token id (a whole number from 0 to {most})",
        Parent: "a node index (a whole number, -1 for the root)",
    }.get(tp, "a whole number from 0 to 2**63 - 1")


def hints(cls: type) -> dict[str, Any]:
    """The field types of a dataclass (resolved once)."""
    return _hints(cls)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _wire(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_wire(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: _wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value
