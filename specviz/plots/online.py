"""Online Speculative Decoding's figures: acceptance over a request stream, and what the draft learned.

Pure functions of plain data: `rows` are the serving simulator's per-request dicts (request, suite, draft_version,
osd_accepted, osd_tested, static_accepted, static_tested; alpha = accepted / tested, see
`specviz.metrics`), `updates` the learner's per-update
dicts (request, loss_first, loss_last, ms), `tokens` the rows of `specviz.osd.analysis.token_table`.
"""

from __future__ import annotations

import itertools

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.osd.analysis import moving_alpha
from specviz.plots.theme import finish

STATIC_COLOUR = "#7F7F7F"  # grey: the draft kept as it was
ONLINE_COLOUR = "#0072B2"  # Okabe-Ito blue: the draft learning online
LOSS_COLOUR = "#D55E00"
SUITE_COLOURS = ["#0072B2", "#009E73", "#CC79A7", "#E69F00"]
ALPHA = "α (accepted ÷ tested)"  # the Race tab's name and definition (specviz.metrics)


def shift_points(rows: list[dict], max_shifts: int = 20) -> list[int]:
    """Requests where the stream moves to another suite (none for a mixed stream: too many to mark)."""
    points = [r["request"] for prev, r in itertools.pairwise(rows) if r["suite"] != prev["suite"]]
    return points if len(points) <= max_shifts else []


def version_points(rows: list[dict], max_marks: int = 12) -> list[tuple[int, int]]:
    """(request, draft version) where a new version of the online draft serves its first request (none
    when there are too many to mark)."""
    points = [
        (r["request"], r["draft_version"])
        for prev, r in itertools.pairwise(rows)
        if r["draft_version"] != prev["draft_version"]
    ]
    return points if len(points) <= max_marks else []


def _draft_traces(fig: go.Figure, rows: list[dict], x: list[int], window: int) -> None:
    """Per-request alpha and its moving average, online then static (the static line drawn over the online)."""
    drafts = (
        ("osd", "online draft (OSD)", ONLINE_COLOUR, "solid", 4),
        ("static", "static draft", STATIC_COLOUR, "dash", 2),
    )
    for who, name, colour, dash, width in drafts:
        acc, dra = [r[f"{who}_accepted"] for r in rows], [r[f"{who}_tested"] for r in rows]
        per_request = [a / d if d else None for a, d in zip(acc, dra, strict=True)]
        fig.add_scatter(
            x=x,
            y=per_request,
            mode="markers",
            marker={"color": colour, "size": 9 if who == "osd" else 5, "opacity": 0.6},
            name=f"{name}, per request",
            legendgroup=who,
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=x,
            y=moving_alpha(acc, dra, window),
            mode="lines",
            line={"color": colour, "width": width, "dash": dash},
            name=f"{name}, last {window} requests",
            legendgroup=who,
            row=1,
            col=1,
        )


def _stream_marks(fig: go.Figure, rows: list[dict]) -> None:
    """Vertical lines where a new draft version serves its first request, then where the suite shifts."""
    for request, version in version_points(rows):
        fig.add_vline(
            x=request + 0.5,
            line={"dash": "dot", "color": ONLINE_COLOUR, "width": 1},
            annotation_text=f"draft v{version}",
            annotation_position="bottom right",
            annotation_font_color=ONLINE_COLOUR,
            row=1,
            col=1,
        )
    for point in shift_points(rows):
        suite = next(r["suite"] for r in rows if r["request"] == point)
        fig.add_vline(
            x=point + 0.5,
            line={"dash": "dash", "color": "black"},
            annotation_text=f"shift to {suite}",
            annotation_position="top left",
            row=1,
            col=1,
        )


def _loss_traces(fig: go.Figure, updates: list[dict], x: list[int]) -> None:
    """Each update's first- and last-step loss in the lower plot, or a note that there is none yet."""
    if updates:
        ux = [u["request"] for u in updates]
        fig.add_scatter(
            x=ux,
            y=[u["loss_first"] for u in updates],
            mode="markers",
            marker={"color": LOSS_COLOUR, "symbol": "circle-open"},
            name="loss at the update's first step",
            row=2,
            col=1,
        )
        fig.add_scatter(
            x=ux,
            y=[u["loss_last"] for u in updates],
            mode="lines+markers",
            line={"color": LOSS_COLOUR},
            name="loss at its last step",
            row=2,
            col=1,
        )
    else:  # an empty trace draws the loss plot's axes (plotly leaves a subplot without traces blank)
        fig.add_scatter(x=x, y=[None] * len(x), mode="lines", showlegend=False, hoverinfo="skip", row=2, col=1)
        fig.update_yaxes(range=[0, 1], showticklabels=False, row=2, col=1)
        fig.add_annotation(
            text="no update yet: until the first, the online draft is the static draft",
            x=0.5,
            y=0.5,
            xref="x2 domain",
            yref="y2 domain",
            showarrow=False,
            font={"color": LOSS_COLOUR},
        )


