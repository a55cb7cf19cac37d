"""PEARL: the draft and the target run at the same time, and the draft length adapts.

Liu et al. 2024, "Parallel Speculative Decoding with Adaptive Draft Length" (Algorithms 1-2).
Vanilla speculative decoding alternates: the target waits while the draft drafts, the draft waits
while the target verifies ("mutual waiting"). PEARL overlaps the two:

- pre-verify (no unverified drafts): while the draft proposes x_1..x_γ, the target reads the
  prefix and so already has p(. | prefix), enough to check x_1. If x_1 is rejected the rest is
  dropped and drafting restarts from the corrected prefix, without a verification phase.
- post-verify (unverified drafts pending): while the target verifies them, the draft keeps
  drafting γ more as if all were accepted. If they all are, the target's bonus token is not used:
  the new drafts take its place and the next verification starts at once (so the draft length
  grows while the draft keeps being right). On a rejection both caches roll back and the method
  returns to pre-verify.

γ (the window) defaults to round(c), c = target forward time / draft forward time (Theorem 1).
Each acceptance decision goes through `specviz.verify.verify` exactly once, with fresh draws from
the run's generator; the draft samples with its own generator (it runs in another thread), so the
output is distributed as the target's and greedy output equals autoregressive decoding.

Real concurrency: the target's job runs in a second thread (torch releases the GIL inside its
kernels) and, on CUDA, each model issues its kernels on its own stream. `concurrent=False` runs the
two jobs of a round one after the other (same tokens): with it, each forward's time is measured
without interference, and `extra["ideal_s"]` says how long the step would take if the shorter job
hid behind the longer one, as on hardware with separate resources for the two models.
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch

from specviz.cost.formulas import pearl_window
from specviz.decoding import Decoding
from specviz.limits import check_count
from specviz.methods import register
from specviz.methods.drafting import Draft, ModelDrafter, StaticLength
from specviz.models.kv import CachedLM
from specviz.records import IterationRecord
from specviz.verify import Verdict, verify


@dataclass(frozen=True)
class PearlOptions:
    window: int = 0  # γ: tokens per drafting phase; 0 = round(c), c measured at the start (Theorem 1)
    concurrent: bool = True  # draft and target at the same time (threads / CUDA streams); False: one after the other

    def __post_init__(self) -> None:
        check_count("window (0: automatic, round(c))", self.window, least=0)


def synchronize(device: torch.device) -> None:
    """Wait for this thread's queued kernels, so that a timestamp marks real completion."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class TimedLM(CachedLM):
    """A CachedLM that notes the real start and end of every forward pass on the run's clock."""

    def __init__(self, model: torch.nn.Module, clock: Callable[[], float]):
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
def forward_time_ratio(pair: Any, context: int = 32, repeats: int = 5) -> float:
    """c = target / draft time of one decoding forward pass (one new token after `context`)."""

    def seconds(model: torch.nn.Module) -> float:
        lm = TimedLM(model, time.perf_counter)
        lm.forward([(7 * i + 3) % pair.vocab_size for i in range(context)])  # prefill, not timed
        for _ in range(repeats + 1):  # the first decoding pass warms up
            lm.forward([1])
        return statistics.median(e - s for s, e in lm.intervals[2:])

    return seconds(pair.target) / seconds(pair.draft)


# c measured once per (draft, target) pair of model objects: a cache, like the pair loader's
_WINDOWS: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, int]] = weakref.WeakKeyDictionary()


def optimal_window(pair: Any) -> int:
    """PEARL's window γ = round(c) (Theorem 1); c measured on the first call for a pair."""
    per_target = _WINDOWS.setdefault(pair.draft, {})
    if id(pair.target) not in per_target:
        per_target[id(pair.target)] = pearl_window(forward_time_ratio(pair))
    return per_target[id(pair.target)]


