"""Running a race honestly: the methods run one after another, each alone on the models (taking
turns with other visitors' runs, `specviz.serving.turns`), each stepped by the models' thread.

Each method's clock (`Decoding.now`) runs only while its own generator runs, and the generator is
drained by the models' thread (`MODELS`, one for the process: a new thread would pay its first-use
costs inside the run's timing, `specviz.serving.threads`; PEARL's target lane is lent another,
`PEARL_TARGET`), so drawing the page never pauses a run (a paused generator would count the drawing
as decoding time). The page thread wakes a few times a second to draw what has arrived.

A race has two sides (`specviz.ui.gpu`): `run_race` (the app's process: settings, turns, the board)
and, for each method, one call of `method_runner`'s function (where the models are: a ZeroGPU
worker, or this process), which takes and yields plain data only. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any

from specviz.errors import SpecvizError
from specviz.limits import check_count, check_unique
from specviz.serving import threads
from specviz.serving.limits import AppLimits
from specviz.serving.limits import prompt_ids as checked_prompt
from specviz.serving.sessions import held_session, method_session
from specviz.serving.stops import StopKey, forget_stop, new_stop_key, request_stop
from specviz.serving.threads import MODELS, PEARL_TARGET
from specviz.serving.turns import TURNS, Turns
from specviz.ui.gpu import gpu_seconds
from specviz.ui.panels import BASELINE, MethodRun, Race
from specviz.ui.tab_timing import probe_ms
from specviz.ui.tokens import SpanBuilder
from specviz.ui.verdict import timing_flags

log = logging.getLogger(__name__)
DEFAULT_LIMITS = AppLimits()  # a public Space's (frozen: one instance serves as every default)
REFRESH_S = 0.15  # how often the page is redrawn while a method runs
WARMUP_TOKENS = 3  # untimed warm-up run before the race (first calls pay one-off costs)
_END = object()
_WARMED: set[str] = set()  # pairs this process has warmed up (a fresh ZeroGPU worker has none)
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
        given = (
            int(value) if f.kind == "int" and isinstance(value, float) and value.is_integer() else value
        )  # a slider's 8.0
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
    "row's tokens appear when its request ends."
)


def skip_reason(spec: Any, pair: Any, settings: RaceSettings) -> str | None:
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


def stream_records(
    gen: Generator[Any, None, None], stop: threading.Event | StopKey, refresh_s: float = REFRESH_S
) -> Generator[list[Any], None, None]:
    """Drain `gen` on the models' thread; yield the records that arrived, in batches, every refresh_s
    (an empty batch when none did, so that the caller wakes to look at its Stop button).

    A SpecvizError or any other exception inside the run is re-raised here. Setting `stop` (or
    closing this generator) ends the run after its current iteration.
    """
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        from specviz.runner import without_autograd

        try:
            for record in without_autograd(gen):
                q.put(record)
                if stop.is_set():
                    break
        except BaseException as e:  # handed to the page thread, which raises it; the worker keeps it too
            q.put(e)
            raise
        finally:
            gen.close()
            q.put(_END)

    pumped = threads.on(MODELS).submit(pump)
    batch: list[Any] = []
    deadline = time.monotonic() + refresh_s
    worker_done = False  # the worker has finished (normally or with an exception)
    try:
        while True:
            try:
                item = q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                item = None
            if item is _END:
                worker_done = True
                yield batch
                return
            if isinstance(item, BaseException):
                worker_done = True
                raise item
            if item is not None:
                batch.append(item)
            if time.monotonic() >= deadline:
                yield batch
                batch = []
                deadline = time.monotonic() + refresh_s
    finally:
        if not worker_done:  # closed from outside (the visitor left, or the event was cancelled)
            stop.set()
        wait([pumped], timeout=30)


def run_race(
    pair: Any,
    settings: RaceSettings,
    sessions: dict,
    stop: threading.Event,
    limits: AppLimits = DEFAULT_LIMITS,
    turns: Turns = TURNS,
    runner: Callable[..., Generator[tuple[str, Any], None, None]] | None = None,
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
    race = Race(pair.name, settings.prompt, prompt_ids, settings.max_new_tokens, settings.sampling(), [])
    # methods that run; those lossless against another model than the target
    runnable, lossy = _enter_runs(race, specs, pair, settings, prompt_ids, sessions, limits, forks)
    greedy = settings.sampling()["temperature"] == 0
    yield race
    warm = False  # the untimed warm-up runs in the first method's turn
    reference = None  # greedy: the target alone's tokens, which every lossless method must repeat
    for run in race.runs:
        if run.name not in runnable:
            continue
        ticket = turns.join()
        try:
            for note in turns.waiting(ticket, stop):
                run.status, run.message = "waiting", f"waiting for the models: {note}"
                yield race
            run.status, run.message = "queued", ""  # served (or stopped)
            if stop.is_set():
                run.status, run.message = "skipped", "the race was stopped before this method started"
                continue
            key = new_stop_key()
            compare_with = reference if run.name not in lossy else None
            probe = run.name != BASELINE and BASELINE in runnable  # the baseline's speed right before this method
            updates = runner(
                pair.name,
                prompt_ids,
                run.name,
                run.options,
                settings.sampling(),
                not warm,
                key,
                sessions,
                compare_with,
                probe,
            )
            warm = True
            yield from _run_method(pair, race, run, updates, stop, key)
            if run.name == BASELINE and greedy and run.status == "done":
                reference = [t for r in run.records for t in r.emitted]
            flags = timing_flags(race)  # a disturbed run says so on its panel as soon as it is known
            for done in race.runs:
                done.flags = flags.get(done.name, [])
        finally:
            turns.leave(ticket)
        yield race


def _prompt_ids(pair: Any, settings: RaceSettings, limits: AppLimits) -> list[int]:
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
    race: Race,
    specs: list[Any],
    pair: Any,
    settings: RaceSettings,
    prompt_ids: list[int],
    sessions: dict,
    limits: AppLimits,
    forks: bool,
) -> tuple[set[str], set[str]]:
    """A panel in `race` for each method: skipped with the reason, or its options checked now (a bad option
    fails before anything runs, not in its turn) and its notes written. Returns (runnable, lossy): the
    methods that run, and those lossless against another model than the target."""
    from specviz.runner import check_run

    runnable, lossy = set(), set()
    for spec in specs:
        run = MethodRun(spec.name, spec.label, spec.paper)
        race.runs.append(run)
        reason = skip_reason(spec, pair, settings)
        if reason:
            run.status, run.message = "skipped", reason
            continue
        run.options = settings.method_options(spec.name, limits)
        check_run(
            spec.name, pair, prompt_ids, **settings.sampling(), **run.options
        )  # a bad option fails now, not in its turn
        against = spec.lossless_note(pair, run.options)
        lossless = f"Lossless against {against}, not the target alone: its text may differ." if against else ""
        if against:
            lossy.add(spec.name)
        restarts = RESTARTS_NOTE if forks and spec.session is not None else ""
        outside = ENGINE_NOTE.format(engine=spec.engine) if spec.engine else ""
        run.note = " ".join(
            filter(None, [outside, lossless, session_note(held_session(sessions, pair.name, spec.name)), restarts])
        )
        runnable.add(spec.name)
    return runnable, lossy


def _run_method(
    pair: Any,
    race: Race,
    run: MethodRun,
    updates: Generator[tuple[str, Any], None, None],
    stop: threading.Event,
    key: str,
) -> Iterator[Race]:
    """One method's run, alone on the models: its records stream into `run` as they arrive; Stop
    reaches the run through its stop key."""
    run.status = "running"
    yield race
    builder = SpanBuilder(pair.tokenizer, race.prompt_ids, greedy=race.options.get("temperature", 0.0) == 0)
    run.spans = builder.spans  # the builder appends to the panel's spans
    try:
        for kind, value in updates:
            if stop.is_set():
                request_stop(key)
            if kind == "records" and value:
                for record in value:
                    run.records.append(record)
                    builder.add(record)
                yield race
            elif kind == "oracle_sl":
                run.records = value
            elif kind == "status":  # what the run waits for before it starts (a vLLM row: its server)
                run.message = value
                yield race
            elif kind == "probe":
                run.probe_ms = value
            elif kind == "parity":
                run.note = " ".join(filter(None, [run.note, parity_note(value, pair.info.get("dtype", ""))]))
            elif kind == "error":
                run.status, run.message = "error", value
    except (
        Exception
    ) as e:  # the call itself failed (on ZeroGPU: no GPU to be had, or the worker ended); the next method still runs
        log.exception("%s failed in a race", run.name)
        run.status, run.message = "error", f"{type(e).__name__}: {e}"
    finally:
        updates.close()
        forget_stop(key)
    if run.status == "running":
        run.status = "stopped" if stop.is_set() else "done"
    builder.finish()


def parity_note(parity: dict[str, Any], dtype: str) -> str:
    """What a panel says of a greedy output that parts from the target alone's (nothing when equal)."""
    if parity["verdict"] == "same":
        return ""
    where = f"Its text parts from the target alone's at token {parity['first_difference'] + 1}"
    if parity["verdict"] == "tie":
        return (
            f"{where}, where the target's two best tokens are tied in {dtype} (equal within its rounding): which "
            "one an argmax picks depends on the order of the sums. Not a fault of the method; in float32 it "
            "would not happen."
        )
    return f"{where}, and not at a tie: a fault in specviz. Please report it with the race's JSON download."


