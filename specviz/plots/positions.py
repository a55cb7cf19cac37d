"""Acceptance per draft position, one line per chain method: how far into a draft the target keeps
agreeing (the curve behind "which γ": a position whose acceptance is low costs a drafted token and
rarely pays one back)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from specviz.plots.theme import count_ticks, empty, finish, method_marker, method_style, plain

TITLE = "Acceptance per draft position"
Y_TITLE = "accepted, given the previous accepted"


def acceptance_by_position(rows: Sequence[tuple[str, int, Sequence[tuple[int, int]]]]) -> go.Figure:
    """(label, the method's index in the race for its colour, (tested, accepted) per position from 1:
    `specviz.metrics.position_counts`) -> accepted / tested at each position, each point's count in its hover."""
    rows = [row for row in rows if row[2]]
    if not rows:
        return empty(TITLE, "No chain method in this race drafted tokens (a tree's positions are not one line).")
    fig = go.Figure()
    for label, i, counts in rows:
        positions = [k + 1 for k, (t, _) in enumerate(counts) if t]
        fig.add_trace(
            go.Scatter(
                x=positions,
                y=[counts[k - 1][1] / counts[k - 1][0] for k in positions],
                customdata=[list(counts[k - 1]) for k in positions],
                mode="lines+markers",
                name=plain(label),  # a saved race's label: text, not markup
                line={"width": 2.5, **method_style(i)},
                marker=method_marker(i),
                hovertemplate="position %{x}: %{y:.1%} (%{customdata[1]} of %{customdata[0]} reached)"
                "<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    longest = max(len(counts) for _, _, counts in rows)
    count_ticks(fig, longest).update_xaxes(range=[0.5, longest + 0.5])
    return finish(fig, TITLE, "draft position (1: the first draft)", Y_TITLE)
