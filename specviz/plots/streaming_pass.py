"""Speculative Streaming's one target pass of an iteration, row by row: which rows verify the tree and
which speculate the next one (the paper's Figure 1(b), `methods.streaming`'s fused pass).

The pass holds, in order, the main rows (the committed tokens not yet cached, then the tree's nodes)
through every decoder layer, and in the top N_s layers the gamma stream rows of every row that can
become the accepted node (the last committed token and each node), node-major. Once the main logits
have decided the accepted path, only the accepted node's streams draft the next tree; every other
stream row was computed and is discarded. When the tree-pruning layer (the paper's section 3.2.3)
dropped nodes partway up, their rows stop there: they run no layer above it, verify nothing (they are
never on the accepted path) and carry no stream rows, so the stream rows are the kept nodes' alone.

Pure: a record as a dict (`IterationRecord.to_dict()`), whose `StreamingPassExtra` says the pass's
shape (N, N_s, γ, m) -> rows -> plotly Figure. No torch, no model: a saved run draws as it ran; a
record without the shape (saved before records carried it, or the two-pass build) says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from specviz.extras import StreamingPassExtra
from specviz.plots.theme import OKABE_ITO, count_ticks, empty, finish, wrap
from specviz.plots.tree import record_tree, visible

if TYPE_CHECKING:
    from specviz.records import IterationRecord

# a row's role in the pass -> (legend name, colour); legend order is this order
ROLES = {
    "committed": ("committed token", "#444444"),
    "accepted": ("node accepted", OKABE_ITO["bluish_green"]),
    "rejected": ("node not accepted", OKABE_ITO["vermillion"]),  # most were never tested
    "pruned": ("node pruned", OKABE_ITO["reddish_purple"]),  # stopped partway up: its bar is short
    "next": ("streams → next tree", OKABE_ITO["blue"]),
    "discarded": ("streams discarded", "#BBBBBB"),
}

NOT_RECORDED = (
    "Not recorded: this record does not carry the pass's shape (layers, stream layers, streams per node,"
    " committed rows). Runs saved before records carried it, and the two-pass build, cannot draw the pass."
)


@dataclass(frozen=True)
class PassRow:
    """One row of the pass."""

    role: str  # a key of ROLES
    node: int  # the tree node it belongs to: -1 for the last committed token, -2 for an earlier one
    stream: int  # 0: the main stream; j = 1..gamma: stream j
    first_layer: int  # 0-based: the first decoder layer the row runs through
    token: int | None  # the token of the row's node (None for a committed token: not in the record)
    stops_after: int | None = None  # the layers it ran, from the bottom (a pruned node: the pruning
    # layer's); None: it runs up to the top


@dataclass(frozen=True)
class PassCounts:
    """What one pass's rows count, for a sentence beside its figure."""

    committed: int  # m: rows of committed tokens not yet cached
    nodes: int  # the tree's nodes, verified in this pass unless pruned (0: no tree)
    pruned: int  # the nodes the pruning layer dropped: they ran no layer above it and no streams
    prune_layer: int | None  # the layers the pruned nodes ran (None: nothing pruned)
    gamma: int  # γ: stream rows per candidate node (0: no streams ran)
    stream_rows: int  # (1 + nodes - pruned) * γ: every kept candidate node's streams
    kept: int  # the accepted node's streams that drafted the next tree
    last: bool  # the run's last pass

    @staticmethod
    def of(rows: Sequence[PassRow], gamma: int, last: bool) -> PassCounts:
        return PassCounts(
            committed=sum(r.role == "committed" for r in rows),
            nodes=sum(r.stream == 0 and r.node >= 0 for r in rows),
            pruned=sum(r.role == "pruned" for r in rows),
            prune_layer=next((r.stops_after for r in rows if r.role == "pruned"), None),
            gamma=gamma,
            stream_rows=sum(r.stream > 0 for r in rows),
            kept=sum(r.role == "next" for r in rows),
            last=last,
        )


def pass_shape(record: IterationRecord) -> StreamingPassExtra | None:
    """The recorded shape of a record's pass (N, N_s, γ, m); None when the record does not carry it."""
    return record.extras(StreamingPassExtra)


