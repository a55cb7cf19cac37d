"""Where model calls run: on a Hugging Face ZeroGPU Space, in a forked worker with a GPU; elsewhere, here.

ZeroGPU's `spaces.GPU(fn, duration=...)` runs each call of `fn` in a worker process forked from the
app's: the worker inherits the models the app loaded at start-up (ZeroGPU moves them to the GPU
there), takes the call's arguments pickled and sends back its result, or each item a generator
yields, pickled. Nothing the worker changes in memory comes back. So a model handler is split in
two: a call that takes and returns plain data (names, token ids, option dicts, records), made
through `TabContext.gpu`, and the gradio wiring around it, which stays in the app's process.
Elsewhere `TabContext.gpu` is `no_gpu`, the identity: the same code runs in one process.

A Stop reaches a worker through its stop key (`specviz.serving.stops`). Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# What a GPU call may take, in seconds (ZeroGPU's `duration`: the call is ended past it, and a
# visitor needs at least this much of their GPU quota left to start it; shorter calls are served first).
START_S = 20  # a worker's start (fork, models to the GPU, CUDA's first calls) and the untimed warm-up
SECONDS_PER_TOKEN = 0.1  # a small model's forward pass costs ~20 ms in eager PyTorch at batch 1, and
# a method that drafts γ = 4 tokens and has them all rejected makes 5 passes per token
MOST_S = 300  # no call asks for more, whatever the limits allow


def no_gpu(fn: Callable | None = None, *, duration: Any = None) -> Callable:
    """`spaces.GPU` where there is no ZeroGPU: `fn` itself (same signature, so one code path)."""
    return fn if fn is not None else (lambda f: f)


def gpu_seconds(tokens: int) -> int:
    """Seconds to ask for a call that decodes about `tokens` tokens, bounded."""
    return int(min(MOST_S, START_S + SECONDS_PER_TOKEN * max(0, int(tokens))))
