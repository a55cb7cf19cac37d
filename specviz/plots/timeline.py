"""Timeline (Gantt) of which model runs when: a draft lane and a target lane per method.

Pure functions of records (`IterationRecord`s; a saved run's dicts are read back with
`IterationRecord.from_dict` first): no torch. Methods that note every forward pass (PEARL:
`record.pearl()`'s draft and target intervals) are drawn pass by pass; for the others a step is
its drafting (`t_start` .. `t_start + draft_ms`) followed by its verification (.. `t_end`). The
gaps in a lane are that model's waiting ("mutual waiting" in PEARL's words), shaded grey.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from specviz.plots.theme import finish, wrap
from specviz.records import IterationRecord

LANES = ("draft", "target")
# Okabe-Ito colours: draft orange, target blue; PEARL's modes in lighter/darker shades.
COLOURS = {
    ("draft", ""): "#E69F00",
    ("target", ""): "#0072B2",
    ("draft", "pre-verify"): "#E69F00",
    ("draft", "post-verify"): "#D55E00",
    ("draft", "draft"): "#F0E442",
    ("target", "pre-verify"): "#56B4E9",
    ("target", "post-verify"): "#0072B2",
    ("target", "verify"): "#009E73",
}
IDLE = "rgba(128, 128, 128, 0.18)"


Records = Sequence[IterationRecord]


def busy_intervals(records: Records) -> pd.DataFrame:
    """One row per forward pass (or per drafting / verification span): lane, start, end (seconds
    since the run started), iteration, mode."""
    out = []
    for r in records:
        pearl = r.pearl()
        if pearl is not None:
            for lane, intervals in zip(LANES, (pearl.draft_intervals, pearl.target_intervals), strict=True):
                for start, end in intervals:
                    mode = next((p.mode for p in pearl.phases if p.start <= start <= p.end), pearl.mode)
                    out.append({"lane": lane, "start": start, "end": end, "iteration": r.iteration, "mode": mode})
            continue
        drafted_until = r.t_start + r.draft_ms / 1e3
        if r.draft_forwards > 0:
            out.append(
                {"lane": "draft", "start": r.t_start, "end": drafted_until, "iteration": r.iteration, "mode": ""}
            )
        out.append({"lane": "target", "start": drafted_until, "end": r.t_end, "iteration": r.iteration, "mode": ""})
    return pd.DataFrame(out, columns=["lane", "start", "end", "iteration", "mode"])


def idle_fractions(records: Records) -> dict[str, float]:
    """Share of the run's wall time (first step's start to last step's end) each model spends waiting."""
    rows = records
    if not rows:
        return dict.fromkeys(LANES, 0.0)
    wall = rows[-1].t_end - rows[0].t_start
    spans = busy_intervals(rows)
    busy = {lane: float((part["end"] - part["start"]).sum()) for lane, part in spans.groupby("lane")}
    return {lane: max(0.0, 1.0 - busy.get(lane, 0.0) / wall) if wall > 0 else 0.0 for lane in LANES}


TITLE = "Which model runs when"
SUBTITLE = "busy spans per lane, waiting in grey"
TITLE_CHARS = 34  # characters of the 21 px title in a phone's plot (theme.PHONE_PX, theme.EM)
LANE_PX = 48  # a lane's height: its bar below, its label above it
BAR = 0.45  # a bar's thickness, as a share of its lane: the label sits in the rest


def _title_line(title: str) -> tuple[str, str]:
    """The part of `title` a phone's title line holds, and the rest (for the subtitle): cut before its
    first bracket where that fits, else between words."""
    if len(title) <= TITLE_CHARS:
        return title, ""
    cut = title.rfind(" (", 0, TITLE_CHARS + 1)
    if cut > 0:
        return title[:cut], title[cut + 1 :]
    head, _, rest = wrap(title, TITLE_CHARS).partition("<br>")
    return head.strip(), rest.replace("<br>", "")


def _idle_bar(fig: go.Figure, y: str, t0: float, t1: float, shown: set[str]) -> None:
    """The lane's whole run in grey under its busy spans, so that what they leave uncovered reads as waiting."""
    fig.add_bar(
        y=[y],
        x=[1e3 * (t1 - t0)],
        base=[1e3 * t0],
        orientation="h",
        width=BAR,
        marker_color=IDLE,
        name="idle (waiting)",
        legendgroup="idle",
        showlegend="idle" not in shown,
        hoverinfo="skip",
    )
    shown.add("idle")


