"""DISCO's figures: chosen vs oracle speculation length, and the oracle SL's distribution.

Pure functions of a DataFrame with one row per iteration: method, suite, prompt_id, iteration,
speculation_length (chosen), oracle_sl (what the draft would have got right from there).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.plots.theme import count_ticks, finish

ORACLE_COLOUR = "#D55E00"  # Okabe-Ito vermillion
COLOURS = ["#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


PANEL_PX = 220  # each method's plot area
GAP_PX = 110  # between two: the upper plot's tick labels and axis title, then the lower one's own title
TOP_PX = 130  # the figure's title and its two subtitle lines, then the first plot's own title


def chosen_vs_oracle_per_iteration(df: pd.DataFrame, methods: list[str]) -> go.Figure:
    """One panel per method (one prompt): the SL it chose at each iteration (bars) and the oracle SL there."""
    methods = [m for m in methods if m in set(df["method"])]
    rows = max(1, len(methods))
    area = rows * PANEL_PX + (rows - 1) * GAP_PX  # the plots and the gaps between them, in pixels
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=False,
        subplot_titles=methods,
        vertical_spacing=GAP_PX / area if rows > 1 else 0.0,
    )
    for row, method in enumerate(methods, start=1):
        d = df[df["method"] == method]
        fig.add_bar(
            x=d["iteration"],
            y=d["speculation_length"],
            name="chosen SL",
            marker_color=COLOURS[0],
            showlegend=row == 1,
            row=row,
            col=1,
        )
        fig.add_scatter(
            x=d["iteration"],
            y=d["oracle_sl"],
            mode="markers+lines",
            name="oracle SL",  # what it is: the subtitle (a phone's legend row holds ~40 characters)
            line={"color": ORACLE_COLOUR, "dash": "dot"},
            marker={"symbol": "diamond"},
            showlegend=row == 1,
            row=row,
            col=1,
        )
    # whole iterations (three of them were ticked -0.5, 0, 0.5, ...), counted from 1 as in the rest of the app
    count_ticks(fig, df["iteration"].max() - 1 if len(df) else 0).update_xaxes(tick0=1)
    fig = finish(
        fig,
        "Speculation length",
        "",
        "",
        legend="per iteration",
        subtitle="chosen (bars) vs oracle (dotted), per iteration<br>oracle SL: the draft tokens the target accepts",
        height=TOP_PX + area + 80,  # 80: the last plot's axis below it (finish adds the legend's rows)
    )
    fig.update_layout(margin_t=TOP_PX)
    # every row's axes, after finish (it titles the first row's only): each plot reads on its own
    fig.update_yaxes(title_text="tokens")
    return fig.update_xaxes(title_text="iteration")


def oracle_sl_histogram(df: pd.DataFrame) -> go.Figure:
    """Distribution of the oracle speculation length per suite (DISCO's Table 2 / Figure 1)."""
    fig = go.Figure()
    for n, (suite, d) in enumerate(df.groupby("suite", sort=False)):
        values = d["oracle_sl"].dropna()
        spread = f" ± {values.std():.1f}" if len(values) > 1 else ""
        fig.add_histogram(
            x=values,
            name=f"{suite}: mean {values.mean():.1f}{spread}",
            showlegend=True,
            marker_color=COLOURS[n % len(COLOURS)],
            opacity=0.7,
            xbins={"size": 1},
            histnorm="percent",
        )
    fig.update_layout(barmode="overlay")
    count_ticks(fig, df["oracle_sl"].max() if len(df) else 0)
    return finish(
        fig,
        "Oracle speculation length",
        "oracle SL (tokens)",
        "% of iterations",
        legend="suite",
        subtitle="draft tokens the target accepts in a row",
    )


def sl_error_bars(rows: list[dict]) -> go.Figure:
    """Mean |chosen SL - oracle SL| per method and suite: how close each policy is to the oracle."""
    df = pd.DataFrame(rows)
    fig = go.Figure()
    for n, (suite, d) in enumerate(df.groupby("suite", sort=False)):
        fig.add_bar(x=d["label"], y=d["sl_abs_error"], name=suite, marker_color=COLOURS[n % len(COLOURS)])
    fig.update_layout(
        title="Distance to the oracle speculation length",
        barmode="group",
        xaxis_title="method",
        yaxis_title="mean |chosen SL − oracle SL| (tokens)",
        legend_title="suite",
    )
    return fig