def method_runner(load_pair: Callable[[str], Any]) -> Callable[..., Generator[tuple[str, Any], None, None]]:
    """The models' side of a race: a function that runs one method and yields plain data only, so that
    `spaces.GPU` can run it in a ZeroGPU worker (its arguments and each item pickled across), and
    this process can run it as it is. `load_pair(name)`: the pair (on ZeroGPU, one loaded at start-up)."""

    def run_method(
        pair_name: str,
        prompt_ids: list[int],
        method: str,
        options: dict[str, Any],
        sampling: dict[str, Any],
        warm_up: bool,
        stop_key: str,
        sessions: dict,
        reference: list[int] | None = None,
        probe: bool = False,
    ) -> Generator[tuple[str, Any], None, None]:
        """Yields ("records", [IterationRecord]) every REFRESH_S while the method runs, then ("oracle_sl",
        its records with the oracle speculation length filled); ("error", message) where it failed.
        Ends after the current iteration once `stop_key` is requested. `warm_up`: the race's first
        method (a fresh ZeroGPU worker also warms up). `sessions`: see run_race. `reference`: the
        target alone's greedy tokens; a run that ends on its own is compared with them, ("parity",
        {"verdict": same | tie | differs, "first_difference": k}) (specviz.parity). `probe`: first time
        `probe_ms`'s steps of the target alone on the prompt, ("probe", ms per step), so that a run the
        machine's other load slowed down can be told from a slow method (specviz.ui.verdict)."""
        import specviz
        from specviz.methods import get_method
        from specviz.parity import compare

        def start() -> tuple[Any, Iterator[Any]]:
            pair, spec = load_pair(pair_name), get_method(method)
            session = method_session(sessions, spec, pair)
            return pair, specviz.run(
                spec.name, pair, prompt_ids, **sampling, **options, session=session, executor=threads.on(PEARL_TARGET)
            )

        records: list[Any] = []
        stream = None
        try:
            # made on the models' thread as the run is stepped there: a method's caches and an online learner's
            # copy are tensor work, and tensor work on a second thread slows every later step (serving.threads)
            spec = get_method(method)
            if spec.prepare is not None:  # a vLLM row's server: minutes, said on its panel as it goes
                opts = spec.make_options(**options)
                for line in _prepare(spec.prepare, lambda: load_pair(pair_name), prompt_ids, opts):
                    yield "status", line
            pair, gen = threads.on(MODELS).call(start)
            if warm_up or pair.name not in _WARMED:
                threads.on(MODELS).call(_warm_up, pair, prompt_ids)
            if probe:
                ms = threads.on(MODELS).call(probe_ms, pair, prompt_ids)
                if ms is not None:
                    yield "probe", ms
            stream = stream_records(gen, StopKey(stop_key))
            for batch in stream:
                records += batch
                yield "records", batch
        except SpecvizError as e:
            yield "error", str(e)
        except Exception as e:  # a bug in one method must not end everyone's race; the log keeps its traceback
            log.exception("%s failed in a race", method)
            yield "error", f"{type(e).__name__}: {e}"
        finally:
            if stream is not None:
                stream.close()  # closed from outside (the app went away): the run ends after its iteration
        if records:
            yield "oracle_sl", threads.on(MODELS).call(specviz.fill_oracle_sl, pair, prompt_ids, records)
        if reference is not None and records and records[-1].stop is not None:
            output = [t for r in records for t in r.emitted]
            parity = threads.on(MODELS).call(compare, pair, prompt_ids, reference, output)
            yield "parity", {"verdict": parity.verdict, "first_difference": parity.first_difference}

    return run_method


