"""How many draft tokens each iteration kept: the distribution behind the mean accepted length."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.frame import method_order
from specviz.plots.theme import METHOD_COLOURS, count_ticks, empty, finish

TITLE = "Accepted draft tokens per iteration"
PATTERNS = ["", "/", "\\", "x", ".", "+", "-", "|"]  # a second cue beside colour


def accepted_histogram(df: pd.DataFrame) -> go.Figure:
    """records_frame -> share of each method's iterations that accepted 0, 1, 2, ... tokens."""
    methods = [m for m in method_order(df) if df.loc[df["method"] == m, "n_drafted"].sum() > 0]
    if not methods:
        return empty(TITLE, "No method in this race drafted tokens (autoregressive only).")
    fig = go.Figure()
    order = method_order(df)
    for method in methods:
        i = order.index(method)
        d = df[df["method"] == method]
        share = d["accepted"].value_counts(normalize=True).sort_index()
        fig.add_trace(
            go.Bar(
                x=share.index,
                y=share.values,
                name=d["label"].iloc[0],
                marker={
                    "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
                    "pattern": {"shape": PATTERNS[i % len(PATTERNS)]},
                },
                hovertemplate="%{x} accepted: %{y:.1%} of iterations<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_layout(barmode="group")
    count_ticks(fig, df["accepted"].max())
    fig.update_yaxes(tickformat=".0%")
    return finish(fig, TITLE, "draft tokens accepted", "share of iterations")
