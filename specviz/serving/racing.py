"""Running a race honestly: the methods run one after another, each alone on the models (taking
turns with other visitors' runs, `specviz.serving.turns`), each stepped by the models' thread.

A race has two sides (`specviz.serving.gpu`): `run_race` (the app's process: settings, turns, the board)
and, for each method, one call of `specviz.serving.runs.method_runner`'s function (where the models
are: a ZeroGPU worker, or this process), which takes plain data and yields typed events
(`specviz.serving.runs`). The page thread wakes a few times a second to draw what has arrived.
Nothing here imports torch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.limits import check_count, check_unique
from specviz.methods import BASELINE
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import AppLimits
from specviz.serving.limits import prompt_ids as checked_prompt
from specviz.serving.race import MethodRun, Race
from specviz.serving.runs import (
    Failed,
    OracleFilled,
    Parity,
    Probed,
    Records,
    RunEvent,
    RunRequest,
    Status,
    Streamed,
    method_runner,
)
from specviz.serving.sessions import held_session
from specviz.serving.stops import forget_stop, new_stop_key, request_stop
from specviz.serving.timing import timing_flags
from specviz.serving.turns import TURNS, Turns
from specviz.spans import IncrementalDetokenizer, SpanBuilder

if TYPE_CHECKING:
    from specviz.methods import MethodSpec
    from specviz.models.pair import ModelPair

log = logging.getLogger(__name__)
DEFAULT_LIMITS = AppLimits()  # a public Space's (frozen: one instance serves as every default)
RESTARTS_NOTE = (
    "On this ZeroGPU Space each method runs in a GPU worker that keeps nothing of a run once it ends, so your "
    "online draft starts again from the pair's draft every race; on a server of its own it learns across your races."
)


@dataclass(frozen=True)
class RaceSettings:
    """What the Race tab's widgets ask for (one function maps widgets to this)."""

    prompt: str
    methods: tuple[str, ...]  # registry names, raced in registry order (the baseline first)
    max_new_tokens: int = 128
    # "method.option" -> value (the bench's --option names); absent: the default
    options: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0

    def check(self, limits: AppLimits = DEFAULT_LIMITS) -> None:
        """Problems a user can cause, as one clear SpecvizError each (the prompt's length is checked
        once it is tokenised, in run_race)."""
        if not self.methods:
            raise SpecvizError("no method selected: tick at least one method to race")
        check_unique("the race", self.methods)
        if len(self.methods) > limits.methods_per_race:
            raise SpecvizError(
                f"{len(self.methods)} methods asked for; a race here takes at most {limits.methods_per_race}"
            )
        if not self.prompt or not self.prompt.strip():
            raise SpecvizError("the prompt is empty: type some text or pick an example")
        check_count("max new tokens", self.max_new_tokens, most=limits.max_new_tokens)
        for method in {key.partition(".")[0] for key in self.options}:
            self.method_options(method, limits)

    def method_options(self, method: str, limits: AppLimits = DEFAULT_LIMITS) -> dict[str, Any]:
        """The options given for `method` ("method.option" keys), checked by `app_options`."""
        mine = {key.partition(".")[2]: value for key, value in self.options.items() if key.partition(".")[0] == method}
        return app_options(method, mine, limits)

    def sampling(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
        }