def _prepare(hook: Callable[..., None], pair: Callable[[], Any], prompt_ids: list[int], opts: Any) -> Iterator[str]:
    """Run a method's `prepare` hook on the models' thread (`pair()` loads the pair there); yield its progress
    lines as they come (a failure is raised here)."""
    lines: queue.Queue = queue.Queue()
    done = threads.on(MODELS).submit(lambda: hook(pair(), prompt_ids, opts, lines.put))
    while not (done.done() and lines.empty()):
        with contextlib.suppress(queue.Empty):
            yield lines.get(timeout=REFRESH_S)
    done.result()


def _warm_up(pair: Any, prompt_ids: list[int]) -> None:
    """A few untimed tokens through the target and the draft, so the first method raced does not
    pay the one-off costs of the first forward passes."""
    import specviz
    from specviz.cost.families import CHAIN

    chains = (s.name for s in specviz.all_methods() if s.family is CHAIN and s.drafts_with_pair_draft)
    method = next(chains, BASELINE) if pair.draft is not None else BASELINE  # a chain reads both models
    for _ in specviz.run(method, pair, prompt_ids[-64:], max_new_tokens=WARMUP_TOKENS):
        pass
    _WARMED.add(pair.name)


def method_seconds(
    pair_name: str, prompt_ids: list[int], method: str, options: dict[str, Any], sampling: dict[str, Any], *rest: Any
) -> int:
    """ZeroGPU's duration for one method's call (it takes the same arguments as the call)."""
    return gpu_seconds(sampling["max_new_tokens"])
