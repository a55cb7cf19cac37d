"""Records -> one pandas DataFrame, the input of every race plot and table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from specviz.records import IterationRecord

COLUMNS = [
    "method",
    "label",
    "iteration",
    "position",
    "speculation_length",
    "oracle_sl",
    "n_drafted",
    "accepted",
    "n_emitted",
    "draft_forwards",
    "target_forwards",
    "t_start",
    "t_end",
    "draft_ms",
    "verify_ms",
    "tokens",
    "drafted_total",
    "accepted_total",
    "running_acceptance",
]


INTS = [
    "iteration",
    "position",
    "speculation_length",
    "n_drafted",
    "accepted",
    "n_emitted",
    "draft_forwards",
    "target_forwards",
]
DTYPES = {
    "method": str,
    "label": str,
    **dict.fromkeys(INTS, "int64"),
    "oracle_sl": "Float64",  # None -> <NA> (pairs without a draft model)
    **dict.fromkeys(["t_start", "t_end", "draft_ms", "verify_ms"], "float64"),
}


def records_frame(records: Iterable[IterationRecord], labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per iteration (`iteration` counted from 1, as the app shows it; a record's own index
    counts from 0), with per-method running totals: tokens (emitted so far, after this
    step), drafted_total, accepted_total, running_acceptance (accepted_total / drafted_total)."""
    rows = [
        {
            "method": r.method,
            "label": (labels or {}).get(r.method, r.method),
            "iteration": r.iteration + 1,  # counted from 1, as every view of the app shows it
            "position": r.position,
            "speculation_length": r.speculation_length,
            "oracle_sl": r.oracle_sl,
            "n_drafted": r.drafted_count,  # an engine step counts drafts it rejected without naming them
            "accepted": r.accepted,
            "n_emitted": len(r.emitted),
            "draft_forwards": r.draft_forwards,
            "target_forwards": r.target_forwards,
            "t_start": r.t_start,
            "t_end": r.t_end,
            "draft_ms": r.draft_ms,
            "verify_ms": r.verify_ms,
        }
        for r in records
    ]
    df = pd.DataFrame(rows, columns=COLUMNS[:15]).astype(DTYPES)  # typed even when empty
    by = df.groupby("method", sort=False)
    df["tokens"] = by["n_emitted"].cumsum()
    df["drafted_total"] = by["n_drafted"].cumsum()
    df["accepted_total"] = by["accepted"].cumsum()
    drafted = df["drafted_total"].where(df["drafted_total"] > 0)
    df["running_acceptance"] = df["accepted_total"] / drafted
    return df[COLUMNS]


def method_order(df: pd.DataFrame) -> list[str]:
    """Methods in the order they first appear (the race's order)."""
    return list(dict.fromkeys(df["method"]))
