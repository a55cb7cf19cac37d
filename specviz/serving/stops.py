"""One run control: how a run is told to stop, wherever it runs.

A visitor's Stop button is a `KeyedStop`, an event that, once set, also requests the stop keys of
the visitor's running calls. A model call gets a stop key (a string, `stop_key_for`); the run, on
the models' thread here or in a ZeroGPU worker that shares no memory with the app, watches it as a
`StopKey`. A closed page (`LeftPages`, which the page's unload event tells) and a cancelled request
(`stop_when_cancelled`) set the same Stop. A run stops after its current
iteration: it ends with its last record, and its figures are the iterations it made.

Why a key and not the event itself: ZeroGPU runs a call in a forked worker, and stops a worker's
generator when the app closes it, but then the run ends without its last item; instead the app
creates the key's file on Stop (`request_stop`), which the worker sees and ends the run after its
current iteration. A `Signal` is whatever a run watches (`is_set`): any of these. Nothing here
imports torch.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol

POLL_S = 0.15  # how often a waiting run looks at its Stop, and a watcher whether its gradio event was cancelled
LOOK_S = 0.01  # a worker looks for its stop key's file at most this often (a look, between two of a run's
# iterations, costs ~2.5 µs here)


def _stop_path(key: str) -> Path:
    if not key.isalnum():  # a key names a file: never a path
        raise ValueError(f"not a stop key: {key!r}")
    return Path(tempfile.gettempdir()) / f"specviz-stop-{key}"


def new_stop_key() -> str:
    """A fresh key for one call (give it back with `forget_stop`)."""
    return uuid.uuid4().hex


def request_stop(key: str) -> None:
    """Ask the call holding `key`, in this process or a forked worker, to stop."""
    _stop_path(key).touch()


def forget_stop(key: str) -> None:
    """The call holding `key` has ended: its file goes."""
    _stop_path(key).unlink(missing_ok=True)


class StopKey:
    """The worker's side of a stop key, used where a `threading.Event` is expected: set once the
    app requested the stop (`request_stop`) or once set here (e.g. the run was closed)."""

    def __init__(self, key: str) -> None:
        self._path = _stop_path(key)
        self._event = threading.Event()
        self._look_at = 0.0  # monotonic time of the next look at the file

    def is_set(self) -> bool:
        if not self._event.is_set() and time.monotonic() >= self._look_at:
            self._look_at = time.monotonic() + LOOK_S
            if self._path.exists():
                self._event.set()
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()


class KeyedStop(threading.Event):
    """A visitor's Stop button for a tab's model calls: set, it also requests the stop keys of the
    visitor's running calls, which the models' thread (or a ZeroGPU worker) watches. gr.State
    deep-copies it per visitor: a copy is a fresh one."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[str] = set()  # the stop keys of the visitor's running calls

    def set(self) -> None:
        super().set()
        for key in list(self.keys):
            request_stop(key)

    def __deepcopy__(self, memo: dict) -> KeyedStop:
        return KeyedStop()


def event_live() -> Callable[[], bool] | None:
    """A check that says whether the gradio event being handled is still running (False once its
    client cancelled it or its job ended); None outside an event. It reads gradio's queue of active
    jobs (gradio 6 has no public call for it); a gradio without that bookkeeping reads as running."""
    try:
        from gradio.context import LocalContext
    except ImportError:
        return None
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return None

    def live() -> bool:
        jobs = getattr(queue, "active_jobs", None)
        if jobs is None:
            return True
        return any(job and any(getattr(e, "_id", None) == event_id for e in job) for job in list(jobs))

    return live


class Signal(Protocol):
    """What a run watches to stop: a threading.Event, a ZeroGPU stop key, a cancelled request."""

    def is_set(self) -> bool: ...


class Cancelled:
    """A Stop signal set once the gradio event being handled is cancelled (`is_set` looks each time)."""

    def __init__(self, live: Callable[[], bool]) -> None:
        self._live = live

    def is_set(self) -> bool:
        return not self._live()


@contextmanager
def stop_when_cancelled(stop: threading.Event, every_s: float = POLL_S) -> Iterator[None]:
    """Within the block, set `stop` once the gradio event being handled is cancelled (a daemon
    thread looks every `every_s` seconds; outside an event, nothing to watch)."""
    live = event_live()
    if live is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every_s):
            if not live():
                stop.set()
                return

    threading.Thread(target=watch, name="specviz-cancel-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


class LeftPages:
    """The Stop signals of each visitor's running runs, by gradio session (a tab, not an address:
    closing it stops that tab's runs only), so that the page's unload event (`stop`) can set them.
    One per app (`TabContext.left`): a module global would mix the visitors of two apps built in one
    process. A tab's runs may share one signal (the Race tab's Stop is one per page), so each run
    removes its own entry, not the signal."""

    def __init__(self) -> None:
        self._stops: dict[str, list[threading.Event]] = {}
        self._lock = threading.Lock()

    @contextmanager
    def watching(self, visitor: str | None, stop: threading.Event) -> Iterator[None]:
        """Within the block, `self.stop(visitor)` sets `stop` (no visitor: nothing to wire)."""
        if visitor is None:
            yield
            return
        with self._lock:
            self._stops.setdefault(visitor, []).append(stop)
        try:
            yield
        finally:
            with self._lock:
                self._stops[visitor].remove(stop)
                if not self._stops[visitor]:
                    del self._stops[visitor]

    def stop(self, visitor: str | None) -> int:
        """Stop every run of a visitor who left; returns how many were running."""
        with self._lock:
            stops = list(self._stops.get(visitor, ())) if visitor is not None else []
        for stop in stops:
            stop.set()
        return len(stops)


@contextmanager
def stop_key_for(stop: KeyedStop | None, request: Any = None, left: LeftPages | None = None) -> Iterator[str]:
    """Within the block, the stop key of one model call of a visitor (`stop`: their Stop button's
    state; `request`: the gradio request, whose closed page stops the call too, through the app's
    `left`); given back after."""
    key = new_stop_key()
    stop = stop if stop is not None else KeyedStop()
    stop.keys.add(key)
    leaving = left.watching(getattr(request, "session_hash", None), stop) if left is not None else nullcontext()
    try:
        with leaving, stop_when_cancelled(stop):
            yield key
    finally:
        stop.keys.discard(key)
        forget_stop(key)