def kept_streams(next_record: IterationRecord | None) -> int:
    """How many of the accepted node's streams drafted the next tree: the streams its nodes came from
    (stream j's tokens are children of stream j-1's, so they are streams 1..k); 0 after the last pass."""
    if next_record is None:
        return 0
    return len(set(record_tree(next_record).tree_sources))


def pass_rows(record: IterationRecord, shape: StreamingPassExtra, kept: int = 0) -> list[PassRow]:
    """The rows of `record`'s pass in their order: m committed-token rows, the tree's nodes (a pruned
    one stopping at the pruning layer), then each kept candidate node's γ stream rows (`shape`, as
    recorded); `kept`: the accepted node's streams that drafted the next tree (`kept_streams`)."""
    tree, committed = record_tree(record), shape.committed_rows
    accepted = set(tree.accepted_path)  # as the tree figure beside it marks them
    accepted_node = tree.accepted_path[-1] if tree.accepted_path else -1  # -1: the last committed token
    pruned = set(shape.pruned or ())  # the whole drafted tree is recorded, its pruned nodes too
    rows = [PassRow("committed", -1 if k == committed - 1 else -2, 0, 0, None) for k in range(committed)]
    rows += [_node_row(i, t, accepted, pruned, shape.prune_layer) for i, t in enumerate(tree.tree_tokens)]
    top = shape.layers - shape.stream_layers
    for node in (n for n in range(-1, len(tree.tree_tokens)) if n not in pruned):  # no streams for a pruned node
        rows += [
            PassRow(
                "next" if node == accepted_node and j <= kept else "discarded",
                node,
                j,
                top,
                tree.tree_tokens[node] if node >= 0 else None,
            )
            for j in range(1, shape.gamma + 1)
        ]
    return rows


def _node_row(i: int, token: int, accepted: set[int], pruned: set[int], prune_layer: int | None) -> PassRow:
    """Node i's main row: accepted, not accepted, or pruned (stopped after `prune_layer` layers; a
    pruned node is never on the accepted path, but pruning is checked first so a bar never claims more
    layers than the row ran)."""
    if i in pruned:
        return PassRow("pruned", i, 0, 0, token, prune_layer)
    return PassRow("accepted" if i in accepted else "rejected", i, 0, 0, token)


def streaming_pass_figure(
    record: IterationRecord, kept: int = 0, decode: Callable[[int], str] | None = None
) -> go.Figure:
    """One bar per row of the pass, from the first layer it runs through to the top (a pruned node's
    to the pruning layer), coloured by its role; a note instead when the record does not carry the
    pass's shape (nothing is guessed)."""
    shape = pass_shape(record)
    if shape is None:
        return empty(f"{_iteration(record)}: pass not recorded", NOT_RECORDED)
    return _draw(_iteration(record), shape, pass_rows(record, shape, kept), decode)


def _draw(
    iteration: str, shape: StreamingPassExtra, rows: list[PassRow], decode: Callable[[int], str] | None
) -> go.Figure:
    main = sum(r.stream == 0 for r in rows)
    fig = go.Figure()
    for role, (name, colour) in ROLES.items():
        idx = [i for i, r in enumerate(rows) if r.role == role]
        if not idx:
            continue  # the legend lists the roles this pass has
        fig.add_trace(
            go.Bar(
                x=[i + 1 for i in idx],  # rows counted from 1
                y=[_end(rows[i], shape) - rows[i].first_layer for i in idx],
                base=[rows[i].first_layer for i in idx],
                name=name,
                marker={"color": colour, "line": {"width": 0}},
                hovertext=[_hover(i + 1, rows[i], shape, decode) for i in idx],
                hoverinfo="text",
            )
        )
    if shape.gamma:
        top = shape.layers - shape.stream_layers
        fig.add_vline(x=main + 0.5, line={"color": "#888888", "dash": "dot"})  # main rows | stream rows
        fig.add_hline(y=top, line={"color": "#888888", "dash": "dot"})  # where the streams start
    if shape.prune_layer is not None and shape.pruned:
        _prune_line(fig, shape.prune_layer)
    fig.update_layout(bargap=0.15, barmode="overlay")
    fig.update_yaxes(range=[0, shape.layers], tick0=0, dtick=_layer_step(shape.layers), rangemode="tozero")
    count_ticks(fig, len(rows), most=6)
    fig.update_xaxes(range=[0.4, len(rows) + 0.6])
    return finish(
        fig,
        f"{iteration}: one pass, {main} + {len(rows) - main} rows",
        "row of the pass",
        "decoder layers",
        legend="rows of the pass",
        subtitle=wrap(_subtitle(shape)),
        height=420,
    )


