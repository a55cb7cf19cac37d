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
kernels: the executor the caller lends, `run(..., executor=)`, else one the run starts) and, on
CUDA, each model issues its kernels on its own stream. `concurrent=False` runs the two jobs of a
round one after the other (same tokens): with it, each forward's time is measured without
interference, and the record's `ideal_s` (`extras.PearlExtra`) says how long the step would take if
the shorter job hid behind the longer one, as on hardware with separate resources for the two
models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from specviz.cost.families import PARALLEL
from specviz.decoding import Decoding
from specviz.extras import PearlExtra, Phase
from specviz.methods import register
from specviz.methods.drafting import Draft, ModelDrafter, StaticLength
from specviz.methods.options import MethodOptions, count, flag
from specviz.methods.pearl_lanes import Lanes, Round, TimedLM, busy, optimal_window
from specviz.records import IterationRecord
from specviz.verify import Verdict, verify


@dataclass(frozen=True)
class PearlOptions(MethodOptions):
    window: int = count(
        0,
        least=0,
        limit="speculation_length",
        help="γ: tokens per drafting phase; 0 = round(c), c measured at the start (Theorem 1)",
    )
    concurrent: bool = flag(
        True, help="draft and target at the same time (threads / CUDA streams); False: one after the other"
    )


class Pearl:
    """One PEARL run: the draft's and the target's timed caches, the lanes they run on, the drafts
    no verification has seen yet, and the passes since the last record. Each step is one of the
    paper's phases and returns its record."""

    def __init__(self, dec: Decoding, opts: PearlOptions) -> None:
        self.dec = dec
        self.gamma = opts.window or optimal_window(dec.pair)  # measured before the run's clock starts
        dec.now()  # start the clock in this thread, before a second thread reads it
        self.draft_lm, self.target = TimedLM(dec.pair.draft_model, dec.now), TimedLM(dec.pair.target, dec.now)
        seed = int(
            torch.randint(2**62, (1,), generator=dec.generator, device=dec.generator.device)
        )  # the draft samples in its own thread
        self.drafter = ModelDrafter(
            dec, lm=self.draft_lm, generator=torch.Generator(self.draft_lm.device).manual_seed(seed)
        )
        self.policy = StaticLength(self.gamma)
        self.lanes = Lanes(opts.concurrent, self.draft_lm.device, self.target.device, dec.executor)
        self.pending = NO_DRAFT  # drafts after dec.ids that no verification has seen yet
        self.log, self.t_start = Round(), dec.now()

    # ----- the paper's phases -----
    def draft_alone(self) -> None:
        """Ablation without pre-verify: the draft drafts while the target waits."""
        drafted, _ = self.round("draft", self.draft_job(self.dec.ids, self.window()), None)
        assert drafted is not None  # the loop drafts alone only with a window of at least one token
        self.pending = drafted

    def pre_verify(self) -> IterationRecord:
        """The draft proposes x_1..x_k while the target reads the prefix; p(. | prefix) judges x_1
        alone. Accepted: x_1 is emitted (the target's token after it is not known yet) and x_2..
        stay pending. Rejected: the target's correction is emitted and the rest is dropped."""
        dec, position = self.dec, len(self.dec.ids)
        draft, rows = self.round("pre-verify", self.draft_job(dec.ids, self.window()), self.target_job(dec.ids, 1))
        assert rows is not None  # the round ran the target's job
        draft = draft or NO_DRAFT
        first, q = draft.tokens[:1], draft.q  # q [k, V]: None only for NO_DRAFT, which has no tokens
        q_first = q[:1].to(rows.device) if q is not None and first else None
        verdict = verify(first, rows, q_first, dec.sampling, dec.generator)
        accepted = bool(first) and verdict.accepted == 1
        record = self.record(first, verdict, "pre-verify", dropped=() if accepted else tuple(draft.tokens[1:]))
        if accepted and q is not None:
            self.pending = Draft(draft.tokens[1:], q[1:], 0)
        else:
            self.drafter.rollback(position, 0)
            self.target.truncate(position)
        return record

    def post_verify(self, draft_ahead: bool = True) -> IterationRecord:
        """The target verifies the pending drafts while the draft drafts past them as if all were
        accepted. All accepted: the new drafts take the bonus token's place and the next
        verification starts at once (the draft length grows). Else both caches roll back."""
        dec, position, pending = self.dec, len(self.dec.ids), self.pending
        m, context = len(pending.tokens), dec.ids + pending.tokens
        k = min(self.gamma, dec.remaining - m - 1) if draft_ahead else 0
        self.target.truncate(min(len(self.target), position - 1))  # re-read the last committed token for p(x_1)
        mode = "post-verify" if k else "verify"
        ahead, rows = self.round(mode, self.draft_job(context, k), self.target_job(context, m + 1))
        assert rows is not None and pending.q is not None  # the target's job ran; pending: the draft model's
        verdict = verify(pending.tokens, rows, pending.q.to(rows.device), dec.sampling, dec.generator)
        keep_ahead = ahead is not None and verdict.accepted == m
        if keep_ahead:
            verdict = replace(verdict, next_token=None)  # the drafts ahead stand where the bonus token would
        record = self.record(
            pending.tokens, verdict, mode, drafted_ahead=tuple(ahead.tokens) if ahead else (), ahead_kept=keep_ahead
        )
        if ahead is not None and keep_ahead:
            self.pending = ahead
        else:
            self.pending = NO_DRAFT
            self.drafter.rollback(position, verdict.accepted)
            self.target.truncate(position + verdict.accepted)
        return record

    # ----- the jobs of a round, and its record -----
    def window(self) -> int:
        return min(self.gamma, self.dec.remaining - 1)

    def draft_job(self, context: list[int], k: int) -> Callable[[], Draft] | None:
        return (lambda: self.drafter.draft_after(context, k, self.policy)) if k > 0 else None

    def target_job(self, context: list[int], n_logits: int) -> Callable[[], torch.Tensor]:
        return lambda: self.target.forward(context[len(self.target) :], n_logits=n_logits)  # [n_logits, V]

    def round(
        self,
        mode: str,
        draft_job: Callable[[], Draft] | None,
        target_job: Callable[[], torch.Tensor] | None,
    ) -> tuple[Draft | None, torch.Tensor | None]:
        start = self.dec.now()
        if target_job is None:
            drafted, rows, parallel = draft_job() if draft_job is not None else None, None, False
        else:
            drafted, rows, parallel = self.lanes.run(draft_job, target_job)
        self.log.add(
            mode, start, self.dec.now(), self.draft_lm.take_intervals(), self.target.take_intervals(), parallel
        )
        return drafted, rows

    def record(self, drafted: list[int], verdict: Verdict, mode: str, **mode_fields: Any) -> IterationRecord:
        """The record of the rounds since the last one; `mode_fields`: the mode's own PearlExtra fields."""
        log, t_end = self.log, self.dec.now()
        pearl = PearlExtra(
            mode=mode,
            window=self.gamma,
            parallel_threads=self.lanes.threads,
            draft_intervals=tuple((start, end) for start, end in log.draft),
            target_intervals=tuple((start, end) for start, end in log.target),
            phases=tuple(Phase(**p) for p in log.phases),
            ideal_s=t_end - self.t_start - log.deficit,
            **mode_fields,
        )
        r = self.dec.commit(
            drafted=drafted,
            verdict=verdict,
            speculation_length=len(drafted),
            t_start=self.t_start,
            t_drafted=self.t_start,
            draft_forwards=len(log.draft),
            target_forwards=len(log.target),
            extra=(pearl,),
            t_end=t_end,
            lane_ms=(busy(log.draft) * 1e3, busy(log.target) * 1e3),
        )
        self.log, self.t_start = Round(), self.dec.now()
        return r


