"""One speculative iteration played as it happened: plotly frames with a Play button and a slider.

A pure function of an `IterationStep` (specviz.stepthrough): plain values in, a Figure with `frames`
out. Three shapes of iteration:

- a chain (vanilla, heuristic, DISCO, OSD, prompt lookup): the drafts appear one by one on the
  draft's clock, the target scores all of them in one pass, the test runs draft by draft (p, q,
  min(1, p/q), accepted or not) up to the rejection point, both KV caches roll back and the target
  adds its own token;
- a tree (SSSD, Speculative Streaming): the nodes appear depth by depth, the tree attention mask
  (each node sees the context and its own ancestors) lets one target pass score every node, the
  walk takes the accepted path, the cache keeps that path's entries by index;
- PEARL: the draft's and the target's passes on one time axis, each measured, so the overlap of
  the two lanes shows; then the test of the drafts the target verified.

The x axis of the clock is milliseconds since the iteration began, from the record: PEARL keeps each
pass's start and end; the other methods keep the total drafting and verifying time, so each draft
pass is drawn at the mean (the caption says so). A record without a time says "not measured".
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.plots.theme import OKABE_ITO, empty, finish, legend_rows
from specviz.plots.tree import layout as tree_layout
from specviz.plots.tree import visible as label_text
from specviz.text import visible

TITLE = "One iteration, played"
FRAME_MS = 1100  # how long Play shows each frame: a step of the story, not a step of the clock
CAPTION_CHARS = 120  # a caption's line length (plotly does not wrap annotations)
CAPTION_LINE_PX = 18  # the height of one of its lines (14 px type)

DRAFT, TARGET, PHASE = OKABE_ITO["orange"], OKABE_ITO["blue"], "#777777"
STATES = {  # a token's state -> (legend name, colour, marker symbol)
    "pending": ("drafted, not yet tested", "#FFFFFF", "square"),
    "accepted": ("accepted", OKABE_ITO["bluish_green"], "square"),
    "rejected": ("rejected", OKABE_ITO["vermillion"], "square-x"),
    "untested": ("not tested (after the rejection)", "#DDDDDD", "square-dot"),
    "own": ("the target's own token", OKABE_ITO["sky_blue"], "diamond"),
}
CACHE = {"kept": ("KV cache entry", "#555555", "square"), "dropped": ("dropped by the rollback", "#BBBBBB", "x-thin")}
LANE_Y = {"target": 0, "draft": 1, "phase": 2}
# a chain's token rows, bottom up; the test's numbers (up to five lines) hang below the drafts' squares, so
# their row is the tallest: at an even step the first line sat under the square ("p 0.545" half hidden)
CHAIN_Y = {"draft cache": 0.0, "target cache": 1.0, "test": 3.2, "drafts": 5.0, "own": 6.0}
TEST_TOP = CHAIN_Y["drafts"] - 0.65  # where the test's first line starts: below a draft's square
NAMES_Y = CHAIN_Y["draft cache"] - 0.75  # each cell's name ("draft 12"), under its draft cache entry
# A chain's cells (the context, the drafts, "after") wrap into bands of PER_ROW, one under the other: at 18 cells
# in one row (γ = 16) the test's numbers ran into each other; a band of 9 gives each cell ~73 px of the 900 px
# the phone keeps for this plot (style.py), room for a number such as 0.000683 or "✓ accepted" in 12 px type.
PER_ROW = 9
BAND = CHAIN_Y["own"] + 0.6 - (NAMES_Y - 0.3)  # y units from one band to the next: the rows, the names, a gap
# a tree's mask has its tilted node labels and its axis title under the plot: the Play button and the slider go
# this much lower (plotly widens the bottom margin for them), the figure this much taller
MASK_TICKS_PX = 80
OWN_ABOVE = 1.0  # a tree's own token: this many rows above the top node
PHONE_PLOT_PX = 900 - 150 - 20  # the plot area on a phone: the 900 px style.py keeps, less the side margins
LEGEND_ROW_PX = 26  # a legend row's height (theme.legend_below)
TREE_PX = 250  # the tree's panel's width on a phone (the plot keeps 900 px there: style.py)
MASK_TICKS = 16  # most columns of a tree's mask labelled under it: beyond, every other (or third...) node, by number


@dataclass
class Moment:
    """What one frame shows: the clock's segments, each token's state, the caches, the caption."""

    caption: str
    clock: float  # ms: where the cursor stands
    draft: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, label) on the draft lane
    target: list[tuple[float, float, str]] = field(default_factory=list)
    phases: list[tuple[float, float, str]] = field(default_factory=list)  # PEARL's rounds
    tokens: dict[int, str] = field(default_factory=dict)  # draft index -> state (tree: node index -> state)
    tests: dict[int, str] = field(default_factory=dict)  # draft index -> the test's numbers
    own: bool = False  # the target's own token is shown
    target_cache: dict[int, str] = field(default_factory=dict)  # slot -> "kept" | "dropped" (slot 0: context)
    draft_cache: dict[int, str] = field(default_factory=dict)
    mask: bool = False  # tree: the attention mask is drawn


def iteration_animation(step: Any, label: str | None = None) -> go.Figure:
    """The iteration `step` as frames (one per event, in order) with Play / Pause and a slider.
    `label`: the method's display name (default: its registry name)."""
    if step.lanes is not None:
        moments, total = _pearl(step)
    elif step.tree is not None:
        moments, total = _tree(step)
    else:
        moments, total = _chain(step)
    if not moments:
        return empty(TITLE, "Nothing to play in this iteration.")
    draw = _draw_tree if step.tree is not None else _draw_chain
    fig = _figure(step, total, label or step.method)
    for trace in draw(step, moments[0], total):
        trace_row, trace_col = trace.pop("_cell")
        fig.add_trace(trace, row=trace_row, col=trace_col)
    fig.frames = [
        go.Frame(
            data=[_plain(t) for t in draw(step, m, total)],
            name=str(n),
            layout={"annotations": [_caption(n, len(moments), m.caption)]},
        )
        for n, m in enumerate(moments)
    ]
    fig.update_layout(annotations=[_caption(0, len(moments), moments[0].caption)])
    # the caption sits between the subtitle and the plot, which has room for two of its lines: a longer
    # caption (PEARL's list of drafts made ahead) gets the room of its extra lines, the plot keeps its height
    lines = max(len(_caption_lines(n, len(moments), m.caption)) for n, m in enumerate(moments))
    extra = CAPTION_LINE_PX * max(0, lines - 2)
    fig.update_layout(margin={"t": fig.layout.margin.t + extra}, height=fig.layout.height + extra)
    return _controls(fig, moments, MASK_TICKS_PX if step.tree is not None else 0)


