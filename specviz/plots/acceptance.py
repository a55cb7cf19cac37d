"""Running acceptance rate (accepted / drafted so far) per iteration, one line per drafting method."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.frame import method_order
from specviz.plots.theme import empty, finish, method_marker, method_style, plain

TITLE = "Running acceptance rate"


def running_acceptance(df: pd.DataFrame) -> go.Figure:
    """records_frame -> accepted_total / drafted_total after each iteration (methods that draft)."""
    drafting = [m for m in method_order(df) if df.loc[df["method"] == m, "n_drafted"].sum() > 0]
    if not drafting:
        return empty(TITLE, "No method in this race drafted tokens (autoregressive only).")
    fig = go.Figure()
    for i, method in enumerate(method_order(df)):
        if method not in drafting:
            continue
        d = df[df["method"] == method]
        fig.add_trace(
            go.Scatter(
                x=d["iteration"],
                y=d["running_acceptance"],
                mode="lines+markers",
                name=plain(d["label"].iloc[0]),  # a saved race's label: text, not markup
                line={"width": 2.5, **method_style(i)},
                marker=method_marker(i),
                hovertemplate="iteration %{x}: %{y:.1%}<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return finish(fig, TITLE, "iteration", "accepted / drafted so far")
