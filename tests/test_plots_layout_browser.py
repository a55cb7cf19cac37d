"""The Theory tab's speedup figures and the benchmark report's, drawn by plotly.js in Chromium at a
desktop's half-width plot and a phone's, and measured: no text over other text, nothing cut at the
figure's edge, the α of the app's one vocabulary (issue 38 items 3, 7 and 9: measured labels over each
other and the baseline's note, three-line bar labels shrunk to specks, the y title over the tick labels,
"acceptance rate" naming α's curves).

Each figure is written into a page with the plotly.js the package ships (no server), and the boxes of
its SVG text are compared."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import plotly
import pytest
from test_app_browser import CHROMIUM, CHROMIUM_ARGS

from specviz.plots.bench import report_figures
from specviz.plots.speedup import (
    improvement_curves_figure,
    predicted_vs_measured_speedup_figure,
    speedup_heatmap_figure,
    speedup_vs_alpha_figure,
    tree_size_figure,
)
from specviz.plots.sssd_figures import accepted_length_figure
from specviz.plots.theme import ALPHA

pytestmark = pytest.mark.browser

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
WIDTHS = (680, 340)  # a half-width plot at 1440 px; a phone's 390 px screen less the page's padding
SHOTS = Path("/tmp/shots-P")

# A race whose methods crowd: three chain methods near γ = 4 and 1.2×, the way a race's vanilla, OSD and
# the dynamic policy land (their labels, written beside the points, ran over each other).
CROWDED = [
    {"x": 4.0, "y": 1.20, "label": "Vanilla SD α=0.70"},
    {"x": 4.1, "y": 1.23, "label": "Online SD α=0.71"},
    {"x": 3.8, "y": 1.17, "label": "Dynamic (heuristic) α=0.69"},
    {"x": 2.9, "y": 0.99, "label": "Prompt lookup α=0.42"},
]
COST_NOTE = "measured in the last race (tiny-perturbed): c = 0.101, verify cost 1 + 0.061·γ"
DISTURBED = "<br>⚠ its timings were disturbed by other load (see the Race tab)"  # theory.measured_cost's warning
EXPLAINED = [  # explain_run's rows, as the Theory tab's "Explain the last race" draws them
    {"method": m, "predicted_speedup": p, "measured_speedup": s, "alpha": a, "length_text": t, "c": c}
    for m, p, s, a, t, c in (
        ("Vanilla SD", 1.31, 1.22, 0.70, "γ = 4.0", 0.10),
        ("Prompt lookup", 1.21, 0.99, 0.42, "γ = 2.8", 0.03),
        ("DISCO", 0.95, 1.02, 0.74, "γ = 3.1", 0.11),
        ("SSSD (n-gram tree)", 0.60, 0.51, 0.45, "S = 5.7, depth 3.4", 0.01),  # the app's longest label
    )
]


SHIPPED = json.loads(
    gzip.decompress((Path(__file__).parents[1] / "benchmarks" / "cpu" / "quiet" / "results.json.gz").read_bytes())
)

SSSD = json.loads((Path(__file__).parents[1] / "benchmarks" / "sssd" / "results.json").read_text())


def verify(n: int) -> float:
    """A measured verify cost's line, T(n+1)/T(1) = 1 + 0.061·n, as theory.measured_cost draws it."""
    return 1 + 0.061 * n


def figures():
    return {
        "curves": improvement_curves_figure(
            [0.3, 0.5, 0.7, 0.9], 0.101, 16, verify, highlight=0.7, cost_note=COST_NOTE, points=CROWDED
        ),
        "tree": tree_size_figure(
            [0.3, 0.5, 0.7, 0.9], 4, 0.004, verify, 64, 0.7, 10, COST_NOTE, [{"x": 5.7, "y": 0.8, "label": "SSSD"}]
        ),
        "predicted_vs_measured": predicted_vs_measured_speedup_figure(EXPLAINED),
        **{f"bench_{i}": f for i, f in enumerate(report_figures(SHIPPED))},  # the benchmark report's figures
        "sssd_fig4": accepted_length_figure(SSSD["fig4"]),  # the experiments' figures
        "vs_alpha": speedup_vs_alpha_figure([0.01, 0.05, 0.1, 0.2, 0.5], fixed_gamma=4),
        "heatmap": speedup_heatmap_figure(0.05, 16),
        "curves_disturbed": improvement_curves_figure(  # four lines of subtitle: the title stays at the top
            [0.3, 0.5, 0.7, 0.9], 0.101, 16, verify, highlight=0.7, cost_note=COST_NOTE + DISTURBED, points=CROWDED
        ),
    }


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": 1440, "height": 900})
        browser.close()


