"""The leaderboard heatmap: methods × benchmark columns, each cell a measured figure and its
spread over prompts. Pure function: the summary frame of `specviz.leaderboard` -> Figure."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.theme import OKABE_ITO, empty, finish

WATCH_HINT = "A race on one of these prompts: <i>Watch it on the Race tab</i>, below"
METRICS = {  # column of the summary -> (axis and colour-bar title, cell format, value of "no gain")
    "speedup": ("speedup vs the target alone (×)", "{:.2f}×", 1.0),
    "tokens_per_pass": ("tokens per target pass", "{:.2f}", 1.0),
}


def leaderboard_figure(
    table: pd.DataFrame,
    metric: str,
    columns: Sequence[str],
    labels: Mapping[str, str],
    title: str,
    headers: Mapping[str, str] | None = None,
    rank_by: str = "all",
    watchable: Mapping[str, Collection[str]] | None = None,
) -> go.Figure:
    """Rows: methods, best first on the `rank_by` column (one every method has); columns in `columns`
    order, headed by `headers` (the column itself where absent). Colour: the metric, white at its
    no-gain value (vermillion loses to the target alone, blue wins). A cell whose method is in the race
    shipped for its column (`watchable`: column -> the methods that race holds) says where to watch it."""
    axis, fmt, neutral = METRICS[metric]
    if table.empty:
        return empty(title, "No shipped run measured this benchmark.")
    headers = headers or {}
    overall = table[table["column"] == rank_by].set_index("method")[metric]
    methods = sorted(table["method"].unique(), key=lambda m: -overall.get(m, 0.0))
    cells = table.set_index(["method", "column"])
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    hover: list[list[str]] = []
    for method in methods:
        z.append([])
        text.append([])
        hover.append([])
        for column in columns:
            if (method, column) not in cells.index:
                z[-1].append(None)
                text[-1].append("not measured")
                hover[-1].append(f"{labels.get(method, method)}: not measured on {headers.get(column, column)}")
                continue
            cell = cells.loc[(method, column)]
            value = cell[metric]
            spread = f"<br>{cell['p25']:.2f}–{cell['p75']:.2f}" if metric == "speedup" else ""
            z[-1].append(value)
            text[-1].append(fmt.format(value) + spread)
            hover[-1].append(
                f"<b>{labels.get(method, method)}</b>, {headers.get(column, column)}<br>"
                f"speedup {cell['speedup']:.2f}× (per prompt, 25th–75th percentile "
                f"{cell['p25']:.2f}–{cell['p75']:.2f})<br>tokens per target pass {cell['tokens_per_pass']:.2f}<br>"
                f"{int(cell['prompts'])} prompts · run: {cell['name']}"
                + (f"<br>{WATCH_HINT}" if method in (watchable or {}).get(column, ()) else "")
            )
    values = [v for row in z for v in row if v is not None]
    low, high = min(*values, neutral - 0.1), max(*values, neutral + 0.1)
    white = (neutral - low) / (high - low)  # where "no gain" sits on the colour bar
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[headers.get(c, c) for c in columns],
            y=[labels.get(m, m) for m in methods],
            text=text,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            colorscale=[[0.0, OKABE_ITO["vermillion"]], [white, "#FFFFFF"], [1.0, OKABE_ITO["blue"]]],
            zmin=low,
            zmax=high,
            colorbar={"title": {"text": axis, "side": "right"}},
            xgap=2,
            ygap=2,
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top", tickangle=0, automargin=True)
    finish(
        fig,
        title,
        x="",
        y="",
        legend=None,
        subtitle=f"cells: {axis}"
        + (" over the column's prompts; below, its spread over prompts" if metric == "speedup" else ""),
        height=120 + 56 * len(methods),
    )
    return fig.update_layout(margin={"t": 130})
