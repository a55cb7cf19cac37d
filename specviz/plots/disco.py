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


def chosen_vs_oracle_per_iteration(df: pd.DataFrame, methods: list[str]) -> go.Figure:
    """One panel per method (one prompt): the SL it chose at each iteration (bars) and the oracle SL there."""
    methods = [m for m in methods if m in set(df["method"])]
    fig = make_subplots(
        rows=max(1, len(methods)), cols=1, shared_xaxes=False, subplot_titles=methods, vertical_spacing=0.08
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
            name="oracle SL",
            line={"color": ORACLE_COLOUR, "dash": "dot"},
            marker={"symbol": "diamond"},
            showlegend=row == 1,
            row=row,
            col=1,
        )
    count_ticks(
        fig, df["iteration"].max() if len(df) else 0
    )  # whole iterations (three of them were ticked -0.5, 0, 0.5, ...)
    fig = finish(
        fig,
        "Speculation length",
        "",
        "",
        legend="per iteration",
        subtitle="chosen (bars) vs oracle (dotted), per iteration",
        height=260 * max(1, len(methods)) + 80,
    )
    fig.update_layout(margin_t=110)  # the first panel's own title under the subtitle
    fig.update_yaxes(title_text="tokens")  # every row's, after finish (it titles the first row's axes only)
    return fig.update_xaxes(title_text="iteration", row=len(methods), col=1)


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