# ---- the stories ------------------------------------------------------------------------------


def _chain(step: Any) -> tuple[list[Moment], float]:
    k = len(step.checks)
    moments = [
        Moment(_before(step), 0.0, target_cache={0: "kept"}, draft_cache={0: "kept"} if _has_draft(step) else {})
    ]
    clock, measured = _draft_clock(step)
    per = clock / k if k else 0.0
    for j, c in enumerate(step.checks):  # drafting: one token per pass, on the draft's clock
        m = _next(moments[-1], per * (j + 1))
        m.draft.append((per * j, per * (j + 1), _label(c.text)))
        m.tokens[j] = "pending"
        if _has_draft(step):
            m.draft_cache[j] = "kept"  # pass j+1 fed the token before draft j+1 (the context's last for the first)
        m.caption = (
            f"Draft {j + 1} of {k}: {_quote(c.text)}"
            + (f", q(x) = {c.q:.3g}" if c.q is not None else "")
            + (f". {measured}" if j == 0 else ".")
        )
        moments.append(m)
    moments += _verify_and_test(step, moments[-1], clock)
    return moments, max(moments[-1].clock, 1e-9)


def _verify_and_test(step: Any, last: Moment, start: float, draw_pass: bool = True) -> list[Moment]:
    """The target's one pass (unless the lanes drew it: PEARL), the test draft by draft, the rollback
    and the target's own token."""
    k = len(step.checks)
    if draw_pass:
        verify, measured = (step.verify_ms, True) if step.verify_ms is not None else (1.0, False)
        end = start + verify
        m = _next(last, end)
        drafts = f"{k} draft{'s' if k != 1 else ''}" if k else ""
        m.target.append((start, end, "1 pass: " + " + ".join(filter(None, (drafts, _fed(step, k == 0))))))
        for j in range(k + 1):
            m.target_cache[j] = "kept"
        took = (_ms(verify) + (" (the acceptance test included)" if k else "")) if measured else "time not measured"
        reads = f"reads {_fed(step, True)} and " if step.iteration == 0 else ""  # the first pass prefills it
        m.caption = (
            f"The target's single pass {reads}scores {_count(k, 'draft')} and the position after them at once: {took}."
            if k
            else f"The target's pass {reads}computes the next position: {took}."
        )
        moments = [m]
    else:
        end, moments = start, [last]
    for c in step.checks:
        if not c.tested:
            continue
        m = _next(moments[-1], end)
        m.tokens[c.index] = "accepted" if c.accepted else "rejected"
        m.tests[c.index] = _test_numbers(c, step)
        untested = [d.index for d in step.checks if not d.tested]
        if not c.accepted:
            for j in untested:
                m.tokens[j] = "untested"
        m.caption = f"Test {c.index + 1}: {_quote(c.text)}, {c.rule}" + (
            f". The rejection point: {_count(len(untested), 'draft')} after it "
            f"{'is' if len(untested) == 1 else 'are'} never tested."
            if not c.accepted and untested
            else ("." if c.accepted else ": the rejection point.")
        )
        moments.append(m)
    m = _next(moments[-1], end)
    for slot in list(m.target_cache):
        if slot > step.accepted:
            m.target_cache[slot] = "dropped"
    for slot in list(m.draft_cache):
        if slot > step.accepted:
            m.draft_cache[slot] = "dropped"
    m.caption = _rollback_words(step)
    moments.append(m)
    moments.append(_own_token(step, moments[-1]))
    return moments if draw_pass else moments[1:]


