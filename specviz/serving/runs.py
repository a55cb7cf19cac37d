"""The models' side of a race: one method's run, stepped on the models' thread, as typed events.

`method_runner(load_pair)` makes the function that runs one method of a comparison where the models
are: this process, or a ZeroGPU worker (`spaces.GPU` pickles its arguments in and each event out, so
it takes a `RunRequest` and yields plain data only). The Race and the lab tabs (DISCO, PEARL:
`specviz.serving.compare`) both run their methods through it; they differ in the request's timing
policy only: one run streamed live (the Race), or the median of `median_of` runs after the method's
own warm-up (`runner.generate_median`: the lab tabs). It yields, in order: `Status` lines while a
method's `prepare` hook runs (a vLLM row's server starting), `Probed` (the target alone's pace right
before the method), `Records` (in batches every `REFRESH_S` while a live run decodes; at once for a
median; `Streamed` tokens before a live run's records where its method cannot record a step as it
comes), then `OracleFilled` (the records with their oracle speculation length) and `Parity` (the
greedy output against the target alone's); `Failed` where the run failed. A live run ends after its
current iteration once its stop key is requested (`specviz.serving.stops`).

The run is drained by the models' thread (`threads.MODELS`, one for the process: a new thread would
pay its first-use costs inside the run's timing; PEARL's target lane is lent another,
`PEARL_TARGET`), so whatever reads the events never pauses a run (a paused generator would count the
reading as decoding time). Nothing here imports torch at import.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.methods import BASELINE
from specviz.serving import threads
from specviz.serving.sessions import method_session
from specviz.serving.stops import StopKey
from specviz.serving.threads import MODELS, PEARL_TARGET

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

log = logging.getLogger(__name__)
REFRESH_S = 0.15  # how often a running method's new records are handed on
WARMUP_TOKENS = 3  # untimed warm-up run before the race (first calls pay one-off costs)
PROBE_STEPS = 6  # plain decoding steps of the target alone timed right before each method (specviz.serving.timing)
_END = object()
_WARMED: set[str] = set()  # pairs this process has warmed up (a fresh ZeroGPU worker has none)


@dataclass(frozen=True)
class RunRequest:
    """One method's run of a comparison, as plain data (a ZeroGPU worker gets it pickled)."""

    pair_name: str
    prompt_ids: tuple[int, ...]
    method: str  # registry name
    options: Mapping[str, Any] = field(default_factory=dict)  # the method's options, checked
    # the draws: temperature, top_p, seed and max_new_tokens (`specviz.run`'s keywords)
    sampling: Mapping[str, Any] = field(default_factory=dict)
    stop_key: str | None = None  # a live run ends once this key's stop is requested (None: it cannot be stopped)
    warm_up: bool = False  # a live run: warm the pair up first (the race's first method; a fresh worker does anyway)
    reference: tuple[int, ...] | None = None  # the target alone's greedy tokens, compared with the output (`Parity`)
    probe: bool = False  # time `probe_ms`'s steps of the target alone first (`Probed`)
    median_of: int | None = None  # the timing policy: None, one run streamed live; N, the median of N runs

    @property
    def max_new_tokens(self) -> int:
        return int(self.sampling.get("max_new_tokens", 0))


@dataclass(frozen=True)
class Status:
    """What the run waits for before it starts (a vLLM row: its server), in words."""

    line: str


@dataclass(frozen=True)
class Probed:
    """The target alone's median milliseconds a decoding step on the prompt, right before the method."""

    ms: float


@dataclass(frozen=True)
class Records:
    """The records that arrived since the last batch (IterationRecord)."""

    records: list[Any]


@dataclass(frozen=True)
class Streamed:
    """Every token the run has emitted but not recorded yet (a speculative vLLM row: its per-step counts,
    and so its records, come with its last token); its records replace them."""

    tokens: tuple[int, ...]


@dataclass(frozen=True)
class OracleFilled:
    """Every record of the run, with its oracle speculation length filled."""

    records: list[Any]


@dataclass(frozen=True)
class Parity:
    """A greedy run that ended on its own against the target alone's tokens (`specviz.parity`):
    verdict "same", "tie" or "differs", and the first token where they part."""

    verdict: str
    first_difference: int | None


@dataclass(frozen=True)
class Failed:
    """The run failed: a SpecvizError's message, or an unexpected error's type and message."""

    message: str


RunEvent = Status | Probed | Records | Streamed | OracleFilled | Parity | Failed


def step_ms(records: Sequence[Any]) -> float | None:
    """The median milliseconds of one plain decoding step of a target-alone run (its first record,
    which also reads the prompt, left out): the probe's measure."""
    import statistics

    steps = [r.verify_ms for r in records[1:] if r.target_forwards and not r.drafted]
    return statistics.median(steps) if steps else None


def probe_ms(pair: ModelPair, prompt_ids: Sequence[int]) -> float | None:
    """The target alone's median milliseconds per decoding step on this prompt, now (the probe the Race
    and the lab tabs take before each method)."""
    import specviz

    return step_ms(list(specviz.run(BASELINE, pair, list(prompt_ids), max_new_tokens=PROBE_STEPS + 1)))


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


