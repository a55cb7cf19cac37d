"""The Streaming tab in a real browser (issue 39 item 5): after a run, beside the tree of the chosen
iteration, the figure of its one target pass (one bar per row) and the sentence that counts its rows;
the two stack on a phone. Screenshots go to $SPECVIZ_SHOTS (default: artifacts/)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import test_app_browser as app

pytestmark = pytest.mark.browser
server, page = app.server, app.page  # the app on the tiny pair, and Chromium on it (module fixtures)
SHOTS = Path(os.environ.get("SPECVIZ_SHOTS", str(app.ARTIFACTS)))
PASS = "#sv-streaming-pass .js-plotly-plot"
LINE = "#sv-streaming-pass-line"


def pass_title(page) -> str:
    return page.evaluate(f"() => document.querySelector('{PASS}').layout.title.text")


def drawn_rows(page) -> int:
    """Bars plotly drew in the pass figure: one per row of the pass."""
    return page.locator(f"{PASS} g.trace.bars g.point").count()


@pytest.fixture(scope="module")
def streamed(page):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="Streaming tree").click()
    page.get_by_role("button", name="Run streaming").click()
    page.wait_for_selector(f"{LINE}:has-text('one target pass:')")
    page.wait_for_selector(f"{PASS} g.trace.bars")
    return page


def test_the_pass_figure_shows_every_row_beside_the_tree(streamed):
    page = streamed
    title = pass_title(page)
    main, streams = map(int, re.search(r"one pass, (\d+) \+ (\d+) rows", title).groups())
    assert drawn_rows(page) == main + streams
    line = page.locator(LINE).inner_text()
    assert f"{streams} stream rows" in line
    iteration = int(re.match(r"Iteration (\d+):", title).group(1))
    assert page.locator("#sv-streaming-iteration input[type=number]").input_value() == str(iteration)
    legend = page.locator(f"{PASS} .legend").text_content() or ""
    assert "streams → next tree" in legend and "streams discarded" in legend and "rows of the pass" in legend
    tree, shown = page.locator("#sv-streaming-tree").bounding_box(), page.locator("#sv-streaming-pass").bounding_box()
    assert tree and shown and shown["x"] >= tree["x"] + tree["width"] - 1  # side by side on a wide screen
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#sv-streaming-tree").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "streaming_pass_1440.png"))


def test_another_iteration_redraws_the_pass(streamed):
    page = streamed
    number = page.locator("#sv-streaming-iteration input[type=number]")
    number.fill("2")
    number.press("Enter")
    page.wait_for_function(f"() => document.querySelector('{PASS}').layout.title.text.startsWith('Iteration 2:')")
    main, streams = map(int, re.search(r"one pass, (\d+) \+ (\d+) rows", pass_title(page)).groups())
    page.wait_for_function(
        f"n => document.querySelectorAll('{PASS} g.trace.bars g.point').length === n", arg=main + streams
    )
    assert f"{streams} stream rows" in page.locator(LINE).inner_text()


def test_on_a_phone_the_pass_stacks_under_the_tree_and_fits(streamed):
    page = streamed
    try:
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_function(
            "() => { const b = document.querySelector('#sv-streaming-pass').getBoundingClientRect();"
            " return b.width <= 390; }"
        )
        tree, shown = (
            page.locator("#sv-streaming-tree").bounding_box(),
            page.locator("#sv-streaming-pass").bounding_box(),
        )
        assert tree and shown and shown["y"] >= tree["y"] + tree["height"] - 1  # under the tree
        assert shown["x"] >= 0 and shown["x"] + shown["width"] <= 390
        title = page.locator(f"{PASS} .gtitle").bounding_box()
        assert title and title["x"] >= 0 and title["x"] + title["width"] <= 390  # the title whole
        page.locator("#sv-streaming-pass").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "streaming_pass_390.png"))
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})
