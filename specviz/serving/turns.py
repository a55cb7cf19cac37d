"""The models serve one run at a time, across every visitor and tab, fairly between visitors.

The line is first come, first served between visitors, and fair within it: a visitor's second run
waits behind every other visitor's first (their third behind every second, ...), and a visitor
holds at most `PER_VISITOR` places in it (one more is refused at once, so one page sending forty
races neither takes every turn nor fills gradio's queue). A visitor is a network address
(`specviz.serving.visitors`), not a gradio session, which a client makes at will: six raw API calls
were six visitors (issue 53); the places per address are `AppLimits.places_per_address`. A race
takes a turn per method and gives it back between methods, so a visitor's one-method race is not
held behind another's thirteen; while it waits, the page says how many runs are ahead and about how
long that takes (past a typical turn, how long the run on the models has held them instead). A run
that is alone on the models keeps honest timings: no two model runs ever share the processor. Other
tabs hold one turn for their whole (bounded) call. A visitor who closes the tab stops their running
race (`stops.LeftPages`, told by the page's unload event: that tab's runs, by its gradio session). A
call whose client cancels it (gradio's /cancel, gradio_client's job.cancel) leaves the line if it
is waiting, and its Stop is set if it is running (`stop_when_cancelled`): gradio itself cannot
interrupt a call that is running in a thread, and the models stayed busy 6-39 s after a cancel
(issue 41). Nothing here imports torch.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from specviz.errors import SpecvizError
from specviz.serving.limits import AppLimits
from specviz.serving.stops import POLL_S, Cancelled, Signal, event_live
from specviz.serving.visitors import request_address

NOTE_S = 2.0  # a waiting run's page is redrawn when its note changes, at most this often: waiting
# visitors' redraws take the CPU from the run being timed (with 8 visitors redrawn every POLL_S, the
# load test spent ~22 s of wall time a race; with this, 5.3 s: two runs on different days,
# `benchmarks/reliability/`)
# places one visitor (address) may hold in the line at once (a race holds one: two tabs' runs, or two
# races); the app sets its line's from SPECVIZ_LIMIT_PLACES_PER_ADDRESS at launch
PER_VISITOR = AppLimits().places_per_address


def current_visitor() -> str | None:
    """Whose run joins the line (None outside a gradio event): the network address of the event's
    request (`specviz.serving.visitors`), or its gradio session where it has none (a request built by hand)."""
    try:
        from gradio.context import LocalContext
    except ImportError:  # the library without the app
        return None
    request = LocalContext.request.get(None)
    if request is None:
        return None
    return request_address(request) or getattr(request, "session_hash", None)


class Ticket:
    """A place in the line, and whose it is (None: no visitor, e.g. a test or the command line)."""

    __slots__ = ("visitor",)

    def __init__(self, visitor: str | None) -> None:
        self.visitor = visitor


class Turns:
    """A line for the models, fair between visitors; the run at its head holds them."""

    def __init__(self, history: int = 20, per_visitor: int = PER_VISITOR) -> None:
        self._cond = threading.Condition()
        self._line: deque[Ticket] = deque()  # the first holds the models
        self._held_since = 0.0
        self._recent: deque[float] = deque(maxlen=history)  # seconds of the last turns
        self.per_visitor = per_visitor

    def join(self, visitor: str | None = None) -> Ticket:
        """A ticket for `visitor` (default: the address of the gradio event being served), placed
        behind every other visitor's runs of the same rank: give it back with `leave`, served or not.
        A visitor who holds `per_visitor` places already is refused (SpecvizError)."""
        ticket = Ticket(visitor if visitor is not None else current_visitor())
        with self._cond:
            rank = self._rank(ticket, len(self._line))
            if ticket.visitor is not None and rank >= self.per_visitor:
                raise SpecvizError(
                    f"{rank} runs waiting for the models or running already come from your network address, "
                    "the most one address may hold (SPECVIZ_LIMIT_PLACES_PER_ADDRESS): wait for them to finish, "
                    "or press Stop"
                )
            # behind the holder and every run of the same or a lower rank: before the first of a higher one
            at = next((i for i in range(1, len(self._line)) if self._rank(self._line[i], i) > rank), len(self._line))
            self._line.insert(at, ticket)
            if self._line[0] is ticket:
                self._held_since = time.monotonic()
        return ticket

    def _rank(self, ticket: Ticket, at: int) -> int:
        """How many runs of `ticket`'s visitor are ahead of place `at` (0 for a run of no visitor)."""
        if ticket.visitor is None:
            return 0
        return sum(self._line[i].visitor == ticket.visitor for i in range(at) if self._line[i] is not ticket)

    def wait(self, ticket: Ticket, timeout: float | None = None) -> bool:
        """Block until `ticket` holds the models (True) or `timeout` seconds pass (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._line[0] is ticket, timeout)

    def leave(self, ticket: Ticket) -> None:
        """Give the turn back, or leave the line without being served."""
        with self._cond:
            if self._line and self._line[0] is ticket:
                self._recent.append(time.monotonic() - self._held_since)
                self._held_since = time.monotonic()
            self._line.remove(ticket)
            self._cond.notify_all()

    def ahead(self, ticket: Ticket) -> int:
        """Runs ahead of `ticket` (the one holding the models included)."""
        with self._cond:
            return self._line.index(ticket)

    def waiting_note(self, ticket: Ticket) -> str:
        """'2 runs ahead of you (about 30 s)': what the page shows while a run waits."""
        with self._cond:
            ahead = self._line.index(ticket)
            typical = statistics.median(self._recent) if self._recent else None
            held = time.monotonic() - self._held_since
        runs = f"{ahead} run{'s' if ahead != 1 else ''} ahead of you"
        if typical is None:
            return runs
        if held > typical:  # past a typical turn (a long stream, a run still ending after a cancel): no guess
            return f"{runs} (the run on the models has taken {round(held)} s so far, a typical turn {typical:.1f} s)"
        # the holder has typically (typical - held) left; the others a typical turn each
        left = typical - held + (ahead - 1) * typical
        return f"{runs} (about {max(1, round(left))} s)"

    def waiting(self, ticket: Ticket, stop: Signal | None = None, every_s: float = NOTE_S) -> Iterator[str]:
        """The waiting note, when it changes and at most every `every_s` seconds (the first at once),
        until `ticket` holds the models or `stop` is set (checked every POLL_S)."""
        shown, shown_at = None, -math.inf
        while not self.wait(ticket, POLL_S) and not (stop is not None and stop.is_set()):
            note = self.waiting_note(ticket)
            if note != shown and time.monotonic() - shown_at >= every_s:
                shown, shown_at = note, time.monotonic()
                yield note

    @contextmanager
    def turn(self, stop: Signal | None = None) -> Iterator[bool]:
        """Hold the models for a block: yields True once they are ours, False if `stop` was set first."""
        ticket = self.join()
        try:
            for _ in self.waiting(ticket, stop):
                pass
            yield self.ahead(ticket) == 0
        finally:
            self.leave(ticket)


TURNS = Turns()  # the app's one line (one process serves one set of models)

# How long a thread holds the interpreter before one waiting for it takes its turn (Python's default
# is 5 ms). A model step releases it in every torch call and waits to take it back, so beside a
# handler that is pure Python for seconds (a 16 MB saved race: checked and drawn) each of the run's
# hundreds of calls a step waited out the whole interval, and another visitor's short race took
# several times as long (issue 53; the figures, at both values: benchmarks/reliability/README.md).
GIL_SWITCH_S = 0.0005


def hand_over_quickly(interval_s: float = GIL_SWITCH_S) -> None:
    """Let a thread waiting for the interpreter (the models' run) take it within `interval_s` seconds,
    whatever else this process is doing (server-wide: the app sets it at launch)."""
    sys.setswitchinterval(min(interval_s, sys.getswitchinterval()))


CANCELLED = "the request was cancelled before its turn on the models"


def one_at_a_time(fn: Callable, turns: Turns = TURNS) -> Callable:
    """Wrap an event handler so it runs while holding a turn (generators: for their whole run); a
    call cancelled while it waits leaves the line without running (a SpecvizError nobody reads)."""
    if inspect.isgeneratorfunction(inspect.unwrap(fn)):  # through wrappers such as spaces.GPU

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            live = event_live()
            with turns.turn(Cancelled(live) if live else None) as served:
                if not served:
                    raise SpecvizError(CANCELLED)
                yield from fn(*args, **kwargs)

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        live = event_live()
        with turns.turn(Cancelled(live) if live else None) as served:
            if not served:
                raise SpecvizError(CANCELLED)
            return fn(*args, **kwargs)

    return wrapper
