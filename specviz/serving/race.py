"""A race as plain data: each method's run on one prompt, as immutable snapshots (what the Race's
engine, `specviz.serving.racing`, yields as the methods stream, what a visitor's gr.State holds,
what a saved race is read into). Its HTML is `specviz.ui.panels`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specviz.methods import BASELINE
from specviz.metrics import summarize, summary_metrics
from specviz.records import IterationRecord
from specviz.spans import TokenSpan


@dataclass(frozen=True, eq=False)
class MethodRun:
    """One method's part of a race at one moment: a snapshot (the race's engine makes a new one as the
    method streams, `dataclasses.replace`)."""

    name: str  # registry name
    label: str
    paper: str
    status: str = "queued"  # queued | waiting (for its turn on the models) | running | done | stopped | skipped | error
    message: str = ""  # why it was skipped or failed
    note: str = ""  # a standing note on what the method is (e.g. what it is lossless against)
    # the method's own options set for this race (the rest at their defaults)
    options: Mapping[str, Any] = field(default_factory=dict)
    records: tuple[IterationRecord, ...] = ()
    spans: tuple[TokenSpan, ...] = ()
    # what the method has streamed before it could record it (a speculative vLLM row until its request ends: its
    # per-step counts come with its last token): how many tokens, and their text; 0 and "" once its records came
    streamed_tokens: int = 0
    streamed_text: str = ""
    probe_ms: float | None = None  # the target alone's step time, measured right before this run (None: not measured)
    flags: tuple[str, ...] = ()  # why its timing cannot be the method's own (specviz.serving.timing)


@dataclass(frozen=True, eq=False)
class Race:
    """Every method's run on one prompt with one set of options, at one moment: an immutable snapshot.
    The Race tab's engine yields a new one each time a run changes, and hands the last to the tabs that
    follow the race (a new object is a change of the state that holds it: gradio tells a state's
    change by its hash, here its identity). Two snapshots are compared by their saved form
    (`specviz.serving.saved.race_to_dict`)."""

    pair: str
    prompt: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    options: Mapping[str, Any]  # the sampling settings every method was given (each method's own are on its run)
    runs: tuple[MethodRun, ...]

    def finished(self) -> list[MethodRun]:
        return [r for r in self.runs if r.records and r.status in ("done", "stopped")]

    def with_run(self, run: MethodRun) -> Race:
        """This race with `run` in place of the run of its name."""
        return replace(self, runs=tuple(run if r.name == run.name else r for r in self.runs))

    def flagged(self, flags: Mapping[str, Sequence[str]]) -> Race:
        """This race with each run's timing flags (name -> why), none for a run not named."""
        return replace(self, runs=tuple(replace(r, flags=tuple(flags.get(r.name, ()))) for r in self.runs))

    def baseline_tokens_per_s(self) -> float | None:
        """The autoregressive run's tokens/s (the speedup's denominator), once it has finished."""
        for r in self.runs:
            if r.name == BASELINE and r.status == "done" and r.records:
                return summary_metrics(summarize(r.records))["tokens_per_s"]
        return None


def default_options(method: str) -> dict:
    """`method`'s tunable options at their defaults (None: the method tunes it itself)."""
    from specviz.methods import get_method
    from specviz.methods.options import option_fields

    return {f.name: f.default for f in option_fields(get_method(method).options)}


def resolved_options(options: Mapping[str, Any], method: str) -> dict:
    """Every tunable option `method` runs with: those set in `options`, the rest at their defaults."""
    return {**default_options(method), **options}


def set_options(options: Mapping[str, Any], method: str) -> dict:
    """The options of `options` that differ from `method`'s defaults (the inverse of `resolved_options`)."""
    defaults = default_options(method)
    return {k: v for k, v in options.items() if k not in defaults or v != defaults[k]}
