"""PEARL's machinery for running a draft and a target at the same time, and for timing it.

`TimedLM` notes when each forward pass really ran; `Lanes` runs a round's draft job and target job
concurrently (the target's on an executor's thread: the caller's, or one the run starts; its own
CUDA stream on GPU; the CPU's intra-op threads split between them) or one after the other; `Round`
gathers the passes between two records and the time full overlap would have saved.
`optimal_window` is Theorem 1's window γ = round(c), with c = target / draft forward time measured
once per pair.
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel

from specviz.cost.formulas import pearl_window
from specviz.models.devices import synchronize
from specviz.models.kv import CachedLM

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair


class TimedLM(CachedLM):
    """A CachedLM that notes the real start and end of every forward pass on the run's clock."""

    def __init__(self, model: PreTrainedModel, clock: Callable[[], float]) -> None:
        super().__init__(model)
        self.clock = clock
        self.intervals: list[tuple[float, float]] = []  # (start, end) of each pass, seconds

    def forward(self, new_tokens: list[int], n_logits: int = 1) -> torch.Tensor:
        start = self.clock()
        logits = super().forward(new_tokens, n_logits)
        synchronize(self.device)
        self.intervals.append((start, self.clock()))
        return logits

    def take_intervals(self) -> list[list[float]]:
        """The intervals noted since the last call (and forget them)."""
        out, self.intervals = [list(i) for i in self.intervals], []
        return out


@torch.inference_mode()
def forward_time_ratio(pair: ModelPair, context: int = 32, repeats: int = 5) -> float:
    """c = target / draft time of one decoding forward pass (one new token after `context`)."""

    def seconds(model: PreTrainedModel) -> float:
        lm = TimedLM(model, time.perf_counter)
        lm.forward([(7 * i + 3) % pair.vocab_size for i in range(context)])  # prefill, not timed
        for _ in range(repeats + 1):  # the first decoding pass warms up
            lm.forward([1])
        return statistics.median(e - s for s, e in lm.intervals[2:])

    return seconds(pair.target) / seconds(pair.draft_model)


# c measured once per (draft, target) pair of model objects: a cache, like the pair loader's
_WINDOWS: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, int]] = weakref.WeakKeyDictionary()


def optimal_window(pair: ModelPair) -> int:
    """PEARL's window γ = round(c) (Theorem 1); c measured on the first call for a pair."""
    assert pair.draft is not None, "PEARL drafts with the pair's draft (the runner refuses a pair without one)"
    per_target = _WINDOWS.setdefault(pair.draft, {})
    if id(pair.target) not in per_target:
        per_target[id(pair.target)] = pearl_window(forward_time_ratio(pair))
    return per_target[id(pair.target)]


class Lanes:
    """Runs a round's draft job and target job at the same time (the target's on `executor`'s thread,
    each on its own CUDA stream on GPU), or one after the other when not concurrent. On CPU the
    intra-op threads are split between the two jobs (OpenMP thread counts are per thread); with one
    thread in all (OMP_NUM_THREADS=1) each job gets one, i.e. a core each.

    `executor` (submit(fn, *args) -> Future, as `concurrent.futures`' do) is lent by the caller, who
    keeps it across runs (the app: a thread as old as the process, so that no run pays a new thread's
    first model calls inside its timing); without one the lanes start their own thread for the run
    and `close` ends it."""

    def __init__(
        self, concurrent: bool, draft_device: torch.device, target_device: torch.device, executor: Any = None
    ) -> None:
        self._owned = (
            ThreadPoolExecutor(1, thread_name_prefix="pearl-target-run") if concurrent and executor is None else None
        )
        self.target_lane = (executor if executor is not None else self._owned) if concurrent else None
        cuda = concurrent and draft_device.type == "cuda" and target_device.type == "cuda"
        self.streams = (torch.cuda.Stream(draft_device), torch.cuda.Stream(target_device)) if cuda else (None, None)
        self.total = torch.get_num_threads()  # a job that runs alone gets them all
        self.threads = (
            (max(1, self.total // 2), max(1, self.total - self.total // 2)) if concurrent else (self.total,) * 2
        )

    @staticmethod
    def _on(stream: Any, threads: int, job: Callable[[], Any]) -> Any:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            if stream is None:
                return job()
            # The job reads what the default stream wrote (the draft's fresh cache, the target's last
            # rows): its kernels start after the default stream's queued ones, on the GPU, not the host.
            stream.wait_stream(torch.cuda.current_stream(stream.device))
            with torch.cuda.stream(stream):
                out = job()
            stream.synchronize()
            return out
        finally:
            torch.set_num_threads(before)

    def run(self, draft_job: Callable[[], Any] | None, target_job: Callable[[], Any]) -> tuple[Any, Any, bool]:
        """(draft result or None, target result, whether the two ran concurrently)."""
        (draft_stream, target_stream), (draft_threads, target_threads) = self.streams, self.threads
        if draft_job is None or self.target_lane is None:
            drafted = self._on(draft_stream, self.total, draft_job) if draft_job is not None else None
            return drafted, self._on(target_stream, self.total, target_job), False
        future = self.target_lane.submit(self._on, target_stream, target_threads, target_job)
        try:
            drafted = self._on(draft_stream, draft_threads, draft_job)
        finally:
            target = future.result()  # never leave the target's thread running on our caches
        return drafted, target, True

    def close(self) -> None:
        """End the thread these lanes started (none when the caller lent its executor)."""
        if self._owned is not None:
            self._owned.shutdown(wait=True)


def overlap(a: list[list[float]], b: list[list[float]]) -> float:
    """Seconds during which some interval of `a` and some interval of `b` both ran."""
    return sum(max(0.0, min(ae, be) - max(as_, bs)) for as_, ae in a for bs, be in b)


def busy(intervals: list[list[float]]) -> float:
    return sum(e - s for s, e in intervals)


class Round:
    """The draft and target forward passes since the last record, and the time parallelism could save."""

    def __init__(self) -> None:
        self.draft: list[list[float]] = []
        self.target: list[list[float]] = []
        self.phases: list[dict[str, Any]] = []  # one per round: mode, start, end, parallel
        self.deficit = 0.0  # seconds by which the rounds fell short of full overlap

    def add(
        self, mode: str, start: float, end: float, draft: list[list[float]], target: list[list[float]], parallel: bool
    ) -> None:
        self.draft += draft
        self.target += target
        self.phases.append({"mode": mode, "start": start, "end": end, "parallel": parallel})
        if mode in ("pre-verify", "post-verify"):  # PEARL overlaps these two jobs on separate hardware
            self.deficit += min(busy(draft), busy(target)) - overlap(draft, target)