def _tree(step: Any) -> tuple[list[Moment], float]:
    tree = step.tree
    where = tree_layout(tree.parents)
    depth = max(d for d, _ in where)
    clock, measured = _draft_clock(step)
    moments = [Moment(_before(step), 0.0)]
    for d in range(1, depth + 1):  # the tree grows depth by depth; only the whole drafting is measured
        m = _next(moments[-1], clock * d / depth)
        m.draft.append((clock * (d - 1) / depth, clock * d / depth, f"depth {d}"))
        new = [i for i, (nd, _) in enumerate(where) if nd == d]
        for i in new:
            m.tokens[i] = "pending"
        m.caption = (
            f"Drafting, depth {d}: {len(new)} candidate node{'s' if len(new) != 1 else ''} "
            f"({', '.join(_quote(tree.texts[i]) for i in new[:6])}{', …' if len(new) > 6 else ''})"
            + (f". {measured}" if d == 1 else ".")
        )
        moments.append(m)
    m = _next(moments[-1], clock)
    m.mask = True
    n = len(tree.texts)
    m.caption = (
        f"The tree attention mask: {'the one node' if n == 1 else f'each of the {n} nodes'} attends to the whole "
        "context and to its own ancestors (a filled cell), never to another branch, so one pass of the target "
        "scores every branch at once."
    )
    moments.append(m)
    verify, verified = (step.verify_ms, True) if step.verify_ms is not None else (1.0, False)
    end = clock + verify
    m = _next(moments[-1], end)
    m.target.append((clock, end, f"1 pass: {n} nodes" + (f" + {_fed(step, False)}" if step.iteration == 0 else "")))
    fed = _fed(step, False) if step.iteration == 0 else "the context's last token"
    m.caption = f"The target's single pass over {fed} and all {n} nodes: " + (
        f"{_ms(verify)} (the walk included)." if verified else "time not measured."
    )
    moments.append(m)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(tree.parents):
        children.setdefault(p, []).append(i)
    parent = -1
    for j, node in enumerate(tree.accepted_path):
        m = _next(moments[-1], end)
        m.tokens[node] = "accepted"
        rule = step.checks[j].rule if j < len(step.checks) else "accepted"
        m.caption = f"The walk, depth {j + 1}: {_quote(tree.texts[node])}, {rule}."
        moments.append(m)
        parent = node
    m = _next(moments[-1], end)
    refused = [i for i in children.get(parent, []) if i not in tree.accepted_path]
    for i in range(n):
        if m.tokens.get(i) == "pending":
            m.tokens[i] = "rejected" if i in refused else "untested"
    first_refused = step.checks[step.accepted] if step.accepted < len(step.checks) else None
    which = "the only candidate" if len(refused) == 1 else f"none of the {len(refused)} candidates"
    m.caption = (
        f"The rejection point: {which} at depth {len(tree.accepted_path) + 1} "
        f"{'is not' if len(refused) == 1 else 'is'} the target's token"
        + (f" ({_quote(first_refused.text)}: {first_refused.rule})" if first_refused is not None else "")
        + "; the nodes below them are never tested."
        if refused
        else "The walk reached a leaf of the tree: every node on its path was accepted, nothing is left to test."
    )
    moments.append(m)
    m = _next(moments[-1], end)
    for i in range(n):
        if i not in tree.accepted_path:
            m.tokens[i] = "dropped"
    m.caption = _rollback_words(step)
    moments.append(m)
    moments.append(_own_token(step, moments[-1]))
    return moments, max(end, 1e-9)


def _pearl(step: Any) -> tuple[list[Moment], float]:
    lanes = step.lanes
    k = len(step.checks)
    first = Moment(_before(step), 0.0, target_cache={0: "kept"}, draft_cache=dict.fromkeys(range(max(k, 1)), "kept"))
    first.tokens = dict.fromkeys(range(k), "pending")  # PEARL verifies drafts it made before this record
    first.caption += (
        f" PEARL, {lanes.mode}: the {k} draft{'s' if k != 1 else ''} to verify are already made; "
        "both models now run at the same time."
    )
    spans = [("draft", s, e, j) for j, (s, e) in enumerate(lanes.draft_passes)]
    spans += [("target", s, e, j) for j, (s, e) in enumerate(lanes.target_passes)]
    times = sorted({e for _, _, e, _ in spans})
    moments = [first]
    for t in times:
        m = _next(moments[-1], t)
        m.draft = [(s, min(e, t), _ahead_label(lanes, j)) for j, (s, e) in enumerate(lanes.draft_passes) if s < t]
        m.target = [(s, min(e, t), "verify") for s, e in lanes.target_passes if s < t]
        m.phases = [(s, min(e, t), mode) for mode, s, e in lanes.phases if s < t]
        done = [f"{lane} pass {j + 1}" for lane, s, e, j in spans if e == t]
        running = [f"{lane} pass {j + 1}" for lane, s, e, j in spans if s < t < e]
        overlap = _overlap(lanes.draft_passes, lanes.target_passes, t)
        m.caption = (
            f"{_ms(t)}: {' and '.join(done)} ended"
            + (f"; still running: {', '.join(running)}" if running else "")
            + (f". The lanes have overlapped for {_ms(overlap)} so far." if t < times[-1] else ".")
        )
        if any(lane == "target" for lane, _, e, _ in spans if e == t):
            for j in range(k + 1):
                m.target_cache[j] = "kept"
        moments.append(m)
    end = max([0.0, *times])
    total = _overlap(lanes.draft_passes, lanes.target_passes, end)
    moments[-1].caption += (
        f" Of {_ms(end)}, the two models ran at the same time for {_ms(total)}"
        f" ({len(lanes.draft_passes)} draft pass{'es' if len(lanes.draft_passes) != 1 else ''}, "
        f"{len(lanes.target_passes)} target pass{'es' if len(lanes.target_passes) != 1 else ''})."
    )
    tail = _verify_and_test(step, moments[-1], end, draw_pass=False)  # the lanes drew the target's passes
    if lanes.mode == "post-verify" and lanes.ahead:
        tail[-1].caption += (
            f" The {len(lanes.ahead)} drafts made ahead ({', '.join(_quote(t) for t in lanes.ahead)}) "
            + ("stand: the next round verifies them." if lanes.ahead_kept else "are dropped with the rejection.")
        )
    if lanes.dropped:
        tail[-1].caption += f" Dropped after the rejected first draft: {', '.join(_quote(t) for t in lanes.dropped)}."
    return [*moments, *tail], max(end, 1e-9)


