"""The Online-learning tab in a real browser (issue 38 item 6): before the draft's first update the page
says that the online draft is still the static one, draws their α as the same, and the token analysis
says nothing was learned yet instead of a before = after table. The tiny pair: layout and wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import test_app_browser as app

pytestmark = pytest.mark.browser
server, page = app.server, app.page  # the app on the tiny pair, and Chromium on it (module fixtures)
SHOTS = Path("/tmp/shots-O")


def set_slider(page, label: str, value: int) -> None:
    number = page.get_by_label(f"number input for {label}")
    number.fill(str(value))
    number.press("Enter")


def test_before_the_first_update_the_tab_says_nothing_was_learned_yet(page):
    page.set_viewport_size({"width": 1440, "height": 900})
    try:
        page.get_by_role("tab", name="Online learning").click()
        set_slider(page, "requests in the stream", 2)
        set_slider(page, "update interval I (requests)", 4)
        page.get_by_role("button", name="Serve the stream").click()
        page.wait_for_selector("text=2 / 2 requests served")
        summary = page.locator("text=2 / 2 requests served").locator("xpath=..").inner_text()
        assert "no update yet (the first starts after 4 requests" in summary
        assert "online draft is the static draft" in summary
        # the figure: online and static per-request α are the same numbers
        y = page.evaluate(
            """() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')]
                .flatMap(p => p.data || []).filter(t => (t.name || '').endsWith('per request'))
                .map(t => [t.name, Array.from(t.y)]))"""
        )
        assert y["online draft (OSD), per request"] == y["static draft, per request"] and len(y) == 2
        # the empty loss plot says why, inside the figure (it was drawn off its left edge, cut)
        why = page.locator(".js-plotly-plot .annotation-text:has-text('no update yet')")
        plot = why.locator("xpath=ancestor::div[contains(@class, 'js-plotly-plot')]").bounding_box()
        box = why.bounding_box()
        assert box and plot and plot["x"] + 60 <= box["x"] and box["x"] + box["width"] <= plot["x"] + plot["width"]
        assert box["y"] > plot["y"] + plot["height"] / 2  # under α, where the loss goes
        page.get_by_role("button", name="Which tokens did the draft learn?").click()
        note = page.locator("text=Nothing learned yet.").locator("xpath=ancestor::div[contains(@class,'prose')][1]")
        note.wait_for()
        assert "every 4 requests" in note.inner_text()
        assert page.locator("text=precision before").count() == 0  # no before = after table
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "online_tiny_no_update_1440.png"), full_page=True)
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})