def _busy_bars(fig: go.Figure, y: str, lane: str, spans: pd.DataFrame, shown: set[str]) -> None:
    """The lane's busy spans, one trace per mode (PEARL's), so that each model and mode is one legend entry."""
    for mode, part in spans[spans["lane"] == lane].groupby("mode", sort=False):
        name = f"{lane}" + (f" · {mode}" if mode else "")
        hover = [
            f"{name}<br>step {it + 1}<br>{1e3 * s:.1f}–{1e3 * e:.1f} ms"
            for s, e, it in zip(part["start"], part["end"], part["iteration"], strict=True)
        ]
        fig.add_bar(
            y=[y] * len(part),
            x=1e3 * (part["end"] - part["start"]),
            base=1e3 * part["start"],
            orientation="h",
            width=BAR,
            marker_color=COLOURS.get((lane, mode), COLOURS[(lane, "")]),
            marker_line_width=0.5,
            marker_line_color="white",
            name=name,
            legendgroup=name,
            showlegend=name not in shown,
            hovertext=hover,
            hoverinfo="text",
        )
        shown.add(name)


def _method_lanes(fig: go.Figure, label: str, records: Records, shown: set[str]) -> list[str]:
    """A method's draft and target lanes, each over its run's whole span; their labels carry the idle
    shares, so that the waiting reads without hovering."""
    rows = records
    spans = busy_intervals(rows)
    idle = idle_fractions(rows)
    t0 = rows[0].t_start if rows else 0.0
    t1 = rows[-1].t_end if rows else 0.0
    lanes = []
    for lane in LANES:
        y = f"{label} · {lane} (idle {100 * idle[lane]:.0f}%)"
        lanes.append(y)
        _idle_bar(fig, y, t0, t1, shown)
        _busy_bars(fig, y, lane, spans, shown)
    return lanes


def _lane_labels(fig: go.Figure, categories: list[str], order: list[str]) -> None:
    """Each lane's label above its bar, from the plot's left edge (y in category serial numbers): as tick
    labels on the left they took most of a phone's width."""
    for y in categories:
        fig.add_annotation(
            text=y,
            x=0,
            xref="paper",
            xanchor="left",
            y=order.index(y) + BAR / 2,
            yanchor="bottom",
            showarrow=False,
            font={"size": 13},
        )


def _timeline_layout(fig: go.Figure, order: list[str], title: str | None, subtitle: str | None) -> go.Figure:
    """The title's overflow in the subtitle, a height that gives each lane `LANE_PX`, the lanes in `order`
    with no tick labels, and the busy bars drawn over the idle ones."""
    head, rest = _title_line(title or TITLE)
    below = wrap(" ".join([rest, subtitle or ("" if title else SUBTITLE)]).strip())
    finish(
        fig,
        head.strip(),
        "time since the run started (ms)",
        "",
        legend="model · mode",
        subtitle=below or None,
        height=60 + 20 * (below.count("<br>") + 1 if below else 0) + 80 + LANE_PX * len(order),
    )
    fig.update_yaxes(
        categoryorder="array",
        categoryarray=order,
        showticklabels=False,
        automargin=False,
        range=[-0.5, len(order) - 0.5],
    )
    return fig.update_layout(barmode="overlay", margin_l=12)


def timeline(runs: Mapping[str, Records], title: str | None = None, subtitle: str | None = None) -> go.Figure:
    """Gantt chart: for each method (label -> its records) a draft lane and a target lane, busy
    spans coloured by model (and PEARL's mode), idle time grey; each lane's idle share in its label.
    Each lane's label is written above its bar, across the plot (as tick labels on the left they took
    most of a phone's width, cut), the legend below; the title's words that a phone's line cannot
    hold go in the subtitle, above `subtitle`."""
    fig = go.Figure()
    categories: list[str] = []
    shown: set[str] = set()
    for label, records in runs.items():
        categories += _method_lanes(fig, label, records, shown)
    order = categories[::-1]  # the first method's lanes at the top
    _lane_labels(fig, categories, order)
    return _timeline_layout(fig, order, title, subtitle)