# ---- drawing ----------------------------------------------------------------------------------


def _figure(step: Any, total: float, label: str) -> go.Figure:
    """The empty figure: the clock on top, the tokens (or the tree and its mask) below."""
    tree = step.tree is not None
    specs: list[list[dict[str, Any] | None]] = [[{"colspan": 2}, None], [{}, {}]] if tree else [[{}], [{}]]
    fig = make_subplots(
        rows=2,
        cols=2 if tree else 1,
        specs=specs,
        row_heights=[0.38, 0.62] if step.lanes is not None else [0.3, 0.7],
        vertical_spacing=0.16,
        horizontal_spacing=0.12,
        column_widths=[0.55, 0.45] if tree else None,
    )
    measured = step.verify_ms is not None or step.lanes is not None
    lanes = ["target model", "draft model" if _has_draft(step) else "drafting (no draft model)"]
    lanes += ["PEARL round"] if step.lanes is not None else []
    fig.update_xaxes(range=[0, total * 1.04], row=1, col=1)
    fig.update_yaxes(
        range=[-0.6, len(lanes) - 0.4], tickvals=list(range(len(lanes))), ticktext=lanes, row=1, col=1, fixedrange=True
    )
    if tree:
        where = tree_layout(step.tree.parents)
        rows = [r for _, r in where]
        n = len(where)
        fig.update_xaxes(range=[-0.6, max(d for d, _ in where) + 1.6], dtick=1, row=2, col=1)
        fig.update_yaxes(range=[max(rows) + 0.6, min(rows) - OWN_ABOVE - 0.6], visible=False, row=2, col=1)
        ticks = [f"{i + 1} '{_label(t)}'" for i, t in enumerate(step.tree.texts)]
        # a tilted label needs ~20 px: 64 columns on half a phone's 900 px lay on each other
        every = math.ceil(n / MASK_TICKS)
        shown = [i for i in range(n) if i % every == 0]
        fig.update_xaxes(
            range=[-1.5, n - 0.5],
            tickvals=[-1, *shown],
            ticktext=["context", *(ticks[i] if every == 1 else str(i + 1) for i in shown)],
            tickangle=-60,
            row=2,
            col=2,
        )
        fig.update_yaxes(range=[n - 0.5, -0.5], tickvals=list(range(n)), ticktext=ticks, row=2, col=2)
    else:
        k = len(step.checks)
        bands = _bands(k)
        rows_ = ["draft's KV cache", "target's KV cache", "test", "drafts", "target's token"]
        fig.update_xaxes(range=[-1.6, min(k + 2, PER_ROW) - 0.4], showticklabels=False, row=2, col=1)
        fig.update_yaxes(
            range=[NAMES_Y - 0.3 - (bands - 1) * BAND, CHAIN_Y["own"] + 0.6],
            tickvals=[CHAIN_Y[r] - b * BAND for b in range(bands) for r in CHAIN_Y],
            ticktext=rows_ * bands,
            row=2,
            col=1,
            fixedrange=True,
        )
    fig = finish(
        fig,
        # counted from 1, as the step-through; the label may be a saved race's: text, not markup
        f"{TITLE}: iteration {step.iteration + 1} of {html.escape(label, quote=False)}",
        "",
        "",
        legend="",
        subtitle="press Play, or drag the slider; each frame is one event of the iteration",
        height=720 + (MASK_TICKS_PX if tree else 0) if tree or step.lanes is not None else 760,
    )
    fig.update_xaxes(  # after `finish`, which titles the first axis only
        title_text="milliseconds since the iteration began" if measured else "time not measured: passes in order",
        title_standoff=4,
        row=1,
        col=1,
    )
    if tree:
        fig.update_xaxes(title_text="depth (tokens ahead of the context)", title_standoff=4, row=2, col=1)
        fig.update_xaxes(title_text="attends to (the context, or a node)", row=2, col=2)
        fig.update_yaxes(title_text="node", row=2, col=2)
    fig.update_layout(margin={"t": 175, "l": 150})
    if tree:  # the legend under the mask's tilted labels and axis title, as the controls (it lay on the title)
        fig.update_layout(legend_y=fig.layout.legend.y - MASK_TICKS_PX / _plot_px(fig))
    return _taller(fig, _extra_px(step, fig), tree)


