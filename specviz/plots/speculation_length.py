"""Per iteration: the speculation length a method chose against the oracle's (DISCO's view of policies).

The oracle speculation length of an iteration is how many tokens the draft model would have got
right from that position (`specviz.oracle`); a perfect policy drafts exactly that many.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.theme import OKABE_ITO, empty, finish, plain

TITLE = "Speculation length vs oracle"  # 28 characters: a phone's 360-pixel plot shows it whole


def speculation_length_vs_oracle(df: pd.DataFrame, method: str) -> go.Figure:
    """records_frame, method -> chosen SL (bars), accepted (bars) and oracle SL (markers) per iteration."""
    d = df[df["method"] == method]
    if d.empty:
        return empty(TITLE, f"No records for '{method}': run it in a race first.")
    label = plain(d["label"].iloc[0])  # a saved race's label: text, not markup
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=d["iteration"], y=d["speculation_length"], name="chosen (drafted)", marker_color=OKABE_ITO["sky_blue"])
    )
    fig.add_trace(
        go.Bar(
            x=d["iteration"], y=d["accepted"], name="accepted", marker_color=OKABE_ITO["blue"], marker_pattern_shape="/"
        )
    )
    if d["oracle_sl"].notna().any():
        fig.add_trace(
            go.Scatter(
                x=d["iteration"],
                y=d["oracle_sl"],
                mode="markers+lines",
                name="oracle (draft guesses that would be accepted)",
                line={"color": OKABE_ITO["vermillion"], "dash": "dot"},
                marker={"symbol": "diamond", "size": 9},
            )
        )
    fig.update_layout(barmode="group", bargap=0.25)
    fig = finish(
        fig,
        TITLE,
        "iteration",
        "tokens",
        legend="",  # no legend title: beside the entries it pushed the oracle's off a phone's plot
        # two short lines: one line of both ran off a phone's plot
        subtitle=f"{label} · oracle: the drafts the target<br>would accept (a perfect policy's length)",
    )
    # the oracle's entry fits a phone's width (finish leaves 20 px above the plot for each subtitle line)
    return fig.update_layout(legend_font_size=13)