NO_DRAFT = Draft([], None, 0)


def pearl_decoding(
    dec: Decoding, opts: PearlOptions, pre_verify: bool = True, post_verify: bool = True
) -> Iterator[IterationRecord]:
    """PEARL's loop (Algorithm 1); with pre_verify=False or post_verify=False, the ablations of its Table 3."""
    run = Pearl(dec, opts)
    try:
        while not dec.done:
            if run.pending.tokens:
                yield run.post_verify(draft_ahead=post_verify)
            elif pre_verify or run.window() == 0:
                yield run.pre_verify()
            else:
                run.draft_alone()
    finally:
        run.lanes.close()


PAPER = "Liu et al. 2024, Parallel Speculative Decoding with Adaptive Draft Length (PEARL)"


def chosen_window(records: list[IterationRecord], options: dict[str, Any]) -> dict[str, str]:
    """The window a run measured for itself when its option left it at 0 (auto), for its panel."""
    if options.get("window") != 0:
        return {}
    pearl = records[-1].pearl() if records else None
    how = "round(T_target ÷ T_draft), measured for this pair"
    return {"window": f"{pearl.window} (the default 0: auto, {how})" if pearl else f"0 (auto: {how} when it starts)"}


@register(
    "pearl",
    label="PEARL",
    short_label="PEARL",
    description=(
        "Draft and target run at the same time: pre-verify the first draft while drafting, keep drafting while"
        " verifying."
    ),
    paper=PAPER,
    options=PearlOptions,
    family=PARALLEL,
    dynamic_length=True,
    in_default_race=True,
    rank=30,
    extras=(PearlExtra,),
    chosen=chosen_window,
)
def pearl(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts)


@register(
    "pearl-no-pre",
    label="PEARL w/o pre-verify",
    short_label="PEARL no pre",
    description="PEARL without pre-verify: the target waits while the first drafts of a phase are drafted.",
    paper=PAPER + ", Table 3 ablation",
    options=PearlOptions,
    family=PARALLEL,
    dynamic_length=True,
    rank=31,
    extras=(PearlExtra,),
    chosen=chosen_window,
)
def pearl_no_pre(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts, pre_verify=False)


@register(
    "pearl-no-post",
    label="PEARL w/o post-verify",
    short_label="PEARL no post",
    description="PEARL without post-verify: the draft waits while the target verifies.",
    paper=PAPER + ", Table 3 ablation",
    options=PearlOptions,
    family=PARALLEL,
    dynamic_length=True,
    rank=32,
    extras=(PearlExtra,),
    chosen=chosen_window,
)
def pearl_no_post(dec: Decoding, opts: PearlOptions) -> Iterator[IterationRecord]:
    return pearl_decoding(dec, opts, post_verify=False)
