"""Long-lived threads for model work: `on(name).submit(fn, *args)` runs `fn` on the thread `name`.

A new thread's first model calls pay one-off costs (its own OpenMP thread team among them). A run
stepped by a new thread paid them inside its timed region: on the tiny pair, autoregressive, 32
tokens, median of 6, 0.153 s on a new thread against 0.111 s on one kept alive (on the default pair
the difference was within the noise). A server that started a thread per run also kept some memory
of each: eight visitors, nine races each, in-process, +34 MB against +29 MB once their sessions were
dropped. So the app makes every model call on one thread that lives as long as the process (a
race's runs, and the other tabs' handlers through `running_on`), and lends PEARL another for its
target lane (`run(..., executor=on(PEARL_TARGET))`: a `Worker` submits as an executor does).

Every tensor operation, not only the forwards: a run's caches, an online learner's copy, a
method's streams are made on the models' thread too. PyTorch's OpenMP (libgomp) gives each thread
that runs a parallel operation a team of its own; once the process holds more team threads than
cores, libgomp stops spinning between operations and every small forward pays for waking its team.
On this project's 2-core machine one `torch.zeros` for a KV cache in the page's thread made every
later decoding step of the default target ~1.6x slower, the race's own included, until the process
ended (benchmarks/reliability/README.md, "The first race after the app starts").

Work submitted to a thread runs in order, one item at a time. Threads are daemons (a run still going
at exit does not hold the process) and are started again in a forked child (ZeroGPU's workers).
Nothing here imports torch.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)

MODELS = "specviz-models"  # the app's thread for model calls: every race's, every tab's
PEARL_TARGET = "pearl-target"  # the app's thread for PEARL's target lane (the draft's is MODELS)
_DONE = object()


class Worker:
    """One daemon thread that runs submitted calls in order."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # handed to whoever waits on the future, which reports it
                log.debug("a call on %s raised; its caller gets the exception", self.thread.name, exc_info=e)
                future.set_exception(e)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on this thread and wait for its result (raised here if it raised); called
        from this thread itself, it runs at once (waiting for itself would never end)."""
        if threading.current_thread() is self.thread:
            return fn(*args)
        return self.submit(fn, *args).result()


class _Workers:
    """The process's worker threads by name, and the lock that guards them (both renewed in a forked child)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Worker] = {}
        self.lock = threading.Lock()


_WORKERS = _Workers()


def on(name: str) -> Worker:
    """The process's worker thread `name`, started on first use."""
    with _WORKERS.lock:
        if name not in _WORKERS.by_name:
            _WORKERS.by_name[name] = Worker(name)
        return _WORKERS.by_name[name]


def on_thread(name: str) -> bool:
    """Whether the caller runs on the worker thread `name` (inside a call made with `running_on`)."""
    with _WORKERS.lock:
        worker = _WORKERS.by_name.get(name)
    return worker is not None and threading.current_thread() is worker.thread


def running_on(name: str, fn: Callable) -> Callable:
    """`fn` made to run on the worker thread `name` (a generator function: stepped there), in a copy
    of the caller's context, so what the caller's context holds (gradio's request, for gr.Warning)
    still holds."""
    if inspect.isgeneratorfunction(inspect.unwrap(fn)):

        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Iterator[Any]:
            context, worker = contextvars.copy_context(), on(name)
            gen = fn(*args, **kwargs)  # nothing runs until it is stepped
            try:
                while (item := worker.call(context.run, next, gen, _DONE)) is not _DONE:
                    yield item
            finally:
                worker.call(context.run, gen.close)

        return stepped

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        return on(name).call(contextvars.copy_context().run, functools.partial(fn, *args, **kwargs))

    return called


def _forget_after_fork() -> None:
    _WORKERS.by_name.clear()  # their threads did not survive the fork
    _WORKERS.lock = threading.Lock()  # nor did whoever held the lock


os.register_at_fork(after_in_child=_forget_after_fork)
