"""Plot titles, subtitles and legends that a phone shows whole (review fault 7: on a 390-pixel screen
the speculation-length plot's title, subtitle and legend ran off its right edge).

Plotly does not wrap titles or legend entries, so the check is on their width: the average character
of the font Chromium draws is about 0.47 of its size (the review's crop: 34 title characters at 21 px
took 325 px), and a phone's plot is about 340 pixels wide inside the page's padding."""

from __future__ import annotations

import pandas as pd

from specviz.plots.speculation_length import speculation_length_vs_oracle

PHONE_PX = 340
EM = 0.47  # an average character's width in font sizes, measured on the review's phone crop (02_phone_sl.png)


def text_px(text: str, size: float) -> float:
    return len(text) * size * EM


def test_the_speculation_length_plot_fits_a_phone():
    df = pd.DataFrame(
        {
            "method": ["disco"] * 3,
            "label": ["DISCO"] * 3,
            "iteration": [1, 2, 3],
            "speculation_length": [4, 6, 2],
            "accepted": [2, 6, 0],
            "oracle_sl": [2, 9, 0],
        }
    )
    fig = speculation_length_vs_oracle(df, "disco")
    font = fig.layout.font.size
    assert text_px(fig.layout.title.text, font * 1.4) <= PHONE_PX  # plotly's title: 1.4 times the font
    lines = fig.layout.title.subtitle.text.split("<br>")
    for line in lines:
        assert text_px(line, font) <= PHONE_PX, line
    assert fig.layout.margin.t >= 60 + 20 * len(lines)  # the title and each subtitle line above the plot
    assert not fig.layout.legend.title.text  # a legend title takes the left of every entry row
    legend_font = fig.layout.legend.font.size or font
    for t in fig.data:  # each entry: a 40-pixel symbol, then its name
        assert 40 + text_px(t.name, legend_font) <= PHONE_PX, t.name


def test_discos_speculation_length_plot_fits_a_phone():
    """At 390 px its legend ran off the right edge ("oracle SL (draft tokens the target would acc"): each
    entry is short, what it is said in a subtitle line that fits, with room above the first plot."""
    from specviz.plots.disco import chosen_vs_oracle_per_iteration

    df = pd.DataFrame(
        {
            "method": ["DISCO"] * 3,
            "iteration": [1, 2, 3],
            "speculation_length": [4, 6, 2],
            "oracle_sl": [2, 9, 0],
        }
    )
    fig = chosen_vs_oracle_per_iteration(df, ["DISCO"])
    font = fig.layout.font.size
    legend_font = fig.layout.legend.font.size or font
    for t in fig.data:
        assert 40 + text_px(t.name, legend_font) <= PHONE_PX, t.name
    lines = fig.layout.title.subtitle.text.split("<br>")
    assert any("oracle SL:" in line for line in lines)  # the entry's meaning, now in the subtitle
    for line in lines:
        assert text_px(line, font) <= PHONE_PX, line
    assert fig.layout.margin.t >= 60 + 20 * len(lines) + 20  # the title, each subtitle line, the first plot's title
