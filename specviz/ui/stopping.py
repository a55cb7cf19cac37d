"""A Stop button for a tab's model call: one stop key per call, set by the button, a closed page or a
cancelled request (the models' thread, or a ZeroGPU worker, watches the key: `specviz.ui.gpu`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from specviz.ui.gpu import KeyedStop, forget_stop, new_stop_key
from specviz.ui.turns import stop_when_cancelled, stopped_on_leave


@contextmanager
def stop_key_for(stop: KeyedStop | None, request: Any = None) -> Iterator[str]:
    """Within the block, the stop key of one model call of a visitor (`stop`: their Stop button's
    state; `request`: the gradio request, whose closed page stops the call too); given back after."""
    key = new_stop_key()
    stop = stop if stop is not None else KeyedStop()
    stop.keys.add(key)
    try:
        with stopped_on_leave(getattr(request, "session_hash", None), stop), stop_when_cancelled(stop):
            yield key
    finally:
        stop.keys.discard(key)
        forget_stop(key)
