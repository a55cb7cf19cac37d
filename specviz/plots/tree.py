"""An SSSD iteration's candidate tree: nodes by depth, colour by source, the accepted path drawn bold.

Pure: plain lists (as stored in a record's `extra`) -> plotly Figure. No torch.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go

from specviz.text import visible as visible_text

# Okabe-Ito colours: readable with the common colour-vision deficiencies.
SOURCE_COLOURS = {"input": "#0072B2", "datastore": "#E69F00", "model": "#009E73"}
ACCEPTED, REJECTED = "#009E73", "#BBBBBB"


def layout(parents: Sequence[int]) -> list[tuple[int, float]]:
    """(depth, row) of every node: leaves on consecutive rows in depth-first order, each inner
    node centred on its children (a tidy tree layout). Parents come before their children."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    pos: dict[int, tuple[int, float]] = {}
    next_row = [0.0]

    def place(node: int, depth: int) -> float:
        kids = children.get(node, [])
        row = sum(place(k, depth + 1) for k in kids) / len(kids) if kids else next_row[0]
        if not kids:
            next_row[0] += 1
        pos[node] = (depth, row)
        return row

    for root_child in children.get(-1, []):
        place(root_child, 1)
    return [pos[i] for i in range(len(parents))]


def tree_figure(
    tokens: Sequence[Any],
    parents: Sequence[int],
    accepted_path: Sequence[int] = (),
    sources: Sequence[str] | None = None,
    scores: Sequence[float] | None = None,
    decode: Callable[[Any], str] | None = None,
    title: str = "Candidate tree",
    colour_of: Callable[[str], str] | None = None,
) -> go.Figure:
    """Nodes labelled with their token text (whitespace made visible); the accepted path bold and
    green-edged; nodes coloured by source (`colour_of`: source -> colour, e.g. one per stream)."""
    fig = go.Figure()
    if not tokens:
        fig.add_annotation(text="No candidates in this iteration (no n-gram matched).", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(title=title, xaxis_visible=False, yaxis_visible=False)
        return fig
    where = layout(parents)
    rows = [r for _, r in where]
    root = (0, (min(rows) + max(rows)) / 2)
    accepted = set(accepted_path)
    label = [visible(decode(t)) if decode else str(t) for t in tokens]
    colour_of = colour_of or (lambda source: SOURCE_COLOURS.get(source, "#CC79A7"))
    for i, p in enumerate(parents):  # edges
        x0, y0 = root if p < 0 else where[p]
        x1, y1 = where[i]
        on_path = i in accepted
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                                 line={"color": ACCEPTED if on_path else REJECTED, "width": 4 if on_path else 1.5}))
    fig.add_trace(go.Scatter(x=[root[0]], y=[root[1]], mode="markers+text", text=["context"], textposition="middle left",
                             marker={"size": 14, "color": "#444444", "symbol": "square"}, name="committed context", hoverinfo="skip"))
    sources = list(sources) if sources is not None else ["input"] * len(tokens)
    for source in dict.fromkeys(sources):
        idx = [i for i, s in enumerate(sources) if s == source]
        hover = [f"{label[i]!r}<br>depth {where[i][0]}" + (f"<br>score {scores[i]:.3f}" if scores else "")
                 + ("<br><b>accepted</b>" if i in accepted else "") for i in idx]
        fig.add_trace(go.Scatter(
            x=[where[i][0] for i in idx], y=[where[i][1] for i in idx], mode="markers+text", name=f"from {source}",
            text=[label[i] for i in idx], textposition="middle right", hovertext=hover, hoverinfo="text",
            marker={"size": [16 if i in accepted else 11 for i in idx], "color": colour_of(source),
                    "line": {"width": [3 if i in accepted else 0 for i in idx], "color": ACCEPTED}},
        ))
    fig.update_layout(
        title=f"{title}: {len(tokens)} nodes, {len(accepted)} accepted",
        xaxis={"title": "depth (tokens ahead of the context)", "dtick": 1, "zeroline": False},
        yaxis={"visible": False, "autorange": "reversed"}, legend_title="node source (bold: accepted path)",
        height=max(320, 38 * (max(rows) + 2)),  # a row per leaf, tall enough for its label
    )
    return fig


def record_tree_figure(record: dict[str, Any], decode: Callable[[Any], str] | None = None,
                       colour_of: Callable[[str], str] | None = None) -> go.Figure:  # fmt: skip
    """The tree of one SSSD or Streaming record (`IterationRecord.to_dict()` or a records-frame row's fields)."""
    extra = record.get("extra", record)
    return tree_figure(extra.get("tree_tokens", []), extra.get("tree_parents", []), extra.get("accepted_path", []),
                       extra.get("tree_sources"), extra.get("tree_scores"), decode,
                       title=f"Iteration {record.get('iteration', '?')} at position {record.get('position', '?')}", colour_of=colour_of)


def visible(text: str) -> str:
    """A token's text as a tree label: spaces as '·', line breaks as '⏎', tabs as '⇥', nothing as
    '∅', and markup such as `<|im_start|>` escaped (plotly would drop it as an unknown tag)."""
    return html.escape(visible_text(text), quote=False)