def _extra_px(step: Any, fig: go.Figure) -> float:
    """How much taller the tokens' panel must be than the default figure gives it: a band more of a chain's
    cells, each its own panel's height; a tree's rows 8 px more apart than its squares, its mask's 16 px (a
    node's tick label); at 64 nodes the squares and labels lay on each other."""
    panel = _plot_px(fig) * (fig.layout.yaxis2.domain[1] - fig.layout.yaxis2.domain[0])
    if step.tree is None:
        return panel * (_bands(len(step.checks)) - 1)
    rows = [r for _, r in tree_layout(step.tree.parents)]
    need = max(
        (_node_px(tree_layout(step.tree.parents)) + 8) * (max(rows) - min(rows) + OWN_ABOVE + 1.2), 16 * len(rows)
    )
    return max(0.0, need - panel)


def _plot_px(fig: go.Figure) -> float:
    return fig.layout.height - fig.layout.margin.t - fig.layout.margin.b


def _taller(fig: go.Figure, extra: float, tree: bool) -> go.Figure:
    """`fig` `extra` px taller, all of it to the bottom row of panels; the clock, the legend and the gap keep
    their pixels."""
    if extra <= 0:
        return fig
    before = _plot_px(fig)
    after = before + extra
    bottom = fig.layout.yaxis2.domain[1] * before + extra  # px of the bottom row
    top = (1 - fig.layout.yaxis.domain[0]) * before
    fig.update_layout(height=fig.layout.height + extra, legend_y=fig.layout.legend.y * before / after)
    fig.update_layout(yaxis_domain=[1 - top / after, 1], yaxis2_domain=[0, bottom / after])
    if tree:
        fig.update_layout(yaxis3_domain=[0, bottom / after])
    return fig


def _draw_chain(step: Any, m: Moment, total: float) -> list[Any]:
    k = len(step.checks)
    traces = _clock_traces(step, m, total)
    texts = [c.text for c in step.checks]
    for state, (name, colour, symbol) in STATES.items():
        if state == "own":
            at = [_slot(step.accepted + 1, "own")] if m.own else []
            traces.append(_cells(*_xy(at), [step.target_token] * len(at), name, colour, symbol, state))
            continue
        idx = [j for j in range(k) if m.tokens.get(j) == state]
        at = [_slot(j + 1, "drafts") for j in idx]
        traces.append(_cells(*_xy(at), [texts[j] for j in idx], name, colour, symbol, state))
    tested = sorted(m.tests)
    at = [_slot(j + 1, "test") for j in tested]  # hangs down from TEST_TOP: its first line below the draft's square
    traces.append(_text(*_xy(at), [m.tests[j] for j in tested], "the test's numbers", (2, 1), position="bottom center"))
    keys = _test_keys(step)  # the numbers' names, one column left of each band, line for line
    bands = range(_bands(k))
    at = [(-1.0, TEST_TOP - b * BAND) for b in bands] if keys and m.tests else []  # with the first test
    traces.append(_text(*_xy(at), ["<br>".join(keys)] * len(at), "the test's rows", (2, 1), position="bottom center"))
    slots = range(k + 2)
    at = [_slot(s, "names") for s in slots]  # each cell's name under it (a band's column holds several)
    names = ["context", *(f"draft {j + 1}" for j in range(k)), "after"]
    traces.append(_text(*_xy(at), names, "positions", (2, 1)))
    for row, cache in (("target cache", m.target_cache), ("draft cache", m.draft_cache)):
        for state, (name, colour, symbol) in CACHE.items():
            at = [_slot(s, row) for s, v in cache.items() if v == state]
            show = row == "target cache"
            traces.append(_cells(*_xy(at), None, name, colour, symbol, "cache-" + state, show=show, size=22))
    return traces


def _node_px(where: Sequence[tuple[int, float]]) -> int:
    """A tree node's square, in px: at most 34, less than a depth's column of the tree (~250 px / (depth + 2.2)
    on the phone's 900 px; at depth 8 the 34 px squares of neighbouring depths lay on each other)."""
    depth = max((d for d, _ in where), default=1)
    return max(14, min(34, int(TREE_PX / (depth + 2.2)) - 4))


