"""The method registry. Each module in this package registers its methods with `@register`;
every module here is imported on first use, so a new method file shows up everywhere (the app's
checkboxes, the benchmark's --methods all, the parity tests) without further changes.

A method describes itself here, so that nothing outside this package names one (a lab tab of one
paper, whose rows are that paper's, aside): its family (and with it the formula that explains its
speed, `specviz.cost.families`), whether its speculation length is dynamic, whether it drafts with the
pair's draft model as loaded, whether the Race tab ticks it at first, which Hugging Face setups it is
compared with (`specviz.peers`), and what its panel says of the values it chose itself or of a run
that drafted nothing."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.extras import CommitExtra

if TYPE_CHECKING:
    from specviz.cost.from_records import Family
    from specviz.models.pair import ModelPair

BASELINE = "autoregressive"  # the target alone: every speedup divides by its tokens/s, every greedy output
#                               must equal its output


@dataclass(frozen=True)
class MethodSpec:
    name: str  # registry key, e.g. "vanilla"
    label: str  # short human name for tables and panels
    description: str  # one sentence: what it does
    paper: str  # where it comes from
    options: type  # dataclass of the method's own options (with defaults)
    generate: Callable[..., Iterator[Any]]  # (Decoding, options) -> Iterator[IterationRecord]
    family: Family  # how it drafts and verifies, and the formula that explains its speed:
    #                 specviz.cost.families.CHAIN, TREE, ...
    # a name short enough for a phone's summary column (~65 px, at most ~7 characters a word); "": the label
    short_label: str = ""
    needs_draft: bool = True  # the pair must have a draft model (it drafts with it, or with a copy that learns)
    # its speculation length changes as it goes (a policy, or PEARL's phases); False: a fixed γ
    dynamic_length: bool = False
    in_default_race: bool = False  # ticked when the Race tab opens (the baseline and one method per paper)
    hf_peers: tuple[str, ...] = ()  # the Hugging Face generate() setups it is compared with (specviz.peers)
    is_oracle: bool = False  # peeks at the target's continuation: an upper bound, not a real method
    rank: int = 50  # display order in tables and the app (baseline first, oracles last)
    supports_sampling: bool = True  # False: greedy only (e.g. an oracle that peeks at greedy output)
    # "" : lossless against the target's own output (distribution); else the model it is lossless
    # against, or a function (pair, options) -> that text ("" when, for this pair and options, it is the target)
    lossless_against: str | Callable[[Any, dict[str, Any]], str] = ""
    # (pair) -> the state a series of runs shares, for methods that carry it from one request to the
    # next (OSD's online learner), passed to each run as `run(..., session=)`. The app and the
    # benchmark call it (`new_session`) once per series.
    session: Callable[[Any], Any] | None = None
    # the families of extra fields its records carry besides Decoding.commit's (specviz.extras), e.g. (TreeExtra,)
    extras: tuple[type, ...] = ()
    # "": specviz's own decoding, in this process; else the name of the outside engine that decodes it, in a server
    # of its own ("vLLM": specviz.engines.vllm), whose records say what that engine does not report (EngineExtra)
    engine: str = ""
    # (pair, prompt_ids, options, progress) -> None: what must be ready before a run and may take minutes (a vLLM
    # row's server), each stage said as progress(line); the Race and the bench call it before the run's clock starts
    prepare: Callable[..., None] | None = None
    # (records, options with defaults) -> option -> what a run chose itself for an option it left to the method
    # (PEARL's window 0, DISCO's tuned τ), which its panel shows instead of the option's value
    chosen: Callable[[Sequence[Any], Mapping[str, Any]], dict[str, str]] | None = None
    # why a run of it may draft nothing at all, which its panel says when one did ("": no reason worth naming)
    drafts_nothing_when: str = ""

    def __post_init__(self) -> None:
        if not self.short_label:
            object.__setattr__(self, "short_label", self.label)

    @property
    def drafts_with_pair_draft(self) -> bool:
        """Its q is the pair's draft model as loaded (the step-through reruns it); not a learner's copy (OSD)."""
        return self.needs_draft and self.session is None and not self.engine

    def extra_families(self) -> tuple[type, ...]:
        """Every family of extra fields its records may carry: Decoding.commit's, then its own."""
        return (CommitExtra, *self.extras)

    def option_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.options)]

    def make_options(self, **values: Any) -> Any:
        unknown = sorted(set(values) - set(self.option_names()))
        if unknown:
            known = ", ".join(self.option_names()) or "none"
            raise SpecvizError(f"method '{self.name}' has no option {', '.join(unknown)} (its options: {known})")
        return self.options(**values)

    def lossless_note(self, pair: ModelPair, options: dict[str, Any]) -> str:
        """The model a run with these options is lossless against, when it is not the pair's target ("" when it is)."""
        f = self.lossless_against
        return f(pair, self.select(options)) if callable(f) else f

    def select(self, values: dict[str, Any]) -> dict[str, Any]:
        """The subset of a shared option dict that this method understands (for the app and bench)."""
        return {k: v for k, v in values.items() if k in self.option_names()}


_REGISTRY: dict[str, MethodSpec] = {}


def register(name: str, **spec: Any) -> Callable:
    """Decorator: register a generator function `(Decoding, options) -> Iterator[IterationRecord]`."""

    def wrap(fn: Callable) -> Callable:
        _REGISTRY[name] = MethodSpec(name=name, generate=fn, **spec)
        return fn

    return wrap


@functools.cache  # once (a method module imported directly registers itself before the rest are)
def _load_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


def all_methods() -> list[MethodSpec]:
    """Every registered method, the autoregressive baseline first."""
    _load_all()
    return sorted(_REGISTRY.values(), key=lambda s: (s.is_oracle, s.rank, s.name))


def default_race() -> list[str]:
    """The methods the Race tab ticks when it opens, in registry order."""
    return [s.name for s in all_methods() if s.in_default_race]


def new_session(spec: MethodSpec, pair: ModelPair) -> Any:
    """The state a stateful method carries across the runs of one series (`run(..., session=)`);
    None for most methods, which carry nothing."""
    return spec.session(pair) if spec.session is not None else None


def method_names() -> list[str]:
    return [s.name for s in all_methods()]


def get_method(name: str) -> MethodSpec:
    """The method registered as `name`; "-" and "_" are one letter in it (vllm-ngram is vllm_ngram)."""
    _load_all()
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None and isinstance(name, str):
        spec = next((s for n, s in _REGISTRY.items() if n.replace("-", "_") == name.replace("-", "_")), None)
    if spec is None:
        raise SpecvizError(f"unknown method {name!r}. Known methods: {', '.join(method_names())}")
    return spec