def _stream_axes(fig: go.Figure, x: list[int]) -> None:
    """alpha in [0, 1] above, the loss below, requests served along the shared axis."""
    fig.update_yaxes(range=[0, 1], row=1, col=1)
    fig.update_yaxes(title_text="loss (nats)", row=2, col=1)
    fig.update_xaxes(title_text="requests served", row=2, col=1)
    if x:  # whole requests on the axis (a short stream got ticks at 0.5, 1.5, ...)
        fig.update_xaxes(range=[0.5, max(x) + 0.5], **({"dtick": 1} if max(x) <= 12 else {}), row=2, col=1)


def acceptance_over_stream(rows: list[dict], updates: list[dict], window: int = 50) -> go.Figure:
    """alpha over the last `window` requests vs requests served, online vs static, shifts and new draft
    versions marked; the loss below. Until the first update the online draft is the static draft: the
    static line is drawn dashed over the online one, so that two equal lines still read as two."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06)
    x = [r["request"] + 1 for r in rows]
    _draft_traces(fig, rows, x, window)
    _stream_marks(fig, rows)
    _loss_traces(fig, updates, x)
    _stream_axes(fig, x)
    return finish(
        fig,
        "α over the stream",
        "",
        ALPHA,
        legend="",
        subtitle="online vs static draft; below: each update's loss",
        height=620,
    )


def acceptance_per_domain(rows: list[dict], window: int = 50) -> go.Figure:
    """Moving alpha of each suite's own requests in a mixed stream (appendix A.4: does learning one domain
    make the draft forget another?). Solid: online; dotted: static."""
    fig = go.Figure()
    for n, suite in enumerate(dict.fromkeys(r["suite"] for r in rows)):
        mine = [r for r in rows if r["suite"] == suite]
        x = [r["request"] + 1 for r in mine]
        colour = SUITE_COLOURS[n % len(SUITE_COLOURS)]
        for who, dash in (("osd", "solid"), ("static", "dot")):
            y = moving_alpha([r[f"{who}_accepted"] for r in mine], [r[f"{who}_tested"] for r in mine], window)
            fig.add_scatter(
                x=x,
                y=y,
                mode="lines",
                line={"color": colour, "dash": dash},
                name=f"{suite}, {'online' if who == 'osd' else 'static'}",
            )
    fig.update_yaxes(range=[0, 1])
    return finish(
        fig,
        "α per domain",
        "requests served",
        ALPHA,
        legend="suite, draft",
        subtitle=f"last {window} requests of each suite; solid: online, dotted: static",
    )


def token_precision(tokens: list[dict], show: int = 15) -> go.Figure:
    """The tokens whose precision rose most (of the most frequent target tokens): before vs after.
    Bars across, one token a row: its text reads level on a phone."""
    top = tokens[:show]
    labels = [repr(t.get("text", t["token"])) for t in top]
    fig = go.Figure()
    fig.add_bar(
        y=labels,
        x=[t["precision_before"] for t in top],
        orientation="h",
        name="precision, initial draft",
        marker_color=STATIC_COLOUR,
    )
    fig.add_bar(
        y=labels,
        x=[t["precision_after"] for t in top],
        orientation="h",
        name="precision, adapted draft",
        marker_color=ONLINE_COLOUR,
    )
    fig.add_scatter(
        y=labels,
        x=[t["recall_after"] - t["recall_before"] for t in top],
        mode="markers",
        name="change in recall",
        marker={"color": LOSS_COLOUR, "symbol": "diamond", "size": 9},
    )
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_xaxes(range=[-0.2, 1.05])  # a gain in recall of 1 is drawn whole at the right edge
    fig.update_yaxes(autorange="reversed", automargin=True)
    return finish(
        fig,
        "Tokens the draft learned",
        "precision (share of guesses right)",
        "",
        legend="",
        subtitle="biggest precision gains, most frequent tokens",
        height=160 + 36 * max(1, len(top)),
    )
