"""The Theory tab in a real browser after a race on the tiny-random pair: the what-if takes the race's
measured draft cost c and verify cost, and draws the race's own methods on its curves (issue 38)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from specviz.tools.load import free_port
from tests.test_app_browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, race_to_end, set_race

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("SPECVIZ_SHOTS", Path(__file__).resolve().parent.parent / "artifacts"))


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    from specviz.ui import build_app, launch

    demo = build_app(pair="tiny-random")
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#sv-pair-status:has-text('tiny')")
            yield page
            browser.close()
    finally:
        demo.close()


def test_the_whatif_shows_the_races_point_and_its_measured_cost(page):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.get_by_role("tab", name="Theory").click()
    chain = page.locator("#sv-whatif-chain")
    page.wait_for_selector("#sv-whatif-chain:has-text('cost model (no race yet)')")  # before a race: said on the plot
    page.get_by_role("tab", name="Race").click()
    set_race(page, "def fibonacci(n):", {"Autoregressive", "Vanilla SD"}, 24)
    race_to_end(page)
    why = page.locator("#sv-why").inner_text()
    page.get_by_role("tab", name="Theory").click()
    page.wait_for_selector("#sv-whatif-chain:has-text('measured in the last race')")
    shown = chain.inner_text()
    c = re.search(r"measured in the last race \(tiny-random\): c =\s*([0-9.]+)", shown)  # a line may break there
    assert c, shown
    row = next(line for line in why.splitlines() if line.startswith("Vanilla SD"))
    assert c.group(1) in row.split("\t")  # the what-if's c is the one the race measured (the why table's)
    assert "Vanilla SD α=" in shown  # the race's own point, labelled, on the curves
    assert "measured in the last race" in page.locator("#sv-whatif-text").inner_text()
    page.locator("#sv-whatif-chain").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "theory_whatif_1440.png"))
    page.get_by_role("button", name="Compare with the published figures").click()
    page.get_by_role("button", name="Explain the last race").click()
    page.wait_for_selector("#sv-theory-race:has-text('Why each method')")
    page.wait_for_selector(".js-plotly-plot:has-text('Spec-Bench: published vs predicted')")
    page.screenshot(path=str(SHOTS / "theory_full_1440.png"), full_page=True)


def _clipped(page, selector: str) -> list[str]:
    """The texts inside `selector` (its label and its input's value) wider than the box that shows them."""
    return page.locator(selector).evaluate(
        """root => [...root.querySelectorAll('input, [data-testid="block-info"], label span')]
            .filter(e => e.scrollWidth > e.clientWidth + 1)
            .map(e => (e.value || e.textContent).trim())"""
    )


def test_the_roofline_note_follows_the_race_and_its_dropdowns_are_whole(page):
    """Issue 38 (7): the roofline's "measured in the last race" note was drawn only when a roofline input
    changed, so it went on explaining an older race (or none); the hardware dropdown's value was cut off."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.get_by_role("tab", name="Theory").click()
    page.locator("#sv-roofline-hardware input").click()
    page.get_by_role("option", name="This machine (2-core CPU)", exact=True).click()
    note = page.locator("#sv-roofline-text")
    # this machine's note is drawn (it explains the last race, or asks for one)
    page.wait_for_selector("#sv-roofline-text:has-text('in the last race'), #sv-roofline-text:has-text('Run a race')")
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.locator("#sv-roofline-hardware").scroll_into_view_if_needed()
        for dropdown in ("#sv-roofline-hardware", "#sv-roofline-model", "#sv-roofline-engine"):
            assert _clipped(page, dropdown) == [], (dropdown, width)
        page.screenshot(path=str(SHOTS / f"theory_roofline_controls_{width}.png"))
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="Race").click()
    set_race(page, "def fibonacci(n):", {"Autoregressive", "Prompt lookup"}, 24)
    race_to_end(page)
    page.get_by_role("tab", name="Theory").click()
    page.wait_for_selector("#sv-roofline-text:has-text('Prompt lookup: T(γ+1)/T(1)')")  # the race just run
    text = note.inner_text()
    assert "Measured in the last race" in text and "Vanilla SD" not in text, text  # not the earlier race's
    note.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "theory_roofline_after_race_1440.png"))


def test_the_last_race_views_follow_a_race_that_finishes_while_the_tab_is_open(page):
    """Fix 3 (issue 38 follow-up): the Theory tab redrew its views of the last race when it was opened, not when
    a race running at that moment finished while it stayed open (a race changes ctx.race in place: no change
    event). A new visitor starts a long race, opens Theory while it runs and stays there: the what-if and the
    explanation of the last race follow the race once it finishes (the roofline's note, too, on this machine)."""
    fresh = page.context.browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        fresh.set_default_timeout(TIMEOUT_MS)
        fresh.goto(page.url)
        fresh.wait_for_selector("#sv-pair-status:has-text('tiny')")
        set_race(fresh, "def fibonacci(n):", {"Autoregressive", "Vanilla SD", "Prompt lookup"}, 512)
        fresh.locator("#sv-run").click()
        fresh.wait_for_selector("#sv-board .sv-panel[data-method='autoregressive']")  # the race has begun
        fresh.get_by_role("tab", name="Theory").click()
        chain = fresh.locator("#sv-whatif-chain")
        chain.wait_for()
        assert "measured in the last race" not in chain.inner_text()  # opened while the race runs
        assert not fresh.locator("#sv-race-status:has-text('Race finished')").count()
        fresh.wait_for_selector("#sv-whatif-chain:has-text('measured in the last race')")
        fresh.wait_for_selector("#sv-theory-race:has-text('Vanilla SD')")
        assert fresh.get_by_role("tab", name="Theory").get_attribute("aria-selected") == "true"  # never left it
        SHOTS.mkdir(parents=True, exist_ok=True)
        chain.scroll_into_view_if_needed()
        fresh.screenshot(path=str(SHOTS / "theory_follows_the_race_1440.png"))
        fresh.set_viewport_size({"width": 390, "height": 844})
        fresh.locator("#sv-theory-race").scroll_into_view_if_needed()
        fresh.screenshot(path=str(SHOTS / "theory_follows_the_race_390.png"))
    finally:
        fresh.close()