def app_options(method: str, values: dict[str, Any], limits: AppLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """`values` ({option: value}) of one method, each checked against its range and the app's limits.
    Only tunable options (specviz.methods.options) may come from a visitor (the page, the API, a saved
    race): never a file path or an object."""
    from specviz.methods import get_method
    from specviz.methods.options import option_fields

    fields_ = {f.name: f for f in option_fields(get_method(method).options)}
    out = {}
    for name, value in values.items():
        if name not in fields_:
            raise SpecvizError(
                f"{method}.{name}: {method} has no option {name!r} to set here (its options: "
                f"{', '.join(fields_) or 'none'})"
            )
        f = fields_[name]
        whole = f.kind == "int" and isinstance(value, float) and value.is_integer()
        given = int(value) if whole else value  # a slider's 8.0
        if isinstance(given, str) and f.kind in ("int", "float"):  # a text box's "0.9"
            given = f.parse(given)
        if given is not None and f.kind == "int":  # the app's bound first: it is the one the visitor can reach
            check_count(f"{method}.{name}", given, most=int(f.bound(limits)), least=int(f.least))
        out[name] = f.check(given)
    return out


ENGINE_NOTE = (
    "Decoded by {engine} in its own server (started on first use: a minute or two), timed at this end: a step ends "
    "when its tokens arrive, so a remote server's network time is in every step. {engine} counts the drafts it "
    "rejects but does not name them, and reports no p or q: rejected drafts are counted, not shown; a speculative "
    "row's tokens stream uncoloured, and are coloured and counted when its request ends (its per-step counts come "
    "then)."
)


def skip_reason(spec: MethodSpec, pair: ModelPair, settings: RaceSettings) -> str | None:
    """Why a method cannot take part with this pair and these settings (None: it can)."""
    if spec.needs_draft and pair.draft is None:
        return f"needs a draft model, and the pair '{pair.name}' has none"
    if not spec.supports_sampling and settings.temperature > 0:
        return "greedy only: set the temperature to 0 to include it"
    return None


def session_note(state: Any) -> str:
    """What a visitor should know of a method's state carried across their races: an online learner
    whose adapted draft the server took back (specviz.serving.pools) learns again from the pair's draft."""
    releases = getattr(state, "releases", 0)
    if not releases:
        return ""
    return (
        f"Your online draft learns across your races, but this server keeps only a few adapted drafts at once "
        f"(SPECVIZ_LIMIT_ADAPTED_DRAFTS) and took yours back {releases} time(s): it learns again from the pair's draft."
    )


def run_race(
    pair: ModelPair,
    settings: RaceSettings,
    sessions: dict,
    stop: threading.Event,
    limits: AppLimits = DEFAULT_LIMITS,
    turns: Turns = TURNS,
    runner: Callable[[RunRequest, dict], Generator[RunEvent, None, None]] | None = None,
    forks: bool = False,
) -> Iterator[Race]:
    """Race the chosen methods on `pair`, one after another; yield the race each time it changes.

    Each method waits for its turn on the models (`turns`, shared by every visitor, held here in the
    app's process) and gives it back when done, so other visitors' runs go between this race's
    methods. In its turn a method runs through `runner` (`method_runner`'s function, wrapped in
    `spaces.GPU` on a ZeroGPU Space; default: on `pair`, here). `sessions` keeps stateful methods'
    state across the races of one visitor (`specviz.serving.sessions`) in the process that runs the
    models: here, or in a ZeroGPU worker (`forks`), where it ends with the run and the panel says so.
    Raises SpecvizError before anything runs when the input is bad.
    """
    from specviz.methods import all_methods, get_method

    settings.check(limits)
    chosen = {get_method(m).name for m in settings.methods}  # an unknown name fails here
    specs = [s for s in all_methods() if s.name in chosen]  # in registry order
    prompt_ids = _prompt_ids(pair, settings, limits)
    runner = runner or method_runner(lambda name: pair)
    # methods that run; those lossless against another model than the target
    runs, runnable, lossy = _enter_runs(specs, pair, settings, prompt_ids, sessions, limits, forks)
    race = Race(pair.name, settings.prompt, tuple(prompt_ids), settings.max_new_tokens, settings.sampling(), runs)
    greedy = settings.sampling()["temperature"] == 0
    yield race
    warm = False  # the untimed warm-up runs in the first method's turn
    reference: tuple[int, ...] | None = None  # greedy: the target alone's tokens, which every lossless method repeats
    for run in runs:
        if run.name not in runnable:
            continue
        ticket = turns.join()
        try:
            for note in turns.waiting(ticket, stop):
                yield (race := race.with_run(replace(run, status="waiting", message=f"waiting for the models: {note}")))
            race = race.with_run(run)  # served (or stopped): queued again
            if stop.is_set():
                stopped = "the race was stopped before this method started"
                yield (race := race.with_run(replace(run, status="skipped", message=stopped)))
                continue
            key = new_stop_key()
            request = RunRequest(
                pair.name,
                tuple(prompt_ids),
                run.name,
                run.options,
                settings.sampling(),
                stop_key=key,
                warm_up=not warm,
                reference=reference if run.name not in lossy else None,
                probe=run.name != BASELINE and BASELINE in runnable,  # the baseline's speed right before this method
            )
            warm = True
            for now in _run_method(pair, race, run, runner(request, sessions), stop, key):
                yield (race := now)
            ran = next(r for r in race.runs if r.name == run.name)
            if run.name == BASELINE and greedy and ran.status == "done":
                reference = tuple(t for r in ran.records for t in r.emitted)
            race = race.flagged(timing_flags(race))  # a disturbed run says so on its panel as soon as it is known
        finally:
            turns.leave(ticket)
        yield race


def _prompt_ids(pair: ModelPair, settings: RaceSettings, limits: AppLimits) -> list[int]:
    """The prompt's tokens; a prompt over the app's limit, or too long for the model's context with the tokens
    asked for, is refused."""
    prompt_ids = checked_prompt(pair, settings.prompt, limits)
    if len(prompt_ids) + settings.max_new_tokens > pair.max_context:
        raise SpecvizError(
            f"the prompt ({len(prompt_ids)} tokens) plus max new tokens ({settings.max_new_tokens}) exceeds the "
            f"model's context of {pair.max_context} tokens: shorten the prompt or ask for fewer tokens"
        )
    return prompt_ids


def _enter_runs(
    specs: list[Any],
    pair: ModelPair,
    settings: RaceSettings,
    prompt_ids: list[int],
    sessions: dict,
    limits: AppLimits,
    forks: bool,
) -> tuple[tuple[MethodRun, ...], set[str], set[str]]:
    """A run for each method: skipped with the reason, or its options checked now (a bad option fails
    before anything runs, not in its turn) and its notes written. Returns (runs, runnable, lossy): the
    runs, the methods that run, and those lossless against another model than the target."""
    from specviz.runner import check_run

    runs, runnable, lossy = [], set(), set()
    for spec in specs:
        run = MethodRun(spec.name, spec.label, spec.paper)
        if reason := skip_reason(spec, pair, settings):
            runs.append(replace(run, status="skipped", message=reason))
            continue
        options = settings.method_options(spec.name, limits)
        check_run(spec.name, pair, prompt_ids, **settings.sampling(), **options)  # a bad option fails now
        against = spec.lossless_note(pair, options)
        lossless = f"Lossless against {against}, not the target alone: its text may differ." if against else ""
        if against:
            lossy.add(spec.name)
        restarts = RESTARTS_NOTE if forks and spec.session is not None else ""
        outside = ENGINE_NOTE.format(engine=spec.engine) if spec.engine else ""
        held = session_note(held_session(sessions, pair.name, spec.name))
        runs.append(replace(run, options=options, note=" ".join(filter(None, [outside, lossless, held, restarts]))))
        runnable.add(spec.name)
    return tuple(runs), runnable, lossy


def _run_method(
    pair: ModelPair,
    race: Race,
    run: MethodRun,
    updates: Generator[RunEvent, None, None],
    stop: threading.Event,
    key: str,
) -> Iterator[Race]:
    """One method's run, alone on the models: a new snapshot of `race` each time its records arrive, the
    last once it ended; Stop reaches the run through its stop key."""
    run = replace(run, status="running")
    yield race.with_run(run)
    builder = SpanBuilder(pair.tokenizer, race.prompt_ids, greedy=race.options.get("temperature", 0.0) == 0)
    words = IncrementalDetokenizer(pair.tokenizer, race.prompt_ids)  # the text of tokens streamed before their records
    try:
        for event in updates:
            if stop.is_set():
                request_stop(key)
            match event:
                case Records(records) if records:
                    for record in records:
                        builder.add(record)
                    run = replace(
                        run,
                        records=run.records + tuple(records),
                        spans=tuple(builder.spans),
                        streamed_tokens=0,
                        streamed_text="",
                    )
                    yield race.with_run(run)
                case Streamed(tokens):  # tokens before their records: their text, uncoloured
                    text = "".join(words.push(t) for t in tokens[run.streamed_tokens :])
                    run = replace(run, streamed_tokens=len(tokens), streamed_text=run.streamed_text + text)
                    yield race.with_run(run)
                case OracleFilled(records):
                    run = replace(run, records=tuple(records))
                case Status(line):  # what the run waits for before it starts (a vLLM row: its server)
                    run = replace(run, message=line)
                    yield race.with_run(run)
                case Probed(ms):
                    run = replace(run, probe_ms=ms)
                case Parity():
                    note = parity_note(event, pair.info.get("dtype", ""))
                    run = replace(run, note=" ".join(filter(None, [run.note, note])))
                case Failed(message):
                    run = replace(run, status="error", message=message)
    except Exception as e:  # the call itself failed (on ZeroGPU: no GPU, or the worker ended); the next method runs
        log.exception("%s failed in a race", run.name)
        run = replace(run, status="error", message=f"{type(e).__name__}: {e}")
    finally:
        updates.close()
        forget_stop(key)
    builder.finish()
    ended = ("stopped" if stop.is_set() else "done") if run.status == "running" else run.status
    yield race.with_run(replace(run, status=ended, spans=tuple(builder.spans)))


def parity_note(parity: Parity, dtype: str) -> str:
    """What a panel says of a greedy output that parts from the target alone's (nothing when equal)."""
    if parity.verdict == "same" or parity.first_difference is None:
        return ""
    where = f"Its text parts from the target alone's at token {parity.first_difference + 1}"
    if parity.verdict == "tie":
        return (
            f"{where}, where the target's two best tokens are tied in {dtype} (equal within its rounding): which "
            "one an argmax picks depends on the order of the sums. Not a fault of the method; in float32 it "
            "would not happen."
        )
    return f"{where}, and not at a tie: a fault in specviz. Please report it with the race's JSON download."


def method_seconds(request: RunRequest, sessions: dict) -> int:
    """ZeroGPU's duration for one method's call (it takes the same arguments as the call)."""
    return gpu_seconds(request.max_new_tokens)