def draw(page, fig, width: int) -> dict:
    """The figure drawn `width` pixels wide; the boxes of its texts by role, and the figure's size."""
    html = (
        f"<html><head><meta charset='utf-8'><script src='file://{PLOTLY_JS}'></script></head>"
        f"<body style='margin:0'><div id='fig' style='width:{width}px'></div><script>"
        f"const f = {fig.to_json()}; Plotly.newPlot('fig', f.data, f.layout);</script></body></html>"
    )
    SHOTS.mkdir(parents=True, exist_ok=True)  # a clean machine has no such folder
    path = SHOTS / f"_layout_{width}.html"
    path.write_text(html)
    page.goto(f"file://{path}")
    page.wait_for_selector("#fig .main-svg")
    return page.evaluate(
        """() => {
        const box = e => {
          const r = e.getBoundingClientRect();
          return [r.left, r.top, r.right, r.bottom, e.textContent];
        };
        const all = s => [...document.querySelectorAll('#fig ' + s)].filter(e => e.textContent).map(box);
        const svg = document.querySelector('#fig .main-svg').getBoundingClientRect();
        return {
          size: [svg.width, svg.height],
          title: all('.gtitle, .gtitle-subtitle'), ytitle: all('.ytitle'), xtitle: all('.xtitle'),
          yticks: all('.ytick text'), xticks: all('.xtick text'), legend: all('.legend text'),
          labels: all('.textpoint text, .bartext'), notes: all('.annotation-text'),
          plot: box(document.querySelector('#fig .bglayer rect') || document.querySelector('#fig .nsewdrag')),
        };
    }"""
    )


def overlaps(a, b, slack: float = 1.0) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


def crossings(boxes, others=None):
    """Pairs of texts whose boxes overlap: within `boxes`, or between `boxes` and `others`."""
    if others is None:
        return [(a[4], b[4]) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if overlaps(a, b)]
    return [(a[4], b[4]) for a in boxes for b in others if overlaps(a, b)]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "name",
    [
        "curves",
        "tree",
        "predicted_vs_measured",
        "curves_disturbed",
        "bench_0",
        "bench_1",
        "bench_3",
        "sssd_fig4",
        "vs_alpha",
        "heatmap",
    ],
)
def test_speedup_and_benchmark_figures_have_no_text_over_text_at_both_widths(page, name, width):
    fig = figures()[name]
    boxes = draw(page, fig, width)
    SHOTS.mkdir(exist_ok=True)
    page.locator("#fig").screenshot(path=str(SHOTS / f"test_{name}_{width}.png"))
    texts = [b for k in ("title", "ytitle", "xtitle", "yticks", "legend", "labels", "notes") for b in boxes[k]]
    assert not crossings(texts), json.dumps(crossings(texts), ensure_ascii=False)
    # the x tick labels against the rest (among themselves plotly turns them when they would touch, and
    # the boxes of turned labels overlap where their letters do not)
    assert not crossings(boxes["xticks"], texts), json.dumps(crossings(boxes["xticks"], texts), ensure_ascii=False)
    w, h = boxes["size"]
    cut = [t[4] for t in texts if t[0] < -1 or t[2] > w + 1 or t[1] < -1 or t[3] > h + 1]
    assert not cut, cut  # nothing runs off the figure's edge
    ytitle = boxes["ytitle"][0]
    assert ytitle[3] - ytitle[1] <= boxes["plot"][3] - boxes["plot"][1] + 2  # the y title no longer than its axis
    if name == "predicted_vs_measured":  # turned method names took half a phone's plot from its bars
        assert boxes["plot"][2] - boxes["plot"][0] >= 0.6 * w
    drawn = [b for b in boxes["labels"] if b[2] > b[0]]  # a bar's number is readable or not drawn at all:
    assert all(b[3] - b[1] >= 10 for b in drawn), drawn  # three lines a bar shrank to 3-pixel specks


def test_alpha_is_named_as_the_app_defines_it_and_each_measured_run_in_the_legend():
    curves = figures()["curves"]
    words = json.dumps(curves.layout.to_plotly_json(), ensure_ascii=False) + " ".join(t.name or "" for t in curves.data)
    assert "acceptance rate" not in words  # accepted ÷ drafted is another number (specviz.metrics)
    assert curves.layout.legend.title.text == ALPHA == "α (accepted ÷ tested)"
    race = [t for t in curves.data if (t.name or "").startswith("race: ")]
    assert [t.name for t in race] == [f"race: {p['label']}" for p in CROWDED]
    assert len({t.marker.symbol for t in race}) == len(CROWDED) and not any("text" in t.mode for t in race)
