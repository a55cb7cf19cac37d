"""How many draft tokens each iteration kept: the distribution behind the mean accepted length, one small
panel a method. Grouped side by side, eleven methods' bars were a pixel or two wide on a phone's plot."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.plots.frame import method_order
from specviz.plots.theme import METHOD_COLOURS, count_ticks, empty, finish, plain, wrap

TITLE = "Accepted draft tokens per iteration"
SUBTITLE = "one panel a method, on the same axes"
X_TITLE, Y_TITLE = "draft tokens accepted", "share of iterations"
PATTERNS = ["", "/", "\\", "x", ".", "+", "-", "|"]  # a second cue beside colour
PER_ROW = 2  # panels side by side: on a phone's plot each is ~115 px wide, a bar per count still ~10 px
AREA_PX, PANEL_PX = 260, 120  # the panels' height in all when they fit in it (one row), else each panel's
GAP_PX = 90  # between rows: the x ticks, the x title and the next panels' titles (two lines)
TITLES_PX = 40  # above the first row: its panels' titles, under the subtitle
TITLE_CHARS = 18  # a panel title's line at 13 px: ~115 px on a phone; a longer name wraps between words


def accepted_histogram(df: pd.DataFrame) -> go.Figure:
    """records_frame -> per method, the share of its iterations that accepted 0, 1, 2, ... tokens."""
    order = method_order(df)
    methods = [m for m in order if df.loc[df["method"] == m, "n_drafted"].sum() > 0]
    if not methods:
        return empty(TITLE, "No method in this race drafted tokens (autoregressive only).")
    labels = [plain(str(df.loc[df["method"] == m, "label"].iloc[0])) for m in methods]  # text, not markup
    cols = min(PER_ROW, len(methods))
    rows = -(-len(methods) // cols)
    area = max(AREA_PX, rows * PANEL_PX + (rows - 1) * GAP_PX)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[wrap(label, TITLE_CHARS) for label in labels],
        horizontal_spacing=0.12,
        vertical_spacing=GAP_PX / area if rows > 1 else 0.0,
    )
    for k, (method, label) in enumerate(zip(methods, labels, strict=True)):
        i = order.index(method)  # the method's colour and pattern in every race plot
        share = df.loc[df["method"] == method, "accepted"].value_counts(normalize=True).sort_index()
        fig.add_trace(
            go.Bar(
                x=share.index,
                y=share.values,
                name=label,
                marker={
                    "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
                    "pattern": {"shape": PATTERNS[i % len(PATTERNS)]},
                },
                hovertemplate="%{x} accepted: %{y:.1%} of iterations<extra>%{fullData.name}</extra>",
            ),
            row=k // cols + 1,
            col=k % cols + 1,
        )
    largest = int(df["accepted"].max())
    highest = max(max(t.y) for t in fig.data)  # the largest share: the y axes end at the tenth above it
    fig = finish(fig, TITLE, X_TITLE, Y_TITLE, legend=None, subtitle=SUBTITLE, height=0)
    top = fig.layout.margin.t + TITLES_PX  # finish's margin put the first row's titles on the subtitle
    fig.update_layout(margin={"t": top}, height=top + area + fig.layout.margin.b, bargap=0.15)
    count_ticks(fig, largest, most=9)  # up to 9 a tick a count, 18 a tick every 2: ~12 px a label on a phone
    # the same axes in every panel, so the bars compare across panels; a tick label and title under each panel,
    # the y axes named on the left column only (finish named the first in full: taller than a panel)
    fig.update_xaxes(
        range=[-0.5, largest + 0.5], title_text=X_TITLE, title_standoff=2, title_font_size=13, tickfont_size=12
    )
    fig.update_yaxes(range=[0, min(1.0, math.ceil(highest * 10 - 1e-9) / 10)], tickformat=".0%", nticks=4)
    fig.update_yaxes(title_text="share", title_font_size=13, col=1)
    return fig.update_annotations(font_size=13, yshift=4)  # the panels' titles, clear of the top tick label
