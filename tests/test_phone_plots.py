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


def test_the_pearl_tabs_timeline_fits_a_phone(perturbed_pair):
    """At 390 px the lanes' labels on the left were cut, the title ran off and the legend took half the
    width: each label now sits above its bar across the plot, the title's overflow goes in the subtitle,
    the legend below."""
    import specviz
    from specviz.plots.timeline import timeline

    def records(method, **options):
        return list(specviz.generate(method, perturbed_pair, "def f(x):", max_new_tokens=12, **options).records)

    runs = {
        "target alone": records("autoregressive"),
        "vanilla (γ=4, its default)": records("vanilla", speculation_length=4),
        "PEARL (γ=5)": records("pearl", window=5),
    }
    # the title the PEARL tab gives it
    fig = timeline(runs, "Which model runs when (γ = 5, Theorem 1's window): busy spans per lane, waiting in grey")
    font = fig.layout.font.size or 12  # plotly's default
    margin = fig.layout.margin
    plot_px = (
        PHONE_PX - (80 if margin.l is None else margin.l) - (80 if margin.r is None else margin.r)
    )  # plotly's default: 80
    assert text_px(fig.layout.title.text, font * 1.4) <= PHONE_PX, fig.layout.title.text
    lines = fig.layout.title.subtitle.text.split("<br>")
    assert "Theorem 1's window" in fig.layout.title.subtitle.text  # nothing of the title is lost
    for line in lines:
        assert text_px(line, font) <= PHONE_PX, line
    assert fig.layout.margin.t >= 60 + 20 * len(lines)
    assert fig.layout.yaxis.showticklabels is False  # no labels on the left taking the plot's width
    labels = [a.text for a in fig.layout.annotations]
    assert len(labels) == 6 and "PEARL (γ=5) · draft" in " ".join(labels)
    for a in fig.layout.annotations:  # each lane's label over its bar, within the plot's width
        assert a.xref == "paper" and a.x == 0 and a.xanchor == "left"
        assert text_px(a.text, a.font.size) <= plot_px, a.text
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0  # below the plot, across it
    legend_font = fig.layout.legend.font.size or font
    for t in fig.data:
        if t.showlegend:
            assert 40 + text_px(t.name, legend_font) <= plot_px, t.name


def race_frame(methods: int, most: int) -> pd.DataFrame:
    """A race's records frame with `methods` drafting methods beside the target alone, each accepting
    0..`most` tokens over its iterations."""
    rows = [{"method": "autoregressive", "label": "Autoregressive", "n_drafted": 0, "accepted": 0}]
    for m in range(methods):
        rows += [
            {"method": f"m{m}", "label": f"Method number {m}", "n_drafted": 4, "accepted": (m + k) % (most + 1)}
            for k in range(2 * most)
        ]
    return pd.DataFrame(rows)


def test_the_accepted_histograms_bars_stay_readable_on_a_phone_with_every_method():
    """Issue 38 item 9: with every method raced, eleven bars per count shared a 260-pixel plot, each a
    pixel or two wide. Each method now has its own panel on the same axes: a bar at least 8 px wide."""
    from specviz.plots.accepted_histogram import accepted_histogram

    fig = accepted_histogram(race_frame(11, 8))
    plot_px = PHONE_PX - fig.layout.margin.l - fig.layout.margin.r
    bargap = 0.2 if fig.layout.bargap is None else fig.layout.bargap  # plotly's default: 0.2
    axes = {t.xaxis or "x" for t in fig.data}
    for name in axes:
        axis = fig.layout["xaxis" + name[1:]]
        bars = sum((t.xaxis or "x") == name for t in fig.data)  # side by side in each count's slot
        slots = axis.range[1] - axis.range[0] if axis.range else 9  # plotly's autorange: counts 0..8
        share = axis.domain[1] - axis.domain[0] if axis.domain else 1.0  # without panels: the whole width
        width = plot_px * share / slots * (1 - bargap) / bars
        assert width >= 8, (name, width)
    assert sorted(t.name for t in fig.data) == sorted(f"Method number {m}" for m in range(11))
    for a in fig.layout.annotations:  # each panel named above it, in lines that fit a panel
        for line in a.text.split("<br>"):
            assert text_px(line, a.font.size) <= plot_px / 2, line


def test_the_acceptance_per_position_plot_fits_a_phone():
    from specviz.plots.positions import acceptance_by_position

    fig = acceptance_by_position([("vLLM draft model", 0, ((10, 6), (6, 3), (3, 1))), ("Vanilla SD", 1, ((9, 5),))])
    font = fig.layout.font.size
    assert text_px(fig.layout.title.text, font * 1.4) <= PHONE_PX
    assert text_px(fig.layout.xaxis.title.text, font) <= PHONE_PX - 80  # the plot's width less its y axis
    assert text_px(fig.layout.yaxis.title.text, font) <= 300  # up the side of a 420-pixel plot
    legend_font = fig.layout.legend.font.size or font
    for t in fig.data:
        assert 40 + text_px(t.name, legend_font) <= PHONE_PX, t.name
