"""The serving simulator: a stream of requests, served by `osd`, beside the same draft kept static.

Requests come from prompt suites, one suite after another every `shift_every` requests (the
paper's distribution shift, appendix A.5) or mixed at random (appendix A.4). Each request is served
for real by `osd` with the stream's learner as its session; the static draft's acceptance on the
same request is replayed from the target's greedy output (one teacher-forced draft pass, no second
target run): greedy verification accepts exactly the leading drafts that equal the target's tokens,
so a draft that drafts greedily from the same prefix would have had these acceptances. The
Online-learning tab serves its visitors' streams with it, the OSD experiment
(`python -m specviz.bench osd`) its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specviz.errors import SpecvizError
from specviz.extras import OnlineExtra
from specviz.prompts import Prompt, load_source, load_suite


@dataclass(frozen=True)
class StreamConfig:
    suites: tuple[str, ...] = ("gsm8k",)  # where requests come from, in this order
    requests: int = 200  # length of the stream
    shift_every: int = 0  # move to the next suite every N requests (0: the whole stream is split evenly)
    mixed: bool = False  # draw each request's suite at random instead (appendix A.4's mixed stream)
    distinct: int = 0  # cycle through only this many prompts per suite (a repetitive stream); 0: all
    offset: int = 0  # skip this many prompts of each suite first
    seed: int = 0  # prompt order within each suite, and the suite draws when mixed
    files: bool = False  # suites may be prompt files (paths): the command line only, never the app

    def __post_init__(self) -> None:
        if not self.suites:
            raise SpecvizError("the request stream needs at least one prompt suite")
        if self.requests < 1 or self.shift_every < 0 or self.distinct < 0 or self.offset < 0:
            raise SpecvizError("requests must be positive; shift_every, distinct and offset not negative")


def request_stream(cfg: StreamConfig) -> list[Prompt]:
    """The prompts in serving order."""
    rng = random.Random(cfg.seed)
    pools = {}
    for name in cfg.suites:
        prompts = list((load_source if cfg.files else load_suite)(name)[cfg.offset :])
        rng.shuffle(prompts)
        pools[name] = prompts[: cfg.distinct] if cfg.distinct else prompts
        if not pools[name]:
            raise SpecvizError(f"no prompts left in suite '{name}' after offset {cfg.offset}")
    block = cfg.shift_every or -(-cfg.requests // len(cfg.suites))  # requests per suite before the shift
    served = dict.fromkeys(cfg.suites, 0)
    stream = []
    for i in range(cfg.requests):
        suite = rng.choice(cfg.suites) if cfg.mixed else cfg.suites[(i // block) % len(cfg.suites)]
        pool = pools[suite]
        stream.append(pool[served[suite] % len(pool)])
        served[suite] += 1
    return stream


def replay_greedy(hits: Sequence[bool], gamma: int, max_new_tokens: int) -> tuple[int, int, int]:
    """(drafted, accepted, tested) of greedy SD with a static speculation length on a known greedy output:
    hits[j] says whether the draft's greedy guess for output token j (given the true prefix) is right.
    Mirrors `speculative_decoding` and `Decoding.commit` (budget cut included)."""
    from specviz.oracle import replay_chain

    drafted = accepted = tested = 0
    for _j, k, kept, emitted in replay_chain(hits, lambda j, left: min(gamma, max_new_tokens - j - 1)):
        drafted, accepted = drafted + k, accepted + kept
        tested += kept + (kept < k and emitted > kept)  # the refused draft, when the target got to judge it
    return drafted, accepted, tested


def simulate(
    pair: Any,
    prompts: Sequence[Prompt],
    learner: Any,
    *,
    max_new_tokens: int = 64,
    speculation_length: int = 4,
    measure_static_from: int | None = None,
    stop: Any = None,
) -> Iterator[dict[str, Any]]:
    """Serve `prompts` one after another with `osd` and `learner`; one plain row per request.

    Row: request index, suite, prompt id, tokens, OSD's drafted/accepted/timings and draft version,
    the static draft's replayed drafted/accepted, and the update that finished after this request.
    From request `measure_static_from` on, the static draft (vanilla SD) and the target alone (AR)
    also serve each request for real, right after OSD, so that wall times compare side by side.
    `stop` (anything with `is_set()`): once set, the request being served ends after its current
    iteration, without a row, and the stream ends (the app's Stop; one request at γ 12 and 256
    tokens took 35 s on the default pair, issue 41)."""
    from specviz.metrics import summarize, tested
    from specviz.models.pair import encode_prompt
    from specviz.oracle import draft_predictions
    from specviz.runner import run

    initial = pair.draft  # the static baseline: never updated
    for i, prompt in enumerate(prompts):
        if stop is not None and stop.is_set():
            return
        prompt_ids = encode_prompt(pair, prompt.text, None)
        updates_before = len(learner.updates)
        records = []
        for record in run(
            "osd",
            pair,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            speculation_length=speculation_length,
            session=learner,
        ):
            if stop is not None and stop.is_set():
                return
            records.append(record)
        s = summarize(records)
        row = {
            "request": i,
            "suite": prompt.suite,
            "prompt_id": prompt.id,
            "prompt_tokens": len(prompt_ids),
            "new_tokens": s.new_tokens,
            "osd_drafted": s.drafted,
            "osd_accepted": s.accepted,
            "osd_tested": sum(tested(r) for r in records),
            "osd_wall_s": s.wall_s,
            "draft_ms": sum(r.draft_ms for r in records),
            "verify_ms": sum(r.verify_ms for r in records),
            "draft_forwards": s.draft_forwards,
            "target_forwards": s.target_forwards,
            "draft_version": online.draft_version if (online := records[0].extras(OnlineExtra)) else 0,
        }
        sequence = list(prompt_ids) + list(s.output_ids)
        hits = draft_predictions(initial, sequence, len(prompt_ids)) == np.asarray(s.output_ids)
        row["static_drafted"], row["static_accepted"], row["static_tested"] = replay_greedy(
            hits, speculation_length, max_new_tokens
        )
        if measure_static_from is not None and i >= measure_static_from:
            static = summarize(
                list(
                    run(
                        "vanilla",
                        pair,
                        prompt_ids,
                        max_new_tokens=max_new_tokens,
                        speculation_length=speculation_length,
                    )
                )
            )
            row["static_wall_s"] = static.wall_s
            row["static_matches"] = static.output_ids == s.output_ids and (static.drafted, static.accepted) == (
                row["static_drafted"],
                row["static_accepted"],
            )
            ar = summarize(list(run("autoregressive", pair, prompt_ids, max_new_tokens=max_new_tokens)))
            row["ar_wall_s"] = ar.wall_s
            row["ar_matches"] = ar.output_ids == s.output_ids
        new_updates = learner.updates[updates_before:]
        row["update"] = new_updates[-1] if new_updates else None
        row["output_ids"] = list(s.output_ids)
        row["prompt_ids"] = list(prompt_ids)
        yield row
