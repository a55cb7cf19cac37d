"""From a run's records to the formula's inputs (α, γ, c, verify cost) and its predicted speedup.

Counting is separate from costing: records say what happened (drafted, accepted, milliseconds);
this turns them into Leviathan's quantities so a race can be explained by the theory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specviz.cost.formulas import expected_tokens


def estimate_alpha(records: Sequence[Any]) -> float | None:
    """Maximum-likelihood i.i.d. α from accept/reject prefixes: every accepted draft is a success,
    every iteration that stopped at a rejection one failure (a fully accepted draft is censored)."""
    accepted = sum(r.accepted for r in records)
    rejections = sum(1 for r in records if r.accepted < len(r.drafted))
    return accepted / (accepted + rejections) if accepted + rejections else None


def step_ms(baseline_records: Sequence[Any]) -> float | None:
    """T(1): mean milliseconds of one plain decoding step (the autoregressive run's verify time)."""
    steps = [r.verify_ms for r in baseline_records if r.target_forwards]
    return sum(steps) / len(steps) if steps else None


def explain_run(records: Sequence[Any], baseline_records: Sequence[Any]) -> dict[str, Any] | None:
    """α, mean γ, c = draft ms per drafted token / T(1), verify ratio T(γ+1)/T(1), and the predicted
    speedup E[tokens](α, γ) / (γc + ratio) next to the measured one (tokens/s over the baseline's)."""
    drafting = [r for r in records if r.drafted]
    t1 = step_ms(baseline_records)
    alpha = estimate_alpha(drafting)
    if not drafting or not t1 or alpha is None or not records[-1].t_end or not baseline_records[-1].t_end:
        return None
    gamma = sum(len(r.drafted) for r in drafting) / len(drafting)
    c = sum(r.draft_ms for r in drafting) / sum(len(r.drafted) for r in drafting) / t1
    ratio = sum(r.verify_ms for r in drafting) / len(drafting) / t1
    g = max(1, round(gamma))
    tps = sum(len(r.emitted) for r in records) / records[-1].t_end
    base_tps = sum(len(r.emitted) for r in baseline_records) / baseline_records[-1].t_end
    return {
        "method": records[0].method,
        "alpha": alpha,
        "gamma": gamma,
        "c": c,
        "verify_ratio": ratio,
        "expected_tokens": expected_tokens(alpha, g),
        "measured_tokens_per_iteration": sum(len(r.emitted) for r in records) / len(records),
        "predicted_speedup": expected_tokens(alpha, g) / (g * c + ratio),
        "measured_speedup": tps / base_tps,
    }
