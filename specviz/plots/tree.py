"""An SSSD or Speculative Streaming iteration's tree: nodes by depth, colour by source (or stream), the
accepted path drawn in thick black, and the nodes a Streaming pass's pruning layer dropped crossed out.

Pure: plain lists (a record's `extras.TreeExtra`) -> plotly Figure. No torch.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from specviz.extras import StreamingPassExtra, TreeExtra
from specviz.plots.theme import OKABE_ITO, empty, finish
from specviz.text import visible as visible_text

if TYPE_CHECKING:
    from specviz.records import IterationRecord

# Okabe-Ito colours: readable with the common colour-vision deficiencies.
SOURCE_COLOURS = {"input": "#0072B2", "datastore": "#E69F00", "model": "#009E73"}
ACCEPTED, REJECTED = "#000000", "#BBBBBB"  # the accepted path black: no source's or stream's colour
LABEL_PX, ROW_PX = 16, 52  # token labels readable on a projector; a row per leaf, tall enough for its label
LABEL_FONT = {"size": LABEL_PX, "family": "ui-monospace, Menlo, Consolas, monospace", "color": "#222222"}
# The pass figure's colour of a pruned row (plots.streaming_pass), so both figures name the same nodes alike.
PRUNED = OKABE_ITO["reddish_purple"]
PRUNED_NAME = "pruned (never verified)"


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
    subtitle: str | None = None,
    pruned: Collection[int] = (),
    prune_layer: int | None = None,
) -> go.Figure:
    """Nodes labelled above with their token text (whitespace made visible; beside a node the label sat
    on its outgoing edges); the accepted path in thick black lines and black rings; nodes coloured by
    source (`colour_of`: source -> colour, e.g. one per stream, the colours of the tab's text).
    `pruned` nodes (Streaming's pruning layer dropped them after `prune_layer` layers) are crossed-out
    rings on dotted edges in one legend entry: drawn like a rejected node, they read as checked and
    refused, though the target never verified them."""
    fig = go.Figure()
    if not tokens:
        return empty(title, "No candidates in this iteration (no n-gram matched).")
    where = layout(parents)
    rows = [r for _, r in where]
    root = (0, (min(rows) + max(rows)) / 2)
    accepted, dropped = set(accepted_path), set(pruned)  # `pruned` as recorded: each dropped node, not expanded
    label = [visible(decode(t)) if decode else str(t) for t in tokens]
    add_edges(fig, where, root, parents, accepted, dropped)
    fig.add_trace(
        go.Scatter(
            x=[root[0]],
            y=[root[1]],
            mode="markers+text",
            text=["context"],
            textposition="middle left",
            marker={"size": 14, "color": "#444444", "symbol": "square"},
            name="committed context",
            hoverinfo="skip",
            cliponaxis=False,
        )
    )
    source = list(sources) if sources is not None else ["input"] * len(tokens)
    add_nodes(fig, where, label, accepted, source, scores, colour_of, dropped)
    add_pruned(fig, where, label, source, scores, sorted(dropped), prune_layer)
    depth = max(d for d, _ in where)
    fig.update_xaxes(dtick=1, zeroline=False, range=[-0.9, depth + 0.6])  # room for the root's label and half a leaf's
    fig.update_yaxes(
        visible=False, range=[max(rows) + 0.4, min(rows) - 0.8]
    )  # first leaf on top, room above for its label
    subtitle = "; ".join(filter(None, [subtitle, "black: the accepted path"]))
    return finish(
        fig,
        f"{title}: {len(tokens)} node{'s' if len(tokens) != 1 else ''}, {len(accepted)} accepted",
        "depth (tokens ahead of the context)",
        "",
        legend="",
        subtitle=subtitle,
        height=int(max(360, ROW_PX * (max(rows) + 1) + 150)),
    )  # a row per leaf


def add_edges(
    fig: go.Figure,
    where: list[tuple[int, float]],
    root: tuple[int, float],
    parents: Sequence[int],
    accepted: set[int],
    pruned: set[int],
) -> None:
    """One line per node from its parent (or the context): thick black on the accepted path, dotted in
    the pruned colour into a pruned node (the pruning layer cut that branch; pruning wins, as in the pass
    figure), thin grey otherwise."""
    for i, p in enumerate(parents):
        x0, y0 = root if p < 0 else where[p]
        x1, y1 = where[i]
        if i in pruned:
            line: dict[str, Any] = {"color": PRUNED, "width": 1.5, "dash": "dot"}
        else:
            on_path = i in accepted
            line = {"color": ACCEPTED if on_path else REJECTED, "width": 4 if on_path else 1.5}
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False, line=line))


def node_hover(i: int, label: list[str], where: list[tuple[int, float]], scores: Sequence[float] | None) -> str:
    """What every node's hover says: its token, its depth and its drafter's score if there is one."""
    return f"{label[i]!r}<br>depth {where[i][0]}" + (f"<br>score {scores[i]:.3f}" if scores else "")


def add_nodes(
    fig: go.Figure,
    where: list[tuple[int, float]],
    label: list[str],
    accepted: set[int],
    sources: list[str],
    scores: Sequence[float] | None,
    colour_of: Callable[[str], str] | None,
    pruned: Collection[int] = (),
) -> None:
    """One trace of nodes per source, in the source's colour, labelled in dark type (an orange label on
    white is hard to read); accepted nodes larger, ringed black. `pruned` nodes are left out (their own
    trace, `add_pruned`), and so is a source all of whose nodes were pruned: no empty legend entry."""
    colour_of = colour_of or (lambda source: SOURCE_COLOURS.get(source, "#CC79A7"))
    for source in dict.fromkeys(sources):
        idx = [i for i, s in enumerate(sources) if s == source and i not in pruned]
        if not idx:
            continue
        hover = [node_hover(i, label, where, scores) + ("<br><b>accepted</b>" if i in accepted else "") for i in idx]
        fig.add_trace(
            go.Scatter(
                x=[where[i][0] for i in idx],
                y=[where[i][1] for i in idx],
                mode="markers+text",
                name=f"from {source}",
                text=[label[i] for i in idx],
                textposition="top center",
                hovertext=hover,
                hoverinfo="text",
                cliponaxis=False,
                textfont=LABEL_FONT,
                marker={
                    "size": [18 if i in accepted else 12 for i in idx],
                    "color": colour_of(source),
                    "line": {"width": [3 if i in accepted else 0 for i in idx], "color": ACCEPTED},
                },
            )
        )


def add_pruned(
    fig: go.Figure,
    where: list[tuple[int, float]],
    label: list[str],
    sources: list[str],
    scores: Sequence[float] | None,
    pruned: list[int],
    prune_layer: int | None,
) -> None:
    """The pruned nodes as one trace: crossed-out rings in the pruned colour, a shape no source's filled
    dot has (a stream may have the same colour), under one legend entry. Their hover keeps the source
    their colour no longer shows and says where the pruning layer stopped them. Nothing when none."""
    if not pruned:
        return
    where_cut = f"pruned after layer {prune_layer}" if prune_layer is not None else "pruned"
    fig.add_trace(
        go.Scatter(
            x=[where[i][0] for i in pruned],
            y=[where[i][1] for i in pruned],
            mode="markers+text",
            name=PRUNED_NAME,
            text=[label[i] for i in pruned],
            textposition="top center",
            hovertext=[
                node_hover(i, label, where, scores) + f"<br>from {sources[i]}<br><b>{where_cut}</b> (never verified)"
                for i in pruned
            ],
            hoverinfo="text",
            cliponaxis=False,
            textfont=LABEL_FONT,
            marker={"size": 12, "color": PRUNED, "symbol": "circle-x-open", "line": {"width": 2}},
        )
    )


def record_tree(record: IterationRecord) -> TreeExtra:
    """The tree of a record; empty when it has none."""
    return record.tree() or TreeExtra((), (), (), (), (), ())


def record_tree_figure(
    record: IterationRecord, decode: Callable[[Any], str] | None = None, colour_of: Callable[[str], str] | None = None
) -> go.Figure:
    """The tree of one SSSD or Streaming record, with the nodes a Streaming pass pruned (its
    `StreamingPassExtra`) marked."""
    tree = record_tree(record)
    shape = record.extras(StreamingPassExtra)
    return tree_figure(
        tree.tree_tokens,
        tree.tree_parents,
        tree.accepted_path,
        tree.tree_sources,
        tree.tree_scores,
        decode,
        title=f"Iteration {record.iteration + 1}",  # from 1, as the tabs
        colour_of=colour_of,
        subtitle=f"at output position {record.position}",
        pruned=(shape.pruned or ()) if shape else (),
        prune_layer=shape.prune_layer if shape else None,
    )


def visible(text: str) -> str:
    """A token's text as a tree label: spaces as '·', line breaks as '⏎', tabs as '⇥', nothing as
    '∅', and markup such as `<|im_start|>` escaped (plotly would drop it as an unknown tag)."""
    return html.escape(visible_text(text), quote=False)
