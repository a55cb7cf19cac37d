"""The models serve one run at a time, first come, first served, across every visitor and tab.

A race takes a turn per method and gives it back between methods, so a visitor's one-method race
is not held behind another's thirteen; while it waits, the page says how many runs are ahead and
about how long that takes. A run that is alone on the models keeps honest timings: no two model
runs ever share the processor. Other tabs hold one turn for their whole (bounded) call. A visitor
who closes the tab stops their running race (`stop_visitor`, wired to the page's unload event).
Nothing here imports torch.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

POLL_S = 0.15  # how often a waiting run checks its Stop signal
NOTE_S = 2.0  # a waiting run's page is redrawn when its note changes, at most this often: waiting
# visitors' redraws take the CPU from the run being timed (with 8 visitors redrawn every POLL_S, the
# load test spent ~22 s of wall time a race; with this, 5.3 s: two runs on different days,
# `benchmarks/reliability/`)


class Turns:
    """A first-come-first-served line for the models; the run at its head holds them."""

    def __init__(self, history: int = 20) -> None:
        self._cond = threading.Condition()
        self._line: deque[object] = deque()  # tickets, in arrival order; the first holds the models
        self._held_since = 0.0
        self._recent: deque[float] = deque(maxlen=history)  # seconds of the last turns

    def join(self) -> object:
        """A ticket at the end of the line (give it back with `leave`, served or not)."""
        ticket = object()
        with self._cond:
            self._line.append(ticket)
            if self._line[0] is ticket:
                self._held_since = time.monotonic()
        return ticket

    def wait(self, ticket: object, timeout: float | None = None) -> bool:
        """Block until `ticket` holds the models (True) or `timeout` seconds pass (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._line[0] is ticket, timeout)

    def leave(self, ticket: object) -> None:
        """Give the turn back, or leave the line without being served."""
        with self._cond:
            if self._line and self._line[0] is ticket:
                self._recent.append(time.monotonic() - self._held_since)
                self._held_since = time.monotonic()
            self._line.remove(ticket)
            self._cond.notify_all()

    def ahead(self, ticket: object) -> int:
        """Runs ahead of `ticket` (the one holding the models included)."""
        with self._cond:
            return self._line.index(ticket)

    def waiting_note(self, ticket: object) -> str:
        """'2 runs ahead of you (about 30 s)': what the page shows while a run waits."""
        with self._cond:
            ahead = self._line.index(ticket)
            typical = statistics.median(self._recent) if self._recent else None
            held = time.monotonic() - self._held_since
        runs = f"{ahead} run{'s' if ahead != 1 else ''} ahead of you"
        if typical is None:
            return runs
        # the holder has typically (typical - held) left, at least a little; the others a typical turn each
        left = max(typical - held, 0.1 * typical) + (ahead - 1) * typical
        return f"{runs} (about {max(1, round(left))} s)"

    def waiting(self, ticket: object, stop: threading.Event | None = None, every_s: float = NOTE_S) -> Iterator[str]:
        """The waiting note, when it changes and at most every `every_s` seconds (the first at once),
        until `ticket` holds the models or `stop` is set (checked every POLL_S)."""
        shown, shown_at = None, -math.inf
        while not self.wait(ticket, POLL_S) and not (stop is not None and stop.is_set()):
            note = self.waiting_note(ticket)
            if note != shown and time.monotonic() - shown_at >= every_s:
                shown, shown_at = note, time.monotonic()
                yield note

    @contextmanager
    def turn(self, stop: threading.Event | None = None) -> Iterator[bool]:
        """Hold the models for a block: yields True once they are ours, False if `stop` was set first."""
        ticket = self.join()
        try:
            for _ in self.waiting(ticket, stop):
                pass
            yield self.ahead(ticket) == 0
        finally:
            self.leave(ticket)


TURNS = Turns()  # the app's one line (one process serves one set of models)

_STOPS: dict[str, set[threading.Event]] = {}  # visitor (gradio session hash) -> Stop signals of their running runs
_STOPS_LOCK = threading.Lock()


@contextmanager
def stopped_on_leave(visitor: str | None, stop: threading.Event) -> Iterator[None]:
    """Within the block, `stop_visitor(visitor)` sets `stop` (no visitor: nothing to wire)."""
    if visitor is None:
        yield
        return
    with _STOPS_LOCK:
        _STOPS.setdefault(visitor, set()).add(stop)
    try:
        yield
    finally:
        with _STOPS_LOCK:
            _STOPS[visitor].discard(stop)
            if not _STOPS[visitor]:
                del _STOPS[visitor]


def stop_visitor(visitor: str | None) -> int:
    """Stop every run of a visitor who left; returns how many were running."""
    with _STOPS_LOCK:
        stops = list(_STOPS.get(visitor, ())) if visitor is not None else []
    for stop in stops:
        stop.set()
    return len(stops)


def one_at_a_time(fn: Callable, turns: Turns = TURNS) -> Callable:
    """Wrap an event handler so it runs while holding a turn (generators: for their whole run)."""
    if inspect.isgeneratorfunction(inspect.unwrap(fn)):  # through wrappers such as spaces.GPU

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with turns.turn():
                yield from fn(*args, **kwargs)

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with turns.turn():
            return fn(*args, **kwargs)

    return wrapper
