"""Benchmark figures: pure functions of the benchmark's summary rows (no torch, no I/O)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
OUR_COLOUR, PEER_COLOUR = "#0072B2", "#E69F00"


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if "suite" not in df:
        df["suite"] = "all"
    return df


def speedup_by_suite(by_suite: list[dict[str, Any]]) -> go.Figure:
    """Grouped bars: speedup over our autoregressive baseline, per method (and peer), per suite."""
    df = _frame(by_suite)
    fig = go.Figure()
    for method, part in df.groupby("method", sort=False):
        peer = part["kind"].iloc[0] == "peer"
        fig.add_bar(
            x=part["suite"], y=part["speedup_vs_autoregressive"], name=method, marker_pattern_shape="/" if peer else ""
        )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="autoregressive decoding")
    fig.update_layout(
        title="Speedup over autoregressive decoding, per suite",
        barmode="group",
        xaxis_title="prompt suite",
        yaxis_title="speedup (× autoregressive tokens/s)",
        legend_title="method (hatched: Hugging Face peer)",
    )
    return fig


def metric_bars(summary: list[dict[str, Any]], column: str, title: str, unit: str) -> go.Figure:
    """One bar per method/peer for one summary column; peers in a second colour."""
    df = _frame(summary).dropna(subset=[column])
    colours = [PEER_COLOUR if k == "peer" else OUR_COLOUR for k in df["kind"]]
    fig = go.Figure(
        go.Bar(
            x=df["method"],
            y=df[column],
            marker_color=colours,
            showlegend=False,
            text=[f"{v:.2f}" for v in df[column]],
            textposition="outside",
        )
    )
    for name, colour in (("specviz method", OUR_COLOUR), ("Hugging Face peer", PEER_COLOUR)):
        fig.add_scatter(
            x=[None], y=[None], mode="markers", marker={"color": colour, "symbol": "square", "size": 12}, name=name
        )
    fig.update_layout(title=title, xaxis_title="method", yaxis_title=unit, legend_title="")
    return fig


def report_figures(result: dict[str, Any]) -> list[go.Figure]:
    """The report's figures, in reading order."""
    summary = result["summary"]
    return [
        speedup_by_suite(result.get("by_suite") or summary),
        metric_bars(summary, "tokens_per_s", "Decoding speed", "tokens per second (all prompts)"),
        metric_bars(summary, "acceptance_rate", "Draft acceptance rate", "accepted / drafted tokens"),
        metric_bars(summary, "mean_accepted_length", "Mean accepted length", "tokens per target forward pass"),
    ]