class Lanes:
    """Runs a round's draft job and target job at the same time (the target's in a second thread,
    each on its own CUDA stream on GPU), or one after the other when not concurrent. On CPU the
    intra-op threads are split between the two jobs (OpenMP thread counts are per thread); with one
    thread in all (OMP_NUM_THREADS=1) each job gets one, i.e. a core each."""

    def __init__(self, concurrent: bool, draft_device: torch.device, target_device: torch.device):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pearl-target") if concurrent else None
        cuda = concurrent and draft_device.type == "cuda" and target_device.type == "cuda"
        self.streams = (torch.cuda.Stream(draft_device), torch.cuda.Stream(target_device)) if cuda else (None, None)
        self.total = torch.get_num_threads()  # a job that runs alone gets them all
        self.threads = (max(1, self.total // 2), max(1, self.total - self.total // 2)) if concurrent else (self.total,) * 2

    @staticmethod
    def _on(stream: Any, threads: int, job: Callable[[], Any]) -> Any:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            if stream is None:
                return job()
            with torch.cuda.stream(stream):
                out = job()
            stream.synchronize()
            return out
        finally:
            torch.set_num_threads(before)

    def run(self, draft_job: Callable[[], Any] | None, target_job: Callable[[], Any]) -> tuple[Any, Any, bool]:
        """(draft result or None, target result, whether the two ran concurrently)."""
        (draft_stream, target_stream), (draft_threads, target_threads) = self.streams, self.threads
        if draft_job is None or self.pool is None:
            drafted = self._on(draft_stream, self.total, draft_job) if draft_job is not None else None
            return drafted, self._on(target_stream, self.total, target_job), False
        future = self.pool.submit(self._on, target_stream, target_threads, target_job)
        try:
            drafted = self._on(draft_stream, draft_threads, draft_job)
        finally:
            target = future.result()  # never leave the target's thread running on our caches
        return drafted, target, True

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


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

    def add(self, mode: str, start: float, end: float, draft: list[list[float]], target: list[list[float]], parallel: bool) -> None:
        self.draft += draft
        self.target += target
        self.phases.append({"mode": mode, "start": start, "end": end, "parallel": parallel})
        if mode in ("pre-verify", "post-verify"):  # PEARL overlaps these two jobs on separate hardware
            self.deficit += min(busy(draft), busy(target)) - overlap(draft, target)


def pre_verify_first(dec: Decoding, draft: Draft, rows: torch.Tensor) -> tuple[list[int], Verdict, bool]:
    """Pre-verify's check: p(. | prefix) (`rows`, [1, V]) can judge only the first draft token.
    Returns that token (none if nothing was drafted), the verdict, and whether it was accepted."""
    first = draft.tokens[:1]
    q_first = draft.q[:1].to(rows.device) if first else None
    verdict = verify(first, rows.expand(len(first) + 1, -1), q_first, dec.sampling, dec.generator)
    return first, verdict, bool(first) and verdict.accepted == 1


def pearl_decoding(dec: Decoding, opts: PearlOptions, pre_verify: bool = True, post_verify: bool = True) -> Iterator[IterationRecord]:
    """PEARL's loop; with pre_verify=False or post_verify=False, the ablations of its Table 3."""
    gamma = opts.window or optimal_window(dec.pair)  # measured before the run's clock starts
    dec.now()  # start the clock in this thread, before a second thread reads it
    draft_lm, target = TimedLM(dec.pair.draft, dec.now), TimedLM(dec.pair.target, dec.now)
    seed = int(torch.randint(2**62, (1,), generator=dec.generator))
    drafter = ModelDrafter(dec, lm=draft_lm, generator=torch.Generator(draft_lm.device).manual_seed(seed))
    policy = StaticLength(gamma)
    lanes = Lanes(opts.concurrent, draft_lm.device, target.device)
    pending = Draft([], None, 0)  # drafts after dec.ids that no verification has seen yet
    log, t_start = Round(), dec.now()

    def draft_after(context: list[int], k: int) -> Callable[[], Draft] | None:
        return (lambda: drafter.propose(k, policy, context)) if k > 0 else None

    def target_reads(context: list[int], n_logits: int) -> Callable[[], torch.Tensor]:
        return lambda: target.forward(context[len(target) :], n_logits=n_logits)  # [n_logits, V]

    def round_(mode: str, draft_job, target_job) -> tuple[Draft | None, torch.Tensor | None]:
        start = dec.now()
        if target_job is None:
            drafted, rows, parallel = draft_job(), None, False
        else:
            drafted, rows, parallel = lanes.run(draft_job, target_job)
        log.add(mode, start, dec.now(), draft_lm.take_intervals(), target.take_intervals(), parallel)
        return drafted, rows

    def record(drafted: list[int], verdict, bonus: bool, mode: str, extra: dict[str, Any]) -> IterationRecord:
        nonlocal log, t_start
        r = dec.commit(
            drafted=drafted, verdict=verdict, speculation_length=len(drafted), t_start=t_start, t_drafted=t_start,
            draft_forwards=len(log.draft), target_forwards=len(log.target), bonus=bonus,
            extra={"mode": mode, "window": gamma, "parallel_threads": list(lanes.threads), "draft_intervals": log.draft, "target_intervals": log.target,
                   "phases": log.phases, **extra},
        )  # fmt: skip
        wall = r.t_end - r.t_start
        r = replace(r, draft_ms=busy(log.draft) * 1e3, verify_ms=busy(log.target) * 1e3,
                    extra={**r.extra, "ideal_s": wall - log.deficit})  # fmt: skip
        log, t_start = Round(), dec.now()
        return r

    try:
        while not dec.done:
            position = len(dec.ids)
            if not pending.tokens:
                k = min(gamma, dec.remaining - 1)
                if not pre_verify and k > 0:  # ablation: draft alone while the target waits
                    pending, _ = round_("draft", draft_after(dec.ids, k), None)
                    continue
                # pre-verify: the draft proposes x_1..x_k while the target reads the prefix
                draft, rows = round_("pre-verify", draft_after(dec.ids, k), target_reads(dec.ids, 1))
                draft = draft or Draft([], None, 0)
                first, verdict, accepted = pre_verify_first(dec, draft, rows)
                # accepted: x_1 is emitted alone (the bonus row would be the wrong one); x_2.. go on
                yield record(first, verdict, not accepted, "pre-verify", {"dropped": [] if accepted else draft.tokens[1:]})
                if accepted:
                    pending = Draft(draft.tokens[1:], draft.q[1:], 0)
                else:
                    drafter.rollback(position, 0)
                    target.truncate(position)
                continue
            # post-verify: the target verifies the pending drafts while the draft drafts past them
            m, context = len(pending.tokens), dec.ids + pending.tokens
            k = min(gamma, dec.remaining - m - 1) if post_verify else 0
            target.truncate(min(len(target), position - 1))  # re-read the last committed token for p(x_1)
            ahead, rows = round_("post-verify" if k else "verify", draft_after(context, k), target_reads(context, m + 1))
            verdict = verify(pending.tokens, rows, pending.q.to(rows.device), dec.sampling, dec.generator)
            keep_ahead = ahead is not None and verdict.accepted == m
            extra = {"drafted_ahead": ahead.tokens if ahead else [], "ahead_kept": keep_ahead}
            yield record(pending.tokens, verdict, not keep_ahead, "post-verify" if k else "verify", extra)
            if keep_ahead:
                pending = ahead  # the next verification starts at once: the draft length grows
            else:
                pending = Draft([], None, 0)
                drafter.rollback(position, verdict.accepted)
                target.truncate(position + verdict.accepted)
    finally:
        lanes.close()


PAPER = "Liu et al. 2024, Parallel Speculative Decoding with Adaptive Draft Length (PEARL)"


@register(
    "pearl",
    label="PEARL",
    description="Draft and target run at the same time: pre-verify the first draft while drafting, keep drafting while verifying.",
    paper=PAPER,
    options=PearlOptions,
    rank=30,
)
def pearl(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts)


@register(
    "pearl-no-pre",
    label="PEARL w/o pre-verify",
    description="PEARL without pre-verify: the target waits while the first drafts of a phase are drafted.",
    paper=PAPER + ", Table 3 ablation",
    options=PearlOptions,
    rank=31,
)
def pearl_no_pre(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts, pre_verify=False)


@register(
    "pearl-no-post",
    label="PEARL w/o post-verify",
    description="PEARL without post-verify: the draft waits while the target verifies.",
    paper=PAPER + ", Table 3 ablation",
    options=PearlOptions,
    rank=32,
)
def pearl_no_post(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts, post_verify=False)
