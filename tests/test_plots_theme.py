"""The plots' shared look (specviz.plots.theme): signed shares, wrapped subtitles, the legend's rows."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.plots.theme import PHONE_CHARS, finish, legend_rows, signed_percent, wrap


def test_a_rounded_zero_is_written_0_percent_without_a_sign():
    """Issue 38: the Theory tab's Spec-Bench table showed "-0%" for an error of -0.4 %."""
    assert f"{-0.004:+.0%}" == "-0%"  # what Python's own format writes
    assert [signed_percent(x) for x in (-0.004, -0.0, 0.0, 0.0024)] == ["0%"] * 4
    assert [signed_percent(x) for x in (0.12, -0.051)] == ["+12%", "-5%"]
    assert signed_percent(-0.0004, 1) == "0.0%" and signed_percent(0.0123, 1) == "+1.2%"


def test_wrap_breaks_between_words_and_keeps_given_breaks():
    text = "measured in the last race (tiny-perturbed): c = 1.895, verify cost 1 + 0.261·γ"
    lines = wrap(text).split(" <br>")  # the space kept: the page's text still reads "c = 1.895"
    assert len(lines) == 2 and all(len(line) <= PHONE_CHARS for line in lines)
    assert wrap(text).replace("<br>", "") == text
    assert wrap("a b<br>c", 3) == "a b<br>c" and wrap("ab cd", 3) == "ab <br>cd"


def test_legend_rows_follow_plotlys_grid():
    """Plotly lays a horizontal legend in one row when all entries fit, else in columns as wide as the
    widest entry (plotly.js computeLegendDimensions): one long name makes every entry take a row."""
    fig = go.Figure()
    for name in ("α=0.30", "α=0.50"):
        fig.add_scatter(x=[1], y=[1], name=name)
    assert legend_rows(fig) == 1
    fig.add_scatter(x=[1], y=[1], name="race: Dynamic (heuristic) α=0.69")
    assert legend_rows(fig) == 3  # 40 + 32 × 15 × 0.47 = 266 px, wider than a phone's 260-pixel plot


def test_finish_keeps_the_plot_height_and_grows_the_margin_for_the_y_title():
    fig = go.Figure()
    for i in range(6):
        fig.add_scatter(x=[1], y=[1], name=f"a rather long method name {i}")
    finish(fig, "t", "x (s)", "y (tokens)", subtitle="one<br>two", height=420)
    layout = fig.layout
    assert layout.margin.t == 60 + 2 * 20  # the title, then 20 px for each subtitle line
    assert layout.height - layout.margin.t - layout.margin.b == 420 - 100 - 80  # the plot's own pixels
    assert layout.yaxis.automargin is True  # a fixed 60 px margin put the y title over the tick labels
    assert layout.legend.title.side == "top"
