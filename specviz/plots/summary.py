"""The race's summary table: one row per method, fastest first, every number from `specviz.metrics`."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import pandas as pd

from specviz.methods import BASELINE
from specviz.metrics import speedup, summarize, summary_metrics, tested
from specviz.records import IterationRecord

WINNER = "★ fastest"  # the place of the fastest run whose timing is trusted
DISTURBED = "timing disturbed"  # the place of a run whose timing is not the method's (specviz.ui.verdict)


def summary_table(
    runs: Mapping[str, Sequence[IterationRecord]],
    labels: Mapping[str, str] | None = None,
    disturbed: Collection[str] = (),
) -> pd.DataFrame:
    """method -> records  ->  a DataFrame, sorted by speedup (rounded for display; speedup is vs the
    autoregressive run of the same race, empty when the race has none). `disturbed`: methods whose
    timing failed a check; they keep their row but cannot be the winner."""
    rows: list[tuple[float, dict]] = []  # (speedup, row): sorted fastest first
    summaries = {m: summarize(r) for m, r in runs.items() if r}
    baseline = summary_metrics(summaries[BASELINE])["tokens_per_s"] if BASELINE in summaries else None
    for method, s in summaries.items():
        m = summary_metrics(s)
        judged = sum(tested(r) for r in runs[method])
        fast = _round(speedup(baseline, m["tokens_per_s"]), 2)
        rows.append(
            (
                float("-inf") if fast is None else fast,
                {
                    "place": "",
                    "method": (labels or {}).get(method, method),
                    "tokens": s.new_tokens,
                    "wall (s)": round(s.wall_s, 3),
                    "tokens/s": _round(m["tokens_per_s"], 1),
                    "speedup vs AR (×)": fast,
                    "α (accepted ÷ tested)": _round(s.accepted / judged if judged else None, 2),
                    "acceptance rate (%)": _round(
                        None if m["acceptance_rate"] is None else 100 * m["acceptance_rate"], 1
                    ),
                    "tokens per target pass": _round(m["mean_accepted_length"], 2),
                    "target passes": s.target_forwards,
                    "draft passes": s.draft_forwards,
                    "stop": s.stop_reason,
                    "_name": method,
                },
            )
        )
    rows.sort(key=lambda fast_row: -fast_row[0])
    place = 0
    for _, row in rows:
        if row["_name"] in disturbed:
            row["place"] = DISTURBED
        elif row["speedup vs AR (×)"] is not None:
            place += 1
            row["place"] = WINNER if place == 1 else str(place)
    return pd.DataFrame([row for _, row in rows], columns=COLUMNS)


COLUMNS = [
    "place",
    "method",
    "tokens",
    "wall (s)",
    "tokens/s",
    "speedup vs AR (×)",
    "α (accepted ÷ tested)",
    "acceptance rate (%)",
    "tokens per target pass",
    "target passes",
    "draft passes",
    "stop",
]


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)
