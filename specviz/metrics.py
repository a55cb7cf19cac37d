"""The metrics, defined once. Every table, plot and benchmark number goes through these.

- acceptance rate      = accepted / drafted
                         (share of proposed draft tokens the target kept; undefined without drafts)
- token acceptance α   = accepted / tested, tested = accepted + one per iteration whose draft was
                         turned down (the drafts the target actually judged: after the first refusal
                         the rest of a draft is never tested). Each tested draft is a Bernoulli(α)
                         trial, so this estimates Leviathan et al.'s α (OSD's y-axis) whatever γ is.
- acceptance at draft position k = accepted at k / tested at k, over the passes that drafted k or
                         more tokens and accepted the first k-1 (so reached k): conditional on the
                         previous position accepted, the same for specviz's chains and vLLM's rows.
                         vLLM's own `acceptance per position` divides by every draft instead: the
                         product of these over positions 1..k.
- mean accepted length = emitted tokens / target forward passes
                         (tokens gained per target call, the bonus/correction token included, as in
                         vLLM's "mean acceptance length"; autoregressive decoding scores exactly 1)
- tokens per second    = new tokens / wall seconds (prefill included: the clock starts before the
                         prompt is processed)
- ms per token         = 1000 × wall seconds / new tokens (the latency DISCO's and Speculative
                         Streaming's tables report: the inverse of tokens per second)
- target forwards per token = target forward passes / new tokens (the inverse of the mean accepted
                         length)
- speedup              = AR wall time / method wall time on the same prompt. Over several prompts,
                         and when outputs differ in length (sampling), it is the ratio of tokens per
                         second, which equals the wall-time ratio whenever both emit the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from specviz.records import IterationRecord, RunSummary


def acceptance_rate(accepted: int, drafted: int) -> float | None:
    return accepted / drafted if drafted else None


def tested(record: IterationRecord) -> int:
    """Draft tokens the target judged in one iteration: the accepted ones and the first refused one
    (none refused when the whole draft was kept, or when the budget ended the step first)."""
    refused = record.accepted < record.drafted_count and record.accepted < len(record.emitted)
    return record.accepted + refused


def position_counts(records: Sequence[IterationRecord]) -> tuple[tuple[int, int], ...]:
    """(tested, accepted) at draft positions 1, 2, ... over the records (see the module's definition).
    A pass tests positions 1..tested(record) and accepts 1..accepted."""
    longest = max((tested(r) for r in records), default=0)
    counts = [[0, 0] for _ in range(longest)]
    for r in records:
        for k in range(tested(r)):
            counts[k][0] += 1
            counts[k][1] += k < r.accepted
    return tuple((t, a) for t, a in counts)


def mean_accepted_length(new_tokens: int, target_forwards: int) -> float | None:
    return new_tokens / target_forwards if target_forwards else None


def tokens_per_s(new_tokens: int, wall_s: float) -> float | None:
    return new_tokens / wall_s if wall_s > 0 else None


def ms_per_token(new_tokens: int, wall_s: float) -> float | None:
    return 1e3 * wall_s / new_tokens if new_tokens else None


def target_forwards_per_token(target_forwards: int, new_tokens: int) -> float | None:
    return target_forwards / new_tokens if new_tokens else None


def speedup(ar_tokens_per_s: float | None, method_tokens_per_s: float | None) -> float | None:
    if not ar_tokens_per_s or method_tokens_per_s is None:
        return None
    return method_tokens_per_s / ar_tokens_per_s


def summarize(records: Sequence[IterationRecord]) -> RunSummary:
    """Totals of a finished run (the last record carries the stop reason)."""
    if not records:
        raise ValueError("a run has at least one iteration")
    output = tuple(t for r in records for t in r.emitted)
    return RunSummary(
        method=records[0].method,
        prompt_tokens=records[0].position,
        new_tokens=len(output),
        iterations=len(records),
        wall_s=records[-1].t_end,
        drafted=sum(r.drafted_count for r in records),
        accepted=sum(r.accepted for r in records),
        target_forwards=sum(r.target_forwards for r in records),
        draft_forwards=sum(r.draft_forwards for r in records),
        stop_reason=records[-1].stop or "max_new_tokens",
        output_ids=output,
    )


def summary_metrics(s: RunSummary) -> dict[str, float | None]:
    """The derived numbers of one run, keyed as in the benchmark's JSON."""
    return {
        "tokens_per_s": tokens_per_s(s.new_tokens, s.wall_s),
        "acceptance_rate": acceptance_rate(s.accepted, s.drafted),
        "mean_accepted_length": mean_accepted_length(s.new_tokens, s.target_forwards),
        "target_forwards_per_token": target_forwards_per_token(s.target_forwards, s.new_tokens),
    }
