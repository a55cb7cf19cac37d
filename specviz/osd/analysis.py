"""What the draft learned, from plain numbers (no torch): acceptance over the stream and per token.

- `moving_alpha`: α over the last `window` requests (sum accepted / sum tested, `specviz.metrics`),
  the paper's y-axis in Figures 3-5.
- `token_table`: precision and recall of the draft's greedy guess per token, teacher-forced on the
  target's output, before and after adaptation (the paper's Figure 6 and Table 2). For a token t:
  precision = P(target's token is t | the draft guessed t), recall = P(the draft guessed t | target's token is t).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np


def moving_alpha(accepted: Sequence[int], tested: Sequence[int], window: int) -> list[float | None]:
    """alpha (accepted / tested) over the last `window` requests at each request (fewer at the start)."""
    acc, dra = np.cumsum([0, *accepted]), np.cumsum([0, *tested])
    out = []
    for i in range(1, len(acc)):
        lo = max(0, i - window)
        d = dra[i] - dra[lo]
        out.append(float((acc[i] - acc[lo]) / d) if d else None)
    return out


def alpha(accepted: Sequence[int], tested: Sequence[int]) -> float | None:
    """accepted / tested over some requests (None before any draft was tested)."""
    total = sum(tested)
    return sum(accepted) / total if total else None


def window_alpha(rows: Sequence[dict[str, Any]], who: str) -> float | None:
    """Token acceptance (accepted / tested) of the `who` draft, "osd" or "static", over simulator rows."""
    return alpha([r[f"{who}_accepted"] for r in rows], [r[f"{who}_tested"] for r in rows])


def precision_recall(
    predicted: np.ndarray, actual: np.ndarray, tokens: Sequence[int]
) -> dict[int, tuple[float, float]]:
    """{token: (precision, recall)} of the guesses `predicted` against `actual` (same-length arrays)."""
    out = {}
    for t in tokens:
        guessed, present = predicted == t, actual == t
        hit = int((guessed & present).sum())
        out[t] = (
            hit / int(guessed.sum()) if guessed.any() else 0.0,
            hit / int(present.sum()) if present.any() else 0.0,
        )
    return out


def token_table(before: np.ndarray, after: np.ndarray, actual: np.ndarray, top: int = 100) -> list[dict[str, Any]]:
    """For the `top` most frequent target tokens: precision and recall before and after adaptation,
    sorted by precision gain (largest first)."""
    frequent = [t for t, _ in Counter(actual.tolist()).most_common(top)]
    pr_before, pr_after = precision_recall(before, actual, frequent), precision_recall(after, actual, frequent)
    counts = Counter(actual.tolist())
    rows = [
        {
            "token": int(t),
            "count": counts[t],
            "precision_before": pr_before[t][0],
            "precision_after": pr_after[t][0],
            "recall_before": pr_before[t][1],
            "recall_after": pr_after[t][1],
        }
        for t in frequent
    ]
    return sorted(rows, key=lambda r: r["precision_after"] - r["precision_before"], reverse=True)
