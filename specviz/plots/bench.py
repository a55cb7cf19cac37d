"""Benchmark figures: pure functions of the benchmark's summary rows (no torch, no I/O)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.theme import METHOD_COLOURS, baseline, finish, wrap

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
OUR_COLOUR, PEER_COLOUR = "#0072B2", "#E69F00"


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if "suite" not in df:
        df["suite"] = "all"
    return df


def speedup_by_suite(by_suite: list[dict[str, Any]]) -> go.Figure:
    """Grouped bars: speedup over our autoregressive baseline, per method (and peer), per suite; each method
    in its race colour (theme.METHOD_COLOURS), peers hatched, the baseline a named line."""
    df = _frame(by_suite)
    fig = go.Figure()
    for i, (method, part) in enumerate(df.groupby("method", sort=False)):
        peer = part["kind"].iloc[0] == "peer"
        fig.add_bar(
            x=part["suite"],
            y=part["speedup_vs_autoregressive"],
            name=f"{method} (peer)" if peer else str(method),
            marker={"color": METHOD_COLOURS[i % len(METHOD_COLOURS)], "pattern": {"shape": "/" if peer else ""}},
            hovertemplate="%{x}: %{y:.2f}×<extra>%{fullData.name}</extra>",
        )
    fig.update_layout(barmode="group")
    baseline(fig)
    return finish(
        fig,
        "Speedup per suite",
        "prompt suite",
        "speedup (× autoregressive)",
        subtitle=wrap("over specviz's autoregressive decoding; hatched: Hugging Face peers"),
    )


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
            texttemplate="%{y:.2f}",
            textposition="outside",
            cliponaxis=False,
        )
    )
    for name, colour in (("specviz method", OUR_COLOUR), ("Hugging Face peer", PEER_COLOUR)):
        fig.add_scatter(
            x=[None], y=[None], mode="markers", marker={"color": colour, "symbol": "square", "size": 12}, name=name
        )
    fig.update_layout(uniformtext={"minsize": 11, "mode": "hide"})  # a number that fits its bar, or none
    return finish(fig, title, "method", unit, legend="", axis_px=170)  # room for method names turned upright


def report_figures(result: dict[str, Any]) -> list[go.Figure]:
    """The report's figures, in reading order."""
    summary = result["summary"]
    return [
        speedup_by_suite(result.get("by_suite") or summary),
        metric_bars(summary, "tokens_per_s", "Decoding speed", "tokens per second (all prompts)"),
        metric_bars(summary, "acceptance_rate", "Draft acceptance rate", "accepted / drafted tokens"),
        metric_bars(summary, "mean_accepted_length", "Mean accepted length", "tokens per target forward pass"),
    ]