def _subtitle(shape: StreamingPassExtra) -> str:
    """Which rows run which layers; the pruned nodes' rows are main rows that stop at the pruning layer."""
    pruned = (
        f" (the {len(shape.pruned)} pruned node{'s' if len(shape.pruned) != 1 else ''}' through the first"
        f" {shape.prune_layer})"
        if shape.prune_layer is not None and shape.pruned
        else ""
    )
    if not shape.gamma:
        return f"main rows through all {shape.layers} layers{pruned}; no streams run"
    return (
        f"main rows (left of the dotted line) through all {shape.layers} layers{pruned}, stream rows through"
        f" the top {shape.stream_layers}"
    )


def _prune_line(fig: go.Figure, layer: int) -> None:
    """A dotted line where the pruning layer dropped nodes, in their colour and named, like the line
    where the streams start (the two meet when the pruning layer sits just below the streams); the
    label sits under the line's right end, below the stream rows (they start at or above it)."""
    fig.add_hline(
        y=layer,
        line={"color": ROLES["pruned"][1], "dash": "dot"},
        annotation_text=f"pruned after layer {layer}",
        annotation_position="bottom right",
        annotation_font={"size": 12, "color": ROLES["pruned"][1]},
        annotation_bgcolor="rgba(255,255,255,0.8)",
    )


def run_pass(
    records: Sequence[IterationRecord], i: int, decode: Callable[[int], str] | None = None
) -> tuple[go.Figure, PassCounts | None]:
    """The pass of a run's record i (0-based), its kept streams read off the next record's tree, and
    what its rows count (None when the record does not carry the pass's shape)."""
    last = i + 1 == len(records)
    record, kept = records[i], kept_streams(None if last else records[i + 1])
    shape = pass_shape(record)
    if shape is None:
        return streaming_pass_figure(record, kept, decode), None
    rows = pass_rows(record, shape, kept)
    return _draw(_iteration(record), shape, rows, decode), PassCounts.of(rows, shape.gamma, last)


def _iteration(record: IterationRecord) -> str:
    """'Iteration 3': counted from 1, as the tabs."""
    return f"Iteration {record.iteration + 1}"


def _layer_step(layers: int) -> int:
    """A y tick every 1, 2, 5, 10, ... layers: at most 6 ticks."""
    for step in (1, 2, 5, 10, 20, 50):
        if layers / step <= 6:
            return step
    return 100


def _end(row: PassRow, shape: StreamingPassExtra) -> int:
    """Where the row's bar ends: the top, or the pruning layer for a pruned node (it ran no layer above)."""
    return shape.layers if row.stops_after is None else row.stops_after


def _hover(n: int, row: PassRow, shape: StreamingPassExtra, decode: Callable[[int], str] | None) -> str:
    layers = f"layers {row.first_layer + 1}-{_end(row, shape)}"  # 1-based, as the y axis counts them
    if row.stops_after is not None:
        layers += f": pruned after layer {row.stops_after}, no streams"
    node = (
        "the last committed token"
        if row.node == -1
        else "a committed token"
        if row.node == -2
        else f"node {row.node + 1}"
    )
    if row.token is not None and decode is not None:
        node += f" {visible(decode(row.token))!r}"
    what = f"stream {row.stream} of {node}" if row.stream else node
    return f"row {n}: {what}<br>{ROLES[row.role][0]}, {layers}"