def method_runner(load_pair: Callable[[str], Any]) -> Callable[[RunRequest, dict], Generator[RunEvent, None, None]]:
    """The models' side of a comparison: a function that runs one method and yields plain data only,
    so that `spaces.GPU` can run it in a ZeroGPU worker (its arguments and each event pickled across),
    and this process can run it as it is. `load_pair(name)`: the pair (on ZeroGPU, one loaded at start-up)."""

    def run_method(request: RunRequest, sessions: dict) -> Generator[RunEvent, None, None]:
        """The module's events for one run of `request.method`. `sessions`: a visitor's state of the
        stateful methods (`specviz.serving.sessions`)."""
        import specviz
        from specviz.methods import get_method
        from specviz.parity import compare

        prompt_ids = list(request.prompt_ids)
        records: list[Any] = []
        stream = None
        try:
            # made on the models' thread as the run is stepped there: a method's caches and an online learner's
            # copy are tensor work, and tensor work on a second thread slows every later step (serving.threads)
            spec = get_method(request.method)
            if spec.prepare is not None:  # a vLLM row's server: minutes, said on its panel as it goes
                opts = spec.make_options(**request.options)
                for line in _prepare(spec.prepare, lambda: load_pair(request.pair_name), prompt_ids, opts):
                    yield Status(line)
            pair = threads.on(MODELS).call(load_pair, request.pair_name)
            session = threads.on(MODELS).call(method_session, sessions, spec, pair)
            kwargs = {**request.sampling, **request.options, "session": session, "executor": threads.on(PEARL_TARGET)}
            if request.median_of is None and (request.warm_up or pair.name not in _WARMED):
                threads.on(MODELS).call(_warm_up, pair, prompt_ids)
            if request.probe:
                ms = threads.on(MODELS).call(probe_ms, pair, prompt_ids)
                if ms is not None:
                    yield Probed(ms)
            if request.median_of is not None:  # filled with its oracle already
                records = threads.on(MODELS).call(_median_run, spec.name, pair, prompt_ids, request.median_of, kwargs)
                yield Records(records)
            else:
                stop = StopKey(request.stop_key) if request.stop_key is not None else threading.Event()
                streamed: list[int] = []  # extended on the models' thread, read here
                kwargs["preview"] = streamed.extend
                stream = stream_records(
                    threads.on(MODELS).call(lambda: specviz.run(spec.name, pair, prompt_ids, **kwargs)), stop
                )
                shown = 0
                for batch in stream:
                    records += batch
                    if batch or len(streamed) == shown:
                        yield Records(batch)
                    else:
                        shown = len(streamed)
                        yield Streamed(tuple(streamed[:shown]))
        except SpecvizError as e:
            yield Failed(str(e))
        except Exception as e:  # a bug in one method must not end everyone's race; the log keeps its traceback
            log.exception("%s failed in a race", request.method)
            yield Failed(f"{type(e).__name__}: {e}")
        finally:
            if stream is not None:
                stream.close()  # closed from outside (the app went away): the run ends after its iteration
        if records and request.median_of is None:
            records = threads.on(MODELS).call(specviz.fill_oracle_sl, pair, prompt_ids, records)
        if records:
            yield OracleFilled(records)
        if request.reference is not None and records and records[-1].stop is not None:
            output = [t for r in records for t in r.emitted]
            parity = threads.on(MODELS).call(compare, pair, prompt_ids, list(request.reference), output)
            yield Parity(parity.verdict, parity.first_difference)

    return run_method


def _median_run(method: str, pair: ModelPair, prompt_ids: list[int], repeats: int, kwargs: dict[str, Any]) -> list[Any]:
    """The records of the run of median wall time of `repeats`, after the method's own untimed warm-up
    (`runner.generate_median`, the library's fair one-prompt timing)."""
    from specviz import runner

    return list(runner.generate_median(method, pair, prompt_ids, repeats=repeats, **kwargs).records)


def _prepare(hook: Callable[..., None], pair: Callable[[], Any], prompt_ids: list[int], opts: Any) -> Iterator[str]:
    """Run a method's `prepare` hook on the models' thread (`pair()` loads the pair there); yield its progress
    lines as they come (a failure is raised here)."""
    lines: queue.Queue = queue.Queue()
    done = threads.on(MODELS).submit(lambda: hook(pair(), prompt_ids, opts, lines.put))
    while not (done.done() and lines.empty()):
        with contextlib.suppress(queue.Empty):
            yield lines.get(timeout=REFRESH_S)
    done.result()


def _warm_up(pair: ModelPair, prompt_ids: list[int]) -> None:
    """A few untimed tokens through the target and the draft, so the first method raced does not
    pay the one-off costs of the first forward passes."""
    import specviz
    from specviz.cost.families import CHAIN

    chains = (s.name for s in specviz.all_methods() if s.family is CHAIN and s.drafts_with_pair_draft)
    method = next(chains, BASELINE) if pair.draft is not None else BASELINE  # a chain reads both models
    for _ in specviz.run(method, pair, prompt_ids[-64:], max_new_tokens=WARMUP_TOKENS):
        pass
    _WARMED.add(pair.name)
