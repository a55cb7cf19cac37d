"""The state every method shares during one run: committed tokens, stop rules, the clock, the RNG,
and what the caller lends the run (a stateful method's session, an executor for a second lane).

Methods decide what to draft and how to verify it; `Decoding.commit` is the one place that turns
a verification verdict into emitted tokens, applies EOS and `max_new_tokens`, and writes the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from specviz.extras import CommitExtra, Extra, in_order
from specviz.models.devices import synchronize
from specviz.models.pair import ModelPair
from specviz.records import IterationRecord
from specviz.sampling import SamplingConfig
from specviz.verify import Verdict


class Decoding:
    def __init__(
        self,
        pair: ModelPair,
        prompt_ids: list[int],
        method: str,
        max_new_tokens: int,
        sampling: SamplingConfig,
        seed: int,
        session: Any = None,
        executor: Any = None,
        preview: Callable[[Sequence[int]], None] | None = None,
    ) -> None:
        self.pair = pair
        self.method = method
        self.sampling = sampling
        self.ids: list[int] = list(prompt_ids)  # prompt + every token committed so far
        self.prompt_len = len(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.eos = frozenset(pair.eos_token_ids)
        self.device = pair.device
        self.seed = seed  # what an outside engine is given to sample with (specviz's own draws use `generator`)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.iteration = 0
        self.done = False
        self._t0: float | None = None
        self.session = (
            session  # what a series of runs carries (the method's `session`: OSD's learner); None: a lone run
        )
        self.executor = (
            executor  # submit(fn, *args) -> Future: where a method runs a second lane (PEARL's target); None: its own
        )
        # who is shown the tokens a method has emitted but cannot record yet (an engine that sends its steps'
        # counts with its last token); None: nobody watches
        self.preview = preview

    def now(self) -> float:
        """Seconds since the run started; the clock starts at the first call (the first step). On a
        GPU it first waits for the work queued so far: a timestamp marks work done, not work queued."""
        synchronize(self.device)
        if self._t0 is None:
            self._t0 = time.perf_counter()
        return time.perf_counter() - self._t0

    @property
    def remaining(self) -> int:
        """Tokens still allowed before `max_new_tokens` is reached."""
        return self.max_new_tokens - (len(self.ids) - self.prompt_len)

    def commit(
        self,
        *,
        drafted: list[int],
        verdict: Verdict,
        speculation_length: int,
        t_start: float,
        t_drafted: float,
        draft_forwards: int,
        target_forwards: int = 1,
        extra: Sequence[Extra] = (),
        t_end: float | None = None,
        lane_ms: tuple[float, float] | None = None,
    ) -> IterationRecord:
        """Append drafted[:accepted] + the target's token, cut at EOS or the token budget, and record it:
        the one place a record is written. A verdict without a target token (every draft accepted, no
        bonus row) appends the drafts alone. `extra`: the method's own fields (`specviz.extras`).
        `t_end`: when the step ended, where its clock was read elsewhere (an engine's tokens arriving); None: now.
        `lane_ms`: (draft, verify) milliseconds where the two models ran at once (PEARL's lanes: each
        lane's busy time), instead of the split at `t_drafted`."""
        if verdict.next_token is None and verdict.accepted != len(drafted):
            raise ValueError("a verdict without the target's token must accept every drafted token")
        emitted = [*drafted[: verdict.accepted], *([verdict.next_token] if verdict.next_token is not None else [])]
        stop = None
        for i, token in enumerate(emitted):
            if token in self.eos:
                emitted, stop = emitted[: i + 1], "eos"
                break
        if len(emitted) >= self.remaining:
            emitted, stop = emitted[: self.remaining], stop or "max_new_tokens"
        # A cut inside the accepted drafts ends the story there: later drafts never existed.
        accepted = min(verdict.accepted, len(emitted))
        kept = len(drafted) if accepted == verdict.accepted else accepted
        position = len(self.ids)
        self.ids.extend(emitted)
        self.done = stop is not None
        t_end = self.now() if t_end is None else t_end
        record = IterationRecord(
            method=self.method,
            iteration=self.iteration,
            position=position,
            speculation_length=speculation_length,
            drafted=tuple(drafted[:kept]),
            accepted=accepted,
            emitted=tuple(emitted),
            p_target=verdict.p_drafted[:kept] if drafted and verdict.p_drafted is not None else None,
            q_draft=verdict.q_drafted[:kept] if verdict.q_drafted is not None and drafted else None,
            draft_forwards=draft_forwards,
            target_forwards=target_forwards,
            t_start=t_start,
            t_end=t_end,
            draft_ms=lane_ms[0] if lane_ms else (t_drafted - t_start) * 1e3,
            verify_ms=lane_ms[1] if lane_ms else (t_end - t_drafted) * 1e3,
            extra=in_order(
                (
                    *extra,
                    CommitExtra(u=tuple(verdict.uniforms[:kept]) if verdict.uniforms and drafted else None, stop=stop),
                )
            ),
        )
        self.iteration += 1
        return record
