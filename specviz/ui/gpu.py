"""Where model calls run: on a Hugging Face ZeroGPU Space, in a forked worker with a GPU; elsewhere, here.

ZeroGPU's `spaces.GPU(fn, duration=...)` runs each call of `fn` in a worker process forked from the
app's: the worker inherits the models the app loaded at start-up (ZeroGPU moves them to the GPU
there), takes the call's arguments pickled and sends back its result, or each item a generator
yields, pickled. Nothing the worker changes in memory comes back. So a model handler is split in
two: a call that takes and returns plain data (names, token ids, option dicts, records), made
through `TabContext.gpu`, and the gradio wiring around it, which stays in the app's process.
Elsewhere `TabContext.gpu` is `no_gpu`, the identity: the same code runs in one process.

A race's Stop must reach a worker that shares no memory with the app. ZeroGPU stops a worker's
generator when the app closes it, but then the run ends without its last item; instead the app
gives each call a stop key (a string) and, on Stop, creates the key's file, which the worker sees
(`StopKey`) and ends the run after its current iteration. Nothing here imports torch.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

# What a GPU call may take, in seconds (ZeroGPU's `duration`: the call is ended past it, and a
# visitor needs at least this much of their GPU quota left to start it; shorter calls are served first).
START_S = 20  # a worker's start (fork, models to the GPU, CUDA's first calls) and the untimed warm-up
SECONDS_PER_TOKEN = 0.1  # a small model's forward pass costs ~20 ms in eager PyTorch at batch 1, and
# a method that drafts γ = 4 tokens and has them all rejected makes 5 passes per token
MOST_S = 300  # no call asks for more, whatever the limits allow
LOOK_S = 0.01  # a worker looks for its stop key's file at most this often (a look, between two of a run's
# iterations, costs ~2.5 µs here)


def no_gpu(fn: Callable | None = None, *, duration: Any = None) -> Callable:
    """`spaces.GPU` where there is no ZeroGPU: `fn` itself (same signature, so one code path)."""
    return fn if fn is not None else (lambda f: f)


def gpu_seconds(tokens: int) -> int:
    """Seconds to ask for a call that decodes about `tokens` tokens, bounded."""
    return int(min(MOST_S, START_S + SECONDS_PER_TOKEN * max(0, int(tokens))))


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

    def __init__(self, key: str):
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
