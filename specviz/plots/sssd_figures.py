"""SSSD's paper figures from the experiment's plain rows (Fig. 4: accepted length vs S; Fig. 6:
throughput vs latency per batch size). Pure: rows -> plotly Figure."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.plots.theme import finish, wrap

DRAFTER_COLOURS = {
    "fused (SSSD)": "#0072B2",
    "datastore only": "#E69F00",
    "input only": "#56B4E9",
    "prompt lookup": "#CC79A7",
    "REST-style first match": "#D55E00",
}


def accepted_length_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """One panel per suite: mean accepted length (tokens per target forward) vs speculation length."""
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    fig = make_subplots(  # one x title under all panels: one under each ran into its neighbours
        rows=1, cols=len(suites), subplot_titles=suites, shared_yaxes=True, x_title="speculation length S (tree nodes)"
    )
    for col, suite in enumerate(suites, start=1):
        for drafter in dict.fromkeys(r["drafter"] for r in rows):
            part = sorted(
                (r for r in rows if r["suite"] == suite and r["drafter"] == drafter),
                key=lambda r: r["speculation_length"],
            )
            fig.add_trace(
                go.Scatter(
                    x=[r["speculation_length"] for r in part],
                    y=[r["mean_accepted_length"] for r in part],
                    mode="lines+markers",
                    name=drafter,
                    legendgroup=drafter,
                    showlegend=col == 1,
                    line={"color": DRAFTER_COLOURS.get(drafter)},
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(type="log", row=1, col=col)
    fig = finish(
        fig,
        "Accepted length vs tree size S",
        "",
        "tokens per target forward pass",
        legend="drafter",
        subtitle=wrap("greedy; mean accepted length, the bonus token included"),
        height=480,
    )
    return fig.update_layout(margin_t=fig.layout.margin.t + 25)  # the panels' titles under the subtitle


def batch_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Throughput vs mean per-request latency, one curve per variant, points labelled by B."""
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        part = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["batch_size"])
        fig.add_trace(
            go.Scatter(
                x=[r["mean_latency_s"] for r in part],
                y=[r["throughput_tokens_per_s"] for r in part],
                mode="lines+markers+text",
                text=[f"B={r['batch_size']}" for r in part],
                textposition="top center",
                name=variant,
            )
        )
    return finish(
        fig,
        "Static batches: throughput vs latency",
        "mean latency per request (s)",
        "throughput (tokens/s, whole batch)",
        legend="variant",
        subtitle="one point per batch size B; latency per request",
    )
