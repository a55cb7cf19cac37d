"""One iteration's distributions: at each tested draft position the top tokens of p (target) and q
(draft), and the distribution the target's own token was drawn from. A pure function of an
`IterationStep` (specviz.stepthrough)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.plots.theme import OKABE_ITO, empty, finish, plain, wrap

if TYPE_CHECKING:
    from specviz.stepthrough import IterationStep

TITLE = "Distributions behind one iteration"  # 34 characters: a phone's plot shows the title whole
TITLE_CHARS = 33  # a title line at 21 px (1.4 times the 15 px font) within a phone's ~340 px plot
SUBTITLE = "top tokens of each distribution; x: probability"  # 47 characters: one line on a phone
PER_ROW = 5  # panels side by side at most: PEARL's 14 drafts in one row were 15 illegible slivers
PANEL_PX, GAP_PX = 260, 110  # a row of panels' height; between rows, room for the x axis and the next titles
TOP_PX, BOTTOM_PX = 130, 80  # above the panels: the title, its subtitle and the panels' titles, none overlapping
P_COLOUR, Q_COLOUR, OWN_COLOUR = OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["bluish_green"]


def step_distributions(step: IterationStep, label: str | None = None) -> go.Figure:
    """Top-k bars per tested draft (p and q side by side) and one panel for the target's token.
    `label`: the method's display name (default: its registry name)."""
    tested = [c for c in step.checks if c.tested and (c.p_top or c.q_top)]
    own = bool(step.target_top)
    if not tested and not own:
        return empty(TITLE, "No distributions to show: " + step.source + ".")
    # token texts and the label may be a saved race's: text, not markup (plotly reads tags in every text)
    titles = [f"draft {c.index + 1}: '{plain(c.text)}' {'✓' if c.accepted else '✗'}" for c in tested]
    titles += [f"target's {step.target_role}: '{plain(step.target_token)}'"] if own else []
    cols, rows = panel_grid(len(titles))
    area = rows * PANEL_PX + (rows - 1) * GAP_PX
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.08,
        vertical_spacing=GAP_PX / area if rows > 1 else 0.0,
    )
    legend = set()
    for k, c in enumerate(tested):
        for name, top, colour in (("p (target)", c.p_top, P_COLOUR), ("q (draft)", c.q_top, Q_COLOUR)):
            if top:
                fig.add_trace(_bars(top, name, colour, name not in legend), row=k // cols + 1, col=k % cols + 1)
                legend.add(name)
    if own:
        last = len(titles) - 1
        fig.add_trace(
            _bars(step.target_top, "what the target's token was drawn from", OWN_COLOUR, True),
            row=last // cols + 1,
            col=last % cols + 1,
        )
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(rangemode="tozero", tickformat=".2~%", nticks=4)
    # counted from 1, as the step-through; in lines a phone shows whole (plotly does not wrap a title)
    title = wrap(
        f"The distributions behind iteration {step.iteration + 1} of {plain(label or step.method)}", TITLE_CHARS
    )
    subtitle = wrap(SUBTITLE)
    # finish's margin put the subtitle over the first row's panel titles; each further line of either, more room
    top_px = TOP_PX + 26 * title.count("<br>") + 20 * subtitle.count("<br>")
    fig = finish(fig, title, "", "", legend="distribution", subtitle=subtitle, height=top_px + area + BOTTOM_PX)
    fig.update_layout(margin={"t": top_px})
    # one short axis title under every panel: the long one sat under the first, narrow panel only, clipped
    return fig.update_xaxes(title_text="probability", title_standoff=4)


def panel_grid(panels: int) -> tuple[int, int]:
    """(columns, rows) for `panels` panels: at most PER_ROW a row, the rows as even as they can be
    (6 panels: 2 rows of 3, not 5 and a lone 1; PEARL's 14 drafts and the target's token: 3 rows of 5)."""
    rows = -(-panels // PER_ROW)
    return -(-panels // rows), rows


def _bars(top: tuple[tuple[int, str, float], ...], name: str, colour: str, show: bool) -> go.Bar:
    return go.Bar(
        y=[f"'{plain(t)}'" for _, t, _ in top],
        x=[v for _, _, v in top],
        orientation="h",
        name=name,
        marker_color=colour,
        showlegend=show,
        legendgroup=name,
        hovertemplate="%{y}: %{x:.3f}<extra>" + name + "</extra>",
    )
