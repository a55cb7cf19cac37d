"""The lab tabs' comparisons (DISCO, PEARL): methods timed one after another on one prompt, through
the Race's engine (`specviz.serving.runs.method_runner`: the same probe, warm-up and events) with the
lab tabs' timing policy. `compare_rows` runs each row in turn: the target alone's pace probed right
before each method, then the method's warm-up and `repeats` timed runs with the median kept
(`RunRequest.median_of`), then the Race's timing checks (`specviz.serving.timing`) on the runs, so a
figure other load disturbed is flagged as on the Race's panels, not shown as the method's own. A
tab calls it inside one model call (`TabContext.run_models`: one turn on the models for them all)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.limits import check_count
from specviz.methods import BASELINE
from specviz.metrics import ms_per_token, summarize
from specviz.serving.race import MethodRun, Race
from specviz.serving.runs import Failed, OracleFilled, Probed, RunEvent, RunRequest, method_runner
from specviz.serving.stops import Signal
from specviz.serving.timing import timing_flags

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair
    from specviz.runner import RunResult


@dataclass(frozen=True)
class Row:
    """One method of a comparison: its label on the tab, its registry name and its options."""

    label: str
    method: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timed:
    """A row's median run and the target alone's step probed right before it (None for the target alone)."""

    row: Row
    result: RunResult
    probe_ms: float | None

    @property
    def ms_per_token(self) -> float:
        s = self.result.summary
        return ms_per_token(max(1, s.new_tokens), s.wall_s) or 0.0


@dataclass(frozen=True)
class Comparison:
    """What `compare_rows` timed, in order (the rows a Stop left out are missing), and the Race's flags."""

    timed: tuple[Timed, ...]
    flags: dict[str, list[str]]  # label -> why its timing cannot be the method's own
    stopped: bool

    def first(self, method: str) -> Timed | None:
        return next((t for t in self.timed if t.row.method == method), None)


def compare_rows(
    pair: ModelPair,
    prompt_ids: Sequence[int],
    rows: Sequence[Row],
    max_new_tokens: int,
    repeats: int,
    stop: Signal | None,
    runner: Callable[[RunRequest, dict], Iterator[RunEvent]] | None = None,
) -> Comparison:
    """Time `rows` on one prompt, one after another; once `stop` is set no further row runs. `runner`:
    `method_runner`'s function (default: on `pair`, here). A row that fails ends the comparison with its
    message (a SpecvizError)."""
    from specviz.runner import MAX_REPEATS, RunResult

    repeats = check_count("repeats", repeats, most=MAX_REPEATS)  # before any row runs
    runner = runner or method_runner(lambda name: pair)
    ids, timed = tuple(prompt_ids), []
    for row in rows:
        if stop is not None and stop.is_set():
            break
        request = RunRequest(
            pair.name,
            ids,
            row.method,
            dict(row.options),
            {"max_new_tokens": int(max_new_tokens)},
            probe=row.method != BASELINE,  # load that came since shows
            median_of=repeats,
        )
        records, probe = [], None
        for event in runner(request, {}):
            match event:
                case Probed(ms):
                    probe = ms
                case OracleFilled(filled):
                    records = filled
                case Failed(message):
                    raise SpecvizError(f"{row.label}: {message}")
        result = RunResult(row.method, ids, tuple(records), summarize(records))
        timed.append(Timed(row, result, probe))
    flags = disturbed(pair.name, ids, max_new_tokens, timed)
    return Comparison(tuple(timed), flags, stopped=len(timed) < len(rows))


def disturbed(
    pair_name: str, prompt_ids: Sequence[int], max_new_tokens: int, timed: Sequence[Timed]
) -> dict[str, list[str]]:
    """label -> why its timing cannot be the method's own, for the `timed` runs that fail the Race's checks.
    Nothing is compared without the target alone and one method beside it, so fewer runs flag nothing."""
    if len(timed) < 2 or all(t.row.method != BASELINE for t in timed):
        return {}
    runs = [
        MethodRun(t.row.method, t.row.label, "", "done", records=t.result.records, probe_ms=t.probe_ms) for t in timed
    ]
    flags = timing_flags(Race(pair_name, "", tuple(prompt_ids), int(max_new_tokens), {}, tuple(runs)))
    return {run.label: flags[run.name] for run in runs if run.name in flags}