def _node_chars(where: Sequence[tuple[int, float]]) -> int:
    """How many characters of a node's text its square shows (13 px type, ~8 px a character); hover shows all."""
    return max(2, _node_px(where) // 8)


def _bands(k: int) -> int:
    """How many bands a chain of `k` drafts takes (its k + 2 cells, PER_ROW to a band)."""
    return math.ceil((k + 2) / PER_ROW)


def _slot(s: int, row: str) -> tuple[float, float]:
    """Where cell `s` (0: the context, j: draft j, k + 1: after) of a chain draws `row`: bands of PER_ROW cells,
    the first on top."""
    band, column = divmod(s, PER_ROW)
    y = {**CHAIN_Y, "test": TEST_TOP, "names": NAMES_Y}[row]
    return float(column), y - band * BAND


def _xy(at: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [x for x, _ in at], [y for _, y in at]


def _draw_tree(step: Any, m: Moment, total: float) -> list[Any]:
    tree = step.tree
    where = tree_layout(tree.parents)
    rows = [r for _, r in where]
    root = (0, (min(rows) + max(rows)) / 2)
    traces = _clock_traces(step, m, total)
    shown = [i for i in range(len(where)) if i in m.tokens]
    edges_x: list[float | None] = []
    edges_y: list[float | None] = []
    path_x: list[float | None] = []
    path_y: list[float | None] = []
    for i in shown:
        p = tree.parents[i]
        x0, y0 = root if p < 0 else where[p]
        xs, ys = (path_x, path_y) if m.tokens[i] == "accepted" else (edges_x, edges_y)
        xs += [x0, where[i][0], None]
        ys += [y0, where[i][1], None]
    traces.append(_line(edges_x, edges_y, "#BBBBBB", 1.5, "tree edge", (2, 1)))
    traces.append(_line(path_x, path_y, "#000000", 4, "the accepted path", (2, 1)))
    traces.append(
        _cells(
            [root[0]], [root[1]], ["context"], "committed context", "#CCCCCC", "square", "root", size=64, cell=(2, 1)
        )
    )
    for state, (name, colour, symbol) in {
        **STATES,
        "dropped": ("dropped by the rollback", "#EEEEEE", "x-thin"),
    }.items():
        if state == "own":
            # above every node, at the depth it takes (beside the path's last node it lay on a child's label)
            at = [len(tree.accepted_path) + 1] if m.own else []
            y = min(rows) - OWN_ABOVE
            traces.append(_cells(at, [y] * len(at), [step.target_token] * len(at), name, colour, symbol, state))
            continue
        idx = [i for i in shown if m.tokens[i] == state]
        traces.append(
            _cells(
                [where[i][0] for i in idx],
                [where[i][1] for i in idx],
                [tree.texts[i] for i in idx],
                name,
                colour,
                symbol,
                "node-" + state,
                cell=(2, 1),
                most=_node_chars(where),
                size=_node_px(where),
            )
        )
    n = len(tree.texts)
    z = [  # column 0: the committed context, which every node sees
        [1.0 if m.mask and (j < 0 or j in _ancestors(tree.parents, i)) else None for j in range(-1, n)]
        for i in range(n)
    ]
    traces.append(
        {
            "type": "heatmap",
            "z": z,
            "zmin": 0,
            "zmax": 1,
            "colorscale": [[0, "#FFFFFF"], [1, TARGET]],
            "showscale": False,
            "xgap": 2,
            "ygap": 2,
            "name": "tree attention mask (filled: attends)",
            "x": list(range(-1, n)),
            "hovertemplate": "node %{y} attends to %{x}<extra></extra>",
            "_cell": (2, 2),
        }
    )
    return traces


def _clock_traces(step: Any, m: Moment, total: float) -> list[Any]:
    """The lanes: the draft's and the target's passes, PEARL's rounds, and the clock's cursor; a pass's
    label sits on its bar where the bar is wide enough for it."""
    out = []
    lanes = [("draft", m.draft, DRAFT, "drafting"), ("target", m.target, TARGET, "target pass")]
    lanes += [("phase", m.phases, PHASE, "PEARL round")] if step.lanes is not None else []
    for lane, segs, colour, name in lanes:
        xs: list[float | None] = []
        for s, e, _ in segs:
            xs += [s, e, None]
        ys = [LANE_Y[lane] if x is not None else None for x in xs]
        out.append(_line(xs, ys, colour, 22, f"{name} (ms)", (1, 1), show=True))
        wide = [(s, e, label) for s, e, label in segs if (e - s) * 140 >= total * max(4, len(label))]
        label = _text(
            [(s + e) / 2 for s, e, _ in wide], [LANE_Y[lane]] * len(wide), [t for _, _, t in wide], name, (1, 1)
        )
        label["textfont"] = {"size": 12, "color": "#FFFFFF" if lane != "draft" else "#111111"}
        out.append(label)
        # a target pass's label longer than its bar ("1 pass: 4 drafts + the 44-token prompt"): above the bar
        narrow = [(s, e, t) for s, e, t in segs if (s, e, t) not in wide and lane == "target"]
        above = _text([(s + e) / 2 for s, e, _ in narrow], [0.5] * len(narrow), [t for _, _, t in narrow], name, (1, 1))
        above["textfont"] = {"size": 12, "color": "#111111"}
        out.append(above)
    top = 2.5 if step.lanes is not None else 1.5
    out.append(_line([m.clock, m.clock], [-0.5, top], "#000000", 1.5, "now", (1, 1), dash="dot"))
    return out


def _cells(
    xs: Sequence[float],
    ys: Sequence[float],
    texts: Sequence[str] | None,
    name: str,
    colour: str,
    symbol: str,
    group: str,
    show: bool = True,
    size: int = 34,
    cell: tuple[int, int] = (2, 1),
    most: int = 8,
) -> dict[str, Any]:
    """Token squares (or diamonds) labelled with their texts cut to `most` characters; the whole text on hover."""
    return {
        "type": "scatter",
        "x": list(xs),
        "y": list(ys),
        "mode": "markers+text",
        "text": [_label(t, most) for t in texts or ()],
        "textposition": "middle center",
        "textfont": {"family": "ui-monospace, Menlo, Consolas, monospace", "size": 13, "color": "#111111"},
        "marker": {"symbol": symbol, "size": size, "color": colour, "line": {"width": 1.5, "color": "#333333"}},
        "name": name,
        "legendgroup": group,
        "showlegend": show,
        "hovertext": [f"{name}: '{label_text(t)}'" for t in texts] if texts is not None else name,
        "hoverinfo": "text",
        "cliponaxis": False,
        "_cell": cell,
    }


def _text(
    xs: Sequence[float],
    ys: Sequence[float],
    texts: Sequence[str],
    name: str,
    cell: tuple[int, int],
    position: str = "middle center",
) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": list(xs),
        "y": list(ys),
        "mode": "text",
        "text": list(texts),
        "textposition": position,
        "textfont": {"size": 12},
        "name": name,
        "showlegend": False,
        "hoverinfo": "skip",
        "cliponaxis": False,
        "_cell": cell,
    }


def _line(
    xs: Sequence[float | None],
    ys: Sequence[float | None],
    colour: str,
    width: float,
    name: str,
    cell: tuple[int, int],
    show: bool = False,
    dash: str = "solid",
) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": list(xs),
        "y": list(ys),
        "mode": "lines",
        "line": {"color": colour, "width": width, "dash": dash},
        "name": name,
        "showlegend": show,
        "hoverinfo": "skip",
        "_cell": cell,
    }


