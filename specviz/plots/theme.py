"""Shared look of the plots: Okabe-Ito colours (colour-blind safe), large type for projectors."""

from __future__ import annotations

import html
import itertools

import plotly.graph_objects as go

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

# One colour per method, in race order (the autoregressive baseline, first, gets black).
METHOD_COLOURS = [
    OKABE_ITO[k]
    for k in ("black", "blue", "orange", "bluish_green", "vermillion", "reddish_purple", "sky_blue", "yellow")
]
# A phone's plot: about 340 pixels wide inside the page's padding; an average character of the font
# Chromium draws is 0.47 of its size (measured on a review's phone crop: tests/test_phone_plots.py).
PHONE_PX, EM = 340, 0.47
AXIS_PX = 62  # below the plot: the x tick labels and the axis title, above the legend
PHONE_CHARS = 48  # characters of the 15 px font in one of its lines
ALPHA = "α (accepted ÷ tested)"  # the Race tab's name and definition of α (specviz.metrics, ui.why's glossary)
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]  # a second cue beside colour


MARKERS = [
    "circle",
    "square",
    "diamond",
    "triangle-up",
    "x",
    "cross",
    "star",
    "triangle-down",
    "hexagon",
    "pentagon",
    "bowtie",
    "hourglass",
    "asterisk-open",
]  # a third cue: thirteen methods, thirteen shapes


