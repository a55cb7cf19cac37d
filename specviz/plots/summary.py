"""The race's summary table: one row per method, every number from `specviz.metrics`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from specviz.methods import BASELINE
from specviz.metrics import speedup, summarize, summary_metrics
from specviz.records import IterationRecord


def summary_table(
    runs: Mapping[str, Sequence[IterationRecord]], labels: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """method -> records  ->  a DataFrame (rounded for display; speedup is vs the autoregressive
    run of the same race, empty when the race has none)."""
    rows, summaries = [], {m: summarize(r) for m, r in runs.items() if r}
    baseline = summary_metrics(summaries[BASELINE])["tokens_per_s"] if BASELINE in summaries else None
    for method, s in summaries.items():
        m = summary_metrics(s)
        rows.append(
            {
                "method": (labels or {}).get(method, method),
                "tokens": s.new_tokens,
                "wall (s)": round(s.wall_s, 3),
                "tokens/s": _round(m["tokens_per_s"], 1),
                "speedup vs AR (×)": _round(speedup(baseline, m["tokens_per_s"]), 2),
                "acceptance rate (%)": _round(None if m["acceptance_rate"] is None else 100 * m["acceptance_rate"], 1),
                "mean accepted length": _round(m["mean_accepted_length"], 2),
                "target forwards": s.target_forwards,
                "draft forwards": s.draft_forwards,
                "iterations": s.iterations,
                "stop": s.stop_reason,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = [
    "method",
    "tokens",
    "wall (s)",
    "tokens/s",
    "speedup vs AR (×)",
    "acceptance rate (%)",
    "mean accepted length",
    "target forwards",
    "draft forwards",
    "iterations",
    "stop",
]


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)