def _plain(trace: dict[str, Any]) -> dict[str, Any]:
    """A frame's trace: the same trace without where it sits (frames address traces by order)."""
    return {k: v for k, v in trace.items() if k != "_cell"}


def _caption_lines(n: int, count: int, text: str) -> list[str]:
    """The caption's lines, markup in token texts escaped (plotly drops an unknown tag such as `<|im_start|>`)."""
    return [html.escape(line, quote=False) for line in textwrap.wrap(f"Step {n + 1} of {count}. {text}", CAPTION_CHARS)]


def _caption(n: int, count: int, text: str) -> dict[str, Any]:
    lines = _caption_lines(n, count, text)
    return {
        "text": "<br>".join(lines),
        "x": 0,
        "y": 1.0,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "left",
        "yanchor": "bottom",
        "yshift": 8,
        "align": "left",
        "showarrow": False,
        "font": {"size": 14},
    }


def _controls(fig: go.Figure, moments: list[Moment], below_px: float = 0) -> go.Figure:
    """Play / Pause and a slider of the frames (plotly's animation API: `animate` with frame names),
    `below_px` lower than their usual place (a tree's mask has its labels there)."""
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    # under the legend's rows as the phone's 900 px plot lays them out (its second row lay on Play at 1440 px)
    legend_bottom = fig.layout.legend.y - legend_rows(fig, PHONE_PLOT_PX) * LEGEND_ROW_PX / plot_px
    y = min(-0.1 - below_px / plot_px, legend_bottom)
    still = {"frame": {"duration": 0, "redraw": True}, "mode": "immediate", "transition": {"duration": 0}}
    play = {"frame": {"duration": FRAME_MS, "redraw": True}, "fromcurrent": True, "transition": {"duration": 0}}
    return fig.update_layout(
        updatemenus=[
            {
                "type": "buttons",
                "direction": "left",
                "x": 0,
                "y": y,
                "xanchor": "left",
                "yanchor": "top",
                "pad": {"t": 30},
                "buttons": [
                    {"label": "▶ Play", "method": "animate", "args": [None, play]},
                    {"label": "❚❚ Pause", "method": "animate", "args": [[None], still]},
                ],
            }
        ],
        sliders=[
            {
                "active": 0,
                "x": 0.3,  # clear of the buttons (~170 px) on a phone's 900 px plot: at 0.2 "step" sat under Pause
                "len": 0.7,
                "y": y,
                "yanchor": "top",
                "pad": {"t": 30},
                "currentvalue": {"prefix": "step "},
                "steps": [
                    {"label": str(n + 1), "method": "animate", "args": [[str(n)], still]} for n in range(len(moments))
                ],
            }
        ],
    )


# ---- small helpers ----------------------------------------------------------------------------


def _next(m: Moment, clock: float) -> Moment:
    """The following frame: everything the last one showed, the clock moved on."""
    return Moment(
        m.caption,
        clock,
        list(m.draft),
        list(m.target),
        list(m.phases),
        dict(m.tokens),
        dict(m.tests),
        m.own,
        dict(m.target_cache),
        dict(m.draft_cache),
        m.mask,
    )


