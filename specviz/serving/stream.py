"""The serving simulator: a stream of requests, served by `osd`, beside the same draft kept static.

Requests come from prompt suites, one suite after another every `shift_every` requests (the
paper's distribution shift, appendix A.5) or mixed at random (appendix A.4). Each request is served
for real by `osd` with the stream's learner as its session; the static draft's acceptance on the
same request is replayed against the target's greedy output, without a second target run: the
static draft drafts exactly as served (`ModelDrafter`: its cache, one pass over the prompt, then one
token per pass, γ per iteration, the same budget cut) and greedy verification keeps the leading
drafts that equal the target's tokens. Drafting in other chunks (one teacher-forced pass over the
whole request, say) rounds differently and flips near-ties (bfloat16: position 17 of the default
stream's first request), so until the online draft's first update the two figures are identical
only because both drafts draft the same way. The Online-learning tab serves its visitors' streams
with it, the OSD experiment (`python -m specviz.bench osd`) its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.extras import OnlineExtra
from specviz.prompts import Prompt, load_source, load_suite
from specviz.records import IterationRecord, RunSummary

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair


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


def replay_static(
    pair: ModelPair,
    draft: Any,
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    *,
    speculation_length: int,
    max_new_tokens: int,
) -> list[IterationRecord]:
    """The iterations greedy vanilla SD with `draft` runs on a request whose target output is known, without
    running the target: the draft drafts as `vanilla` drafts it (same cache steps, same chunks, same γ and
    budget), and greedy verification keeps the leading drafts equal to the target's tokens, then adds the
    target's own. p in the records is the greedy target's one-hot. Past an EOS the target's tokens are
    unknown and the run ends there anyway: drafts after it count as drafted, not tested."""
    import torch

    from specviz.decoding import Decoding
    from specviz.methods.drafting import ModelDrafter, StaticLength
    from specviz.sampling import SamplingConfig
    from specviz.verify import Verdict

    dec = Decoding(pair, list(prompt_ids), "vanilla", max_new_tokens, SamplingConfig(), seed=0)
    drafter, policy = ModelDrafter(dec, draft), StaticLength(speculation_length)
    records = []
    with torch.inference_mode():  # as `run` steps a method
        while not dec.done:
            t_start = dec.now()
            proposal = drafter.propose(min(policy.speculation_length(), dec.remaining - 1), policy)
            t_drafted = dec.now()
            position, drafts = len(dec.ids), proposal.tokens
            truth = list(output_ids[position - dec.prompt_len :])  # the target's greedy tokens from here
            p = tuple(float(j < len(truth) and x == truth[j]) for j, x in enumerate(drafts))  # one-hot p(x_j)
            accepted = next((j for j, hit in enumerate(p) if not hit), len(drafts))
            if accepted < len(truth):
                verdict = Verdict(accepted, truth[accepted], p, None)
            else:  # the drafts ran into the output's end: an EOS among them, which `commit` cuts at
                verdict = Verdict(accepted, None if accepted == len(drafts) else drafts[accepted], p, None)
            records.append(
                dec.commit(
                    drafted=drafts,
                    verdict=verdict,
                    speculation_length=len(drafts),
                    t_start=t_start,
                    t_drafted=t_drafted,
                    draft_forwards=proposal.forwards,
                )
            )
            drafter.rollback(position, verdict.accepted)
    return records


def _serve_osd(
    pair: ModelPair,
    prompt_ids: Sequence[int],
    learner: Any,
    *,
    max_new_tokens: int,
    speculation_length: int,
    stop: Any,
) -> list[IterationRecord] | None:
    """OSD's iterations on one request with `learner` as its session; None once `stop` is set."""
    from specviz.runner import run

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
            return None
        records.append(record)
    return records


def _osd_row(
    i: int, prompt: Prompt, prompt_ids: Sequence[int], records: list[IterationRecord], s: RunSummary
) -> dict[str, Any]:
    """The request's row as OSD served it."""
    from specviz.metrics import tested

    return {
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


def _add_static_replay(
    row: dict[str, Any],
    pair: ModelPair,
    initial: Any,
    prompt_ids: Sequence[int],
    s: RunSummary,
    *,
    max_new_tokens: int,
    speculation_length: int,
) -> None:
    """The static draft's drafted, accepted and tested on the request, replayed against OSD's output, into `row`."""
    from specviz.metrics import summarize, tested

    static_records = replay_static(
        pair,
        initial,
        prompt_ids,
        s.output_ids,
        speculation_length=speculation_length,
        max_new_tokens=max_new_tokens,
    )
    replayed = summarize(static_records)
    row["static_drafted"], row["static_accepted"] = replayed.drafted, replayed.accepted
    row["static_tested"] = sum(tested(r) for r in static_records)


def _measure_side_by_side(
    row: dict[str, Any],
    pair: ModelPair,
    prompt_ids: Sequence[int],
    s: RunSummary,
    *,
    max_new_tokens: int,
    speculation_length: int,
) -> None:
    """Serve the request for real with the static draft (vanilla SD), then the target alone (AR), into `row`."""
    from specviz.metrics import summarize
    from specviz.runner import run

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


def simulate(
    pair: ModelPair,
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
    from specviz.metrics import summarize
    from specviz.models.pair import encode_prompt

    initial = pair.draft  # the static baseline: never updated
    for i, prompt in enumerate(prompts):
        if stop is not None and stop.is_set():
            return
        prompt_ids = encode_prompt(pair, prompt.text, None)
        updates_before = len(learner.updates)
        records = _serve_osd(
            pair,
            prompt_ids,
            learner,
            max_new_tokens=max_new_tokens,
            speculation_length=speculation_length,
            stop=stop,
        )
        if records is None:
            return
        s = summarize(records)
        row = _osd_row(i, prompt, prompt_ids, records, s)
        _add_static_replay(
            row, pair, initial, prompt_ids, s, max_new_tokens=max_new_tokens, speculation_length=speculation_length
        )
        if measure_static_from is not None and i >= measure_static_from:
            _measure_side_by_side(
                row, pair, prompt_ids, s, max_new_tokens=max_new_tokens, speculation_length=speculation_length
            )
        new_updates = learner.updates[updates_before:]
        row["update"] = new_updates[-1] if new_updates else None
        row["output_ids"] = list(s.output_ids)
        row["prompt_ids"] = list(prompt_ids)
        yield row
