"""From a run's records to the formula's inputs (α, speculation length, c, verify cost) and its predicted speedup.

Counting is separate from costing: records say what happened (drafted, accepted, milliseconds);
this turns them into the papers' quantities so a race can be explained by the theory. Which formula
explains a method is its family's (`specviz.cost.families`), named by its registry entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specviz.cost.formulas import which_gamma
from specviz.metrics import position_counts, tested


@dataclass(frozen=True)
class Family:
    """How a family of methods drafts and verifies, and the formula that predicts its speedup."""

    name: str  # shown next to each method: "chain", "tree", "parallel", ...
    formula: str  # its predicted speedup, in the papers' notation
    unit: str  # what one of its iterations is called in a reading: "iteration", "tree pass", "step"
    verify_label: str  # its verify cost: "T(γ+1)/T(1)" for a chain of γ drafts, "T(S+1)/T(1)" for a tree of S nodes
    # (records, T(1) in ms) -> α, the speculation length, c, the verify cost, E[tokens], the cost of one
    # iteration in decoding steps and the predicted speedup; None when it drafted nothing to explain
    predict: Callable[[Sequence[Any], float], dict[str, Any] | None]


def estimate_alpha(records: Sequence[Any]) -> float | None:
    """Maximum-likelihood i.i.d. α from accept/reject prefixes: every accepted draft is a success,
    every iteration that stopped at a rejection one failure (a fully accepted draft is censored)."""
    accepted = sum(r.accepted for r in records)
    rejections = sum(tested(r) - r.accepted for r in records)  # a draft cut by the budget was never judged
    return accepted / (accepted + rejections) if accepted + rejections else None


def step_ms(baseline_records: Sequence[Any]) -> float | None:
    """T(1): mean milliseconds of one plain decoding step (the autoregressive run's verify time)."""
    steps = [r.verify_ms for r in baseline_records if r.target_forwards]
    return sum(steps) / len(steps) if steps else None


def explain_run(records: Sequence[Any], baseline_records: Sequence[Any], family: Family) -> dict[str, Any] | None:
    """The speedup `family`'s formula predicts from this run's counts and timings (the method's family:
    its registry entry's), next to the one measured (tokens/s over the baseline's); None when there
    is nothing to explain (no baseline, or nothing drafted)."""
    t1 = step_ms(baseline_records)
    if not records or not t1 or not records[-1].t_end or not baseline_records[-1].t_end:
        return None
    predicted = family.predict(records, t1)
    if predicted is None:
        return None
    tps = sum(len(r.emitted) for r in records) / records[-1].t_end
    base_tps = sum(len(r.emitted) for r in baseline_records) / baseline_records[-1].t_end
    return {
        "method": records[0].method,
        "family": family.name,
        "formula": family.formula,
        "unit": family.unit,
        "verify_label": family.verify_label,
        **predicted,
        "measured_tokens_per_iteration": sum(len(r.emitted) for r in records) / len(records),
        "measured_speedup": tps / base_tps,
    }


def fixed_gamma(records: Sequence[Any]) -> int | None:
    """The number of drafts a run's passes made when it is one number: every pass drafted the most any did,
    except the first (an engine's prompt pass drafts nothing) and the last two (the budget's end drafts
    fewer); None when passes drafted different lengths (a dynamic γ, an n-gram that found no match) or none."""
    counts = [r.drafted_count for r in records]
    gamma = max(counts, default=0)
    return gamma if gamma and all(c == gamma for c in counts[1:-2]) else None


def median_pass_s(records: Sequence[Any]) -> float | None:
    """Median seconds of a pass (drafting and verifying): the prompt's prefill, in the first, does not weigh."""
    spans = sorted(r.t_end - r.t_start for r in records if r.target_forwards)
    return spans[len(spans) // 2] if spans else None


def gamma_answer(records: Sequence[Any], baseline_records: Sequence[Any]) -> dict[str, Any] | None:
    """Which γ this run's drafts would have done best with (`best_gamma`), from its records and the
    records of its engine's target alone; None for a run whose passes drafted different lengths, or
    without a baseline run."""
    gamma0 = fixed_gamma(records)
    t1, pass_s = median_pass_s(baseline_records), median_pass_s(records)
    if gamma0 is None or not t1 or not pass_s:
        return None
    return best_gamma(position_counts(records), gamma0, pass_s / t1)


def best_gamma(counts: Sequence[tuple[int, int]], gamma0: int, pass_ratio: float) -> dict[str, Any] | None:
    """`formulas.which_gamma` from (tested, accepted) per position of passes that drafted gamma0 tokens,
    each `pass_ratio` target steps; None when a position up to gamma0 was never reached."""
    if len(counts) < gamma0 or not all(t for t, _ in counts[:gamma0]):
        return None
    rates = [a / t for t, a in counts[:gamma0]]
    rows = which_gamma(rates, pass_ratio, gamma0)
    best = max(rows, key=lambda row: row[3])
    return {"gamma": gamma0, "rates": rates, "pass_ratio": pass_ratio, "rows": rows, "best": best[0]}