def _own_token(step: Any, last: Moment) -> Moment:
    """The last frame: the target's own token (a correction or a bonus), or why there is none."""
    m = _next(last, last.clock)
    m.own = bool(step.target_token)
    m.caption = (
        f"The target's own token ({step.target_role}): {_quote(step.target_token)}, {step.target_from}."
        if step.target_token
        else f"No token of the target's own: {step.target_from}."
    )
    return m


def _has_draft(step: Any) -> bool:
    return step.draft_forwards > 0


def _draft_clock(step: Any) -> tuple[float, str]:
    """(ms the drafting lasted, how that was measured, in words)."""
    k = len(step.checks) if step.tree is None else len(step.tree.texts)
    if not k:
        return 0.0, ""
    if step.draft_ms is None:
        return 1.0, "Drafting time not measured: the passes are drawn in order, one unit each."
    how = (
        f"Drafting took {_ms(step.draft_ms)} in {step.draft_forwards} pass{'es' if step.draft_forwards != 1 else ''}"
        " of the draft model (measured in total; each is drawn at the mean)"
        if _has_draft(step)
        else f"Drafting {_no_model_source(step)} took {_ms(step.draft_ms)} (measured in total; drawn in equal parts)"
    )
    return step.draft_ms, how + "."


def _no_model_source(step: Any) -> str:
    """Where the drafts of a method without a draft model came from."""
    if step.tree is not None and step.tree.sources and all(s.startswith("stream") for s in step.tree.sources):
        return "from the target's stream heads (its last pass; no draft model)"
    return "from text (no draft model)"


def _fed(step: Any, alone: bool) -> str:
    """What the verifying pass fed besides the drafts: the whole prompt on the first iteration (the pass
    prefilled it: specviz.stepthrough's cache story), else the last context token. `alone`: nothing drafted."""
    if step.iteration == 0:
        return f"the {step.position}-token prompt"
    return "the next token" if alone else "1"


def _before(step: Any) -> str:
    return f"Before: {step.position} tokens of context; {step.cache[0].removeprefix('before: ')}."


def _rollback_words(step: Any) -> str:
    line = next((c for c in step.cache if "rollback" in c), "no rollback")
    return line[0].upper() + line[1:] + "."


def _test_keys(step: Any) -> list[str]:
    """The names of the test's lines, shown once a band, left of the numbers (in each cell they took ~100 px
    and ran into the next at γ = 16); none when the record keeps no p (the cells say only ✓ or ✗)."""
    if all(c.p is None for c in step.checks):
        return []
    if step.greedy:  # the rule is the target's argmax: min(1, p/q) decides nothing here
        return ["p(x)", "q(x)", "argmax?"]
    return ["p(x)", "q(x)", "min(1,p/q)", *(["u"] if any(c.u is not None for c in step.checks) else []), "kept?"]


def _test_numbers(c: Any, step: Any) -> str:
    """Draft `c`'s test as lines, in the order of `_test_keys`."""
    verdict = "✓ yes" if c.accepted else "✗ no"  # the answer to its key, "argmax?" or "kept?"
    keys = _test_keys(step)
    if not keys:
        return verdict[0]
    q = c.q
    ratio = None if c.p is None else 1.0 if q is not None and q <= 0 else min(1.0, c.p / (q if q is not None else 1.0))
    value = {
        "p(x)": _num(c.p),
        "q(x)": "one-hot" if q is None else _num(q),
        "min(1,p/q)": _num(ratio),
        "u": _num(c.u),
        "argmax?": verdict,
        "kept?": verdict,
    }
    return "<br>".join(value[key] for key in keys)


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"  # three significant digits, as the step-through's table


def _ahead_label(lanes: Any, j: int) -> str:
    """A draft pass's label on its bar: the token it drafted ahead (post-verify), quoted as the captions
    quote tokens (bare, a token such as "L" read as a stray letter on the clock), else its number."""
    if lanes.mode == "post-verify" and j < len(lanes.ahead):
        return f"'{_label(lanes.ahead[j])}'"
    return f"pass {j + 1}"


def _overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]], until: float) -> float:
    """Milliseconds up to `until` during which a pass of `a` and a pass of `b` both ran."""
    return sum(
        max(0.0, min(e1, e2, until) - max(s1, s2)) for s1, e1 in a for s2, e2 in b
    )  # passes within a lane do not overlap each other


def _ancestors(parents: Sequence[int], i: int) -> set[int]:
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ms(x: float) -> str:
    return f"{x:.1f} ms" if x >= 1 else f"{x:.2f} ms"


def _short(text: str, most: int = 8) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _label(text: str, most: int = 8) -> str:
    """A token's text as a label on the plot: cut to `most` characters, whitespace made visible and markup
    escaped as the tree and the board show them (a raw newline broke the label; `<|im_start|>` vanished)."""
    return label_text(_short(text, most))


def _quote(text: str) -> str:
    """A token's text quoted in a caption, whitespace made visible (the caption escapes its markup)."""
    return f"'{visible(text)}'"