def method_style(i: int) -> dict:
    """Line colour and dash of the i-th method (dashes repeat less often than colours)."""
    return {
        "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
        "dash": DASHES[(i // len(METHOD_COLOURS) + i) % len(DASHES)],
    }


def method_marker(i: int) -> dict:
    """The i-th method's marker: its colour and its own shape, a dozen of them along a line at most."""
    return {
        "color": METHOD_COLOURS[i % len(METHOD_COLOURS)],
        "symbol": MARKERS[i % len(MARKERS)],
        "size": 8,
        "maxdisplayed": 12,
    }


def finish(
    fig: go.Figure,
    title: str,
    x: str,
    y: str,
    legend: str | None = "method",
    subtitle: str | None = None,
    height: int = 420,
    axis_px: int = AXIS_PX,
) -> go.Figure:
    """Titles with units, a legend title, and readable type (a long qualifier goes in the subtitle:
    plotly titles do not wrap, and half-width plots cut them; `wrap` it into lines a phone shows whole);
    `height` before the legend's rows; `axis_px`: the x axis's tick labels and title, above the legend."""
    lines = subtitle.count("<br>") + 1 if subtitle else 0
    # the plot at least as tall as its y title is long: a longer one ran up over the subtitle
    height = max(height, 60 + 20 * lines + 80 + round(len(y) * 15 * EM) + 20)
    fig.update_layout(
        title={  # at the figure's top (plotly centres it in the top margin: a taller margin pushed it down)
            "text": title,
            "x": 0.01,
            "xanchor": "left",
            "yref": "container",
            "y": 1.0,
            "yanchor": "top",
            "pad": {"t": 20},
            **({"subtitle": {"text": subtitle}} if subtitle else {}),
        },
        xaxis_title=x,
        yaxis_title=y,
        legend_title_text=legend,
        template="plotly_white",
        font={"size": 15},
        margin={"l": 60, "r": 20, "t": 60 + 20 * lines, "b": 55},  # each subtitle line 20 px above the plot
        height=height,
        showlegend=legend is not None,
    )
    # the margin grows to hold the tick labels and the axis title: a fixed 60 px put the title over the ticks
    fig.update_yaxes(automargin=True)
    return legend_below(fig, height, axis_px) if legend is not None else fig


def legend_below(fig: go.Figure, height: int, axis_px: int = AXIS_PX) -> go.Figure:
    """The legend below the plot, across its width (a side legend takes half a narrow plot), its title
    above the entries (beside them it took the left of every row), its top under the x axis's title.
    The figure grows by the legend's rows on a phone (and the title's) beyond `height`, so the plot keeps
    its height on every screen; a wide screen, with fewer rows, has the spare room under the legend."""
    rows = legend_rows(fig) + bool(fig.layout.legend.title.text)
    plot_px = height - fig.layout.margin.t - 80  # the plot's own pixels, between the margins
    return fig.update_layout(
        legend={
            "orientation": "h",
            "yref": "paper",
            "y": -axis_px / plot_px,
            "yanchor": "top",
            "x": 0.0,
            "xanchor": "left",
            "title_side": "top",
        },
        margin={"b": 80 + axis_px - AXIS_PX + 26 * rows},
        height=height + axis_px - AXIS_PX + 26 * rows,
    )


def plain(text: str) -> str:
    """Text from a run (a method's label, a token's text) as a figure shows it, literally: plotly reads the
    HTML tags of every text it draws (<b>, <br>, <a href>, ...), and a saved race's label is a stranger's."""
    return html.escape(text, quote=False)


def wrap(text: str, width: int = PHONE_CHARS) -> str:
    """`text` in lines of at most `width` characters, broken between words with " <br>" (plotly does not
    wrap titles or subtitles: a long one ran off a phone's plot). The space stays at the line's end, so the
    page's text (and a search in it) still reads "c = 0.1" where the line breaks after "c =". Breaks
    already in `text` stay as they are."""
    given = []
    for part in text.split("<br>"):
        lines = [""]
        for word in part.split():
            if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
                lines.append(word)
            else:
                lines[-1] = f"{lines[-1]} {word}" if lines[-1] else word
        given.append(" <br>".join(lines))
    return "<br>".join(given)


def signed_percent(x: float, digits: int = 0) -> str:
    """A signed share as text, a rounded zero as plain "0%": `f"{x:+.0%}"` writes -0.004 as "-0%"."""
    text = f"{x:+.{digits}%}"
    return text[1:] if float(text[1:-1]) == 0 else text


def baseline(fig: go.Figure, y: float = 1.0, name: str = "autoregressive (1×)") -> go.Figure:
    """The autoregressive baseline as a dotted line named in the legend: a note written on the line sat
    over the measured points' labels and the bars' numbers."""
    fig.add_hline(y=y, line_dash="dot", line_color="grey")
    return fig.add_scatter(x=[None], y=[None], mode="lines", line={"color": "grey", "dash": "dot"}, name=name)


def count_ticks(fig: go.Figure, largest: float, most: int = 10) -> go.Figure:
    """Whole-number x ticks from 0, level, at most `most` of them: a step of 1 up to 18 turns into a
    column of vertical labels on a phone's 300-pixel plot. The step is 1, 2, 5, 10, 20, 50, ..."""
    step, factors = 1, itertools.cycle((2, 2.5, 2))
    while largest / step > most:
        step = int(step * next(factors))
    return fig.update_xaxes(tick0=0, dtick=step, tickangle=0, automargin=True)


def legend_names(fig: go.Figure) -> list[str]:
    """The names the figure's legend lists, in order (one per legend group)."""
    return list({t.legendgroup or t.name: t.name for t in fig.data if t.showlegend is not False and t.name}.values())


def legend_rows(fig: go.Figure, width: float = PHONE_PX - 80) -> int:
    """Rows a horizontal legend takes over a plot area `width` pixels wide, as plotly lays it out: one row
    when all its entries (a 40-pixel symbol, then the name) fit side by side, else a grid whose columns
    are as wide as its widest entry. Counted on a phone (340 px less the axis margins), where most rows are."""
    size = fig.layout.legend.font.size or fig.layout.font.size or 15
    widths = [40 + len(name) * size * EM for name in legend_names(fig)]
    if sum(widths) <= width:
        return 1 if widths else 0
    return -(-len(widths) // max(1, int(width // max(widths))))


def empty(title: str, message: str) -> go.Figure:
    """A titled figure that says why it has no data (instead of a blank box), in lines a phone shows whole."""
    fig = go.Figure()
    fig.add_annotation(
        text=wrap(message, 44), showarrow=False, font={"size": 16}, x=0.5, y=0.5, xref="paper", yref="paper"
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return finish(fig, title, "", "", legend=None)
