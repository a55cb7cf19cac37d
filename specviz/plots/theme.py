"""Shared look of the plots: Okabe-Ito colours (colour-blind safe), large type for projectors."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import plotly.graph_objects as go

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

# One colour per method, in race order (the autoregressive baseline, first, gets black).
METHOD_COLOURS = [
    OKABE_ITO[k]
    for k in ("black", "blue", "orange", "bluish_green", "vermillion", "reddish_purple", "sky_blue", "yellow")
]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]  # a second cue beside colour


MARKERS = [
    "circle",
    "square",
    "diamond",
    "triangle-up",
    "x",
    "cross",
    "star",
    "triangle-down",
    "hexagon",
    "pentagon",
    "bowtie",
    "hourglass",
    "asterisk-open",
]  # a third cue: thirteen methods, thirteen shapes


def method_style(i: int) -> dict:
    """Line colour and dash of the i-th method (dashes repeat less often than colours)."""
    return {
        "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
        "dash": DASHES[(i // len(METHOD_COLOURS) + i) % len(DASHES)],
    }


def method_marker(i: int) -> dict:
    """The i-th method's marker: its colour and its own shape, a dozen of them along a line at most."""
    return {
        "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
        "symbol": MARKERS[i % len(MARKERS)],
        "size": 8,
        "maxdisplayed": 12,
    }


def finish(
    fig: go.Figure,
    title: str,
    x: str,
    y: str,
    legend: str | None = "method",
    subtitle: str | None = None,
    height: int = 420,
) -> go.Figure:
    """Titles with units, a legend title, and readable type (a long qualifier goes in the subtitle:
    plotly titles do not wrap, and half-width plots cut them); `height` before the legend's rows."""
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left", **({"subtitle": {"text": subtitle}} if subtitle else {})},
        xaxis_title=x,
        yaxis_title=y,
        legend_title_text=legend,
        template="plotly_white",
        font={"size": 15},
        margin={"l": 60, "r": 20, "t": 80 if subtitle else 60, "b": 55},
        height=height,
        showlegend=legend is not None,
    )
    return legend_below(fig, height) if legend is not None else fig


def legend_below(fig: go.Figure, height: int) -> go.Figure:
    """The legend below the plot, across its width (a side legend takes half a narrow plot); the
    figure grows by the legend's rows (three entries a row) beyond `height`."""
    rows = -(-legend_entries(fig) // 3)
    return fig.update_layout(
        legend={"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0.0, "xanchor": "left"},
        margin={"b": 80 + 26 * rows},
        height=height + 26 * rows,
    )


def count_ticks(fig: go.Figure, largest: float, most: int = 10) -> go.Figure:
    """Whole-number x ticks from 0, level, at most `most` of them: a step of 1 up to 18 turns into a
    column of vertical labels on a phone's 300-pixel plot. The step is 1, 2, 5, 10, 20, 50, ..."""
    step, factors = 1, itertools.cycle((2, 2.5, 2))
    while largest / step > most:
        step = int(step * next(factors))
    return fig.update_xaxes(tick0=0, dtick=step, tickangle=0, automargin=True)


def legend_entries(fig: go.Figure) -> int:
    """How many entries the figure's legend lists (one per legend group)."""
    return len({t.legendgroup or t.name for t in fig.data if t.showlegend is not False and t.name})


def empty(title: str, message: str) -> go.Figure:
    """A titled figure that says why it has no data (instead of a blank box)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 16}, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return finish(fig, title, "", "", legend=None)


def labels_of(methods: Sequence[str], label_of: dict[str, str]) -> list[str]:
    return [label_of.get(m, m) for m in methods]
