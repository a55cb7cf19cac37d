"""EAGLE-2 in the app, in a real browser (tests/test_app_browser.py's Chromium): raced beside the target
alone on the tiny random pair (the untrained head: no trained head fits it), its text is the target's,
its panel and options show, and the step-through draws one iteration's tree with its accepted path."""

from __future__ import annotations

import pytest

from specviz.methods import get_method
from specviz.methods.eagle import EagleOptions
from tests import test_theory_browser
from tests.test_app_browser import ARTIFACTS, race_to_end, set_race

pytestmark = pytest.mark.browser

LABEL = get_method("eagle").label
RACE = {"Autoregressive": "autoregressive", LABEL: "eagle"}
# the names of the step-through animation's traces (specviz.plots.animation draws a tree's edges as "tree edge")
TREE_TRACES = (
    "() => { const e = document.querySelector('#sv-step-anim .js-plotly-plot');"
    " return e && e.data && e.data.map(t => t.name); }"
)

# a panel's text without its rejected drafts (struck through beside the kept tokens)
KEPT = (
    "m => [...document.querySelectorAll(`#sv-board .sv-panel[data-method=${m}] .sv-tok:not(.sv-rejected)`)]"
    ".map(e => e.textContent).join('')"
)


page = test_theory_browser.page  # the app on the tiny random pair in Chromium at 1440 x 900, one per module


def test_eagle_is_offered_unticked_and_races_to_the_targets_text(page):
    box = page.locator("#sv-methods label", has_text=LABEL)
    assert box.count() == 1 and not box.locator("input").is_checked()  # the default race stays as it was
    set_race(page, "def fibonacci(n):", RACE, 20)
    page.click("#sv-method-options")  # the accordion: eagle's sliders and what its head is
    note = page.locator("#sv-method-options .prose.sv-option-fixed", has_text='head: "auto"')
    note.wait_for(state="visible")
    assert 'head: "auto" in the app' in note.inner_text() and "--option eagle.head=VALUE" in note.inner_text()
    race_to_end(page)
    panel = page.locator("#sv-board .sv-panel[data-method=eagle]")
    assert "sv-done" in panel.get_attribute("class")
    assert LABEL in panel.locator(".sv-panel-head").inner_text()
    target = page.evaluate(KEPT, "autoregressive")
    assert target and page.evaluate(KEPT, "eagle") == target  # lossless: the target's own text

    page.click("#sv-step button:has-text('Step through one iteration')")
    page.locator("#sv-step-method input").click()
    page.get_by_role("option", name=LABEL).click()
    page.wait_for_selector(f"#sv-step-view:has-text('{LABEL}, iteration 1 of')")
    page.click("#sv-step-next")  # the first pass only gives the head its features: the first tree comes second
    page.wait_for_selector(f"#sv-step-view:has-text('{LABEL}, iteration 2 of')")
    nodes = EagleOptions().tree_nodes  # the default tree, full at every iteration of the untrained head
    assert f"a tree of {nodes} candidate tokens was verified in one pass" in page.locator("#sv-step-view").inner_text()
    page.wait_for_function(f"() => ({TREE_TRACES})()?.includes('tree edge')")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#sv-step").screenshot(path=str(ARTIFACTS / "eagle_step_through.png"))
