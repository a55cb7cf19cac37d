"""Tokens generated against wall time, one line per method: who finishes first, and how steadily."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.frame import method_order
from specviz.plots.theme import empty, finish, method_marker, method_style, plain

TITLE = "Tokens generated vs time"
SUBTITLE = "each method timed while running alone"


def tokens_vs_time(df: pd.DataFrame) -> go.Figure:
    """records_frame -> step lines of cumulative tokens at each iteration's end time."""
    if df.empty:
        return empty(TITLE, "Run a race to see this plot.")
    fig = go.Figure()
    for i, method in enumerate(method_order(df)):
        d = df[df["method"] == method]
        fig.add_trace(
            go.Scatter(
                x=[0.0, *d["t_end"]],
                y=[0, *d["tokens"]],
                mode="lines+markers",
                line={"shape": "hv", "width": 2.5, **method_style(i)},
                marker=method_marker(i),
                name=plain(d["label"].iloc[0]),  # a saved race's label: text, not markup
                hovertemplate="%{y} tokens at %{x:.3f} s<extra>%{fullData.name}</extra>",
            )
        )
    return finish(fig, TITLE, "time since the run started (s)", "tokens generated", subtitle=SUBTITLE)
