"""The server's bound on the online learners that hold weights of their own, all visitors together.

A learner serves the pair's draft (shared, read only) until its first update; from then on it
holds a serving copy of the draft, a float32 trainee and the optimiser's two moments (gradients
only while it updates): hundreds of MB of RSS for the default pair's 25M-parameter float32 draft
(measured in benchmarks/reliability/README.md). On a public page every visitor who runs
OSD eight times, or opens the Online-learning tab, would keep that much for as long as their session
lives. `ADAPTED_DRAFTS` keeps at most `capacity` such learners: when one more takes its weights,
the least recently used other learner gives its own back and serves the pair's draft again
(`OnlineLearner.release`). A learner counts against a pool only when it is given one
(`OnlineLearner(..., pool=)`, or `bounded`): the library's learners have none and are unbounded.
The app sizes the pool from its limits at launch (`size_pools`, `SPECVIZ_LIMIT_ADAPTED_DRAFTS`).

`DRAFT_FILES` bounds what the adapted drafts' downloads keep on disk the same way: a learner's
draft is written once per version (a second click hands out the same file), at most `capacity`
files at once, the least recently handed out deleted first (a download wrote a new 96 MB file per
click before, never deleted: issue 41).
"""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any


class AdaptedDrafts:
    """Learners holding weights of their own, least recently used first."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity  # None: no bound
        self._held: OrderedDict[int, weakref.ref] = OrderedDict()
        self._lock = threading.RLock()  # a weakref's callback may run while this thread holds it

    def hold(self, learner: Any) -> None:
        """`learner` holds (or keeps using) its own weights: it becomes the most recently used, and
        the least recently used others release theirs while more than `capacity` hold any."""
        with self._lock:
            key = id(learner)
            self._held[key] = weakref.ref(learner, functools.partial(self._forgotten, key))
            self._held.move_to_end(key)
            evicted = self._over_capacity(learner)
        for other in evicted:  # outside the lock: releasing may wait for a learner's update to finish
            other.release()

    def _over_capacity(self, keep: Any) -> list[Any]:
        evicted: list[Any] = []
        for key, ref in list(self._held.items()):
            if self.capacity is None or len(self._held) <= self.capacity:
                break
            other = ref()
            if other is None:
                self._held.pop(key, None)
            elif other is not keep and not other.busy:  # a learner training in the background keeps its weights
                self._held.pop(key)
                evicted.append(other)
        return evicted

    def _forgotten(self, key: int, _ref: weakref.ref) -> None:
        """A held learner was garbage-collected (its weakref's callback)."""
        self._forget(key)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)

    def drop(self, learner: Any) -> None:
        """`learner` holds no weights of its own any more."""
        self._forget(id(learner))

    def __len__(self) -> int:
        with self._lock:
            return sum(ref() is not None for ref in self._held.values())


ADAPTED_DRAFTS = AdaptedDrafts()  # the server's: unbounded until `size_pools` sets its capacity


class DraftFiles:
    """Downloads of learners' drafts on disk: one file per learner and draft version, least recently
    handed out first."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity  # None: no bound
        self._files: OrderedDict[int, tuple[weakref.ref, int, Path]] = OrderedDict()  # id -> (learner, version, file)
        self._lock = threading.Lock()

    def file_for(self, learner: Any, folder: Path) -> Path:
        """The file of `learner`'s draft at its current version: the one written before, else written
        now into `folder` (its previous version's file deleted, and the oldest others past `capacity`)."""
        with self._lock:  # one write at a time: two clicks of one visitor write one file
            key = id(learner)
            held = self._files.pop(key, None)
            if held is not None:
                ref, version, path = held
                if version == learner.version and ref() is learner and path.exists():
                    self._files[key] = held  # the most recently handed out
                    return path
                path.unlink(missing_ok=True)
            path = folder / f"osd-draft-{uuid.uuid4().hex[:12]}-v{learner.version}.safetensors"
            learner.save(path)
            self._files[key] = (weakref.ref(learner), learner.version, path)
            while self.capacity is not None and len(self._files) > self.capacity:
                _, (_, _, oldest) = self._files.popitem(last=False)
                oldest.unlink(missing_ok=True)
            return path

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)


DRAFT_FILES = DraftFiles()  # the server's: unbounded until `size_pools` sets its capacity


def size_pools(limits: Any) -> None:
    """Size the server-wide pools from the app's limits (`specviz.serving.limits.AppLimits`), at launch."""
    ADAPTED_DRAFTS.capacity = limits.adapted_drafts
    DRAFT_FILES.capacity = limits.adapted_drafts  # a file per learner that may hold an adapted draft


def bounded(state: Any) -> Any:
    """A stateful method's state, its adapted weights counted against `ADAPTED_DRAFTS` where it is an
    online learner without a pool of its own (a visitor's learner: the least recently used gives
    its weights back first)."""
    from specviz.osd.learner import OnlineLearner

    if isinstance(state, OnlineLearner) and state.pool is None:
        state.pool = ADAPTED_DRAFTS
    return state
