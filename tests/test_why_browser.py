"""The 'why' table (specviz.ui.why) fits its page in a real browser, issue 38 item 9: with every method raced its
right columns ran off a 1440 px page ("measured spe…"), and the Theory tab's copy of it ("Explain the last race")
scrolled sideways on a phone. One race of every method (tiny-perturbed pair, a few tokens each) feeds every test;
screenshots go to artifacts/why/."""

from __future__ import annotations

import pytest

from tests.test_app_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, race_to_end, server
from tests.test_phone_browser import LINES, PHONE

pytestmark = pytest.mark.browser

DESK = {"width": 1440, "height": 900}
SHOTS = ARTIFACTS / "why"
COLUMNS = ["method", "family", "α", "γ or tree size", "c", "verify cost", "predicted speedup", "measured speedup"]
__all__ = ["server"]  # the app's server fixture, shared with the other browser tests

# the table's width against its box's, where its right edge is, and the headers shown
SHAPE = """(t, box) => [t.scrollWidth, t.closest(box).clientWidth, t.getBoundingClientRect().right,
    [...t.querySelectorAll('th')].filter(th => th.offsetParent).map(th => th.innerText.trim())]"""


@pytest.fixture(scope="module")
def raced(server):
    """A page at 1440x900 after a race of every method the app offers."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=DESK)
        page.set_default_timeout(4 * TIMEOUT_MS)
        page.goto(server)
        page.wait_for_selector("#sv-pair-status:has-text('tiny')")
        page.get_by_role("button", name="All", exact=True).click()
        number = page.locator("#sv-max-new input[type=number]")
        number.fill("12")
        number.press("Enter")
        ticked = [b for b in page.locator("#sv-methods label").all() if b.locator("input").is_checked()]
        assert len(ticked) >= 12, len(ticked)
        race_to_end(page)
        page.wait_for_selector("#sv-why table")
        SHOTS.mkdir(parents=True, exist_ok=True)
        yield page
        browser.close()


def fits(page, box: str, width: int, columns: list[str]) -> None:
    """The table in `box` is no wider than its box and ends on screen, shows `columns`, and every number in it
    is on one line (nothing cut, nothing broken inside)."""
    table = page.locator(f"{box} table")
    table.scroll_into_view_if_needed()
    table.screenshot(path=str(SHOTS / f"{box.lstrip('#')}_table_{width}.png"))
    scroll, room, right, shown = table.evaluate(SHAPE, box)
    assert scroll <= room and right <= width, (box, width, scroll, room, right)
    assert shown == columns, shown  # the speedups included
    for cell in table.locator("td").all():
        text, lines, cut = cell.evaluate(LINES)
        if text.rstrip("×").replace(".", "").isdigit():
            assert lines == 1 and not cut, (text, lines, cut)


def test_every_methods_why_table_fits_a_desktop_page(raced):
    raced.locator("#sv-why").scroll_into_view_if_needed()
    raced.screenshot(path=str(SHOTS / "race_why_1440.png"))
    rows = raced.locator("#sv-why tbody tr").count()
    assert rows >= 11, rows  # every drafting method of the race explained
    fits(raced, "#sv-why", DESK["width"], COLUMNS)


def test_the_theory_tabs_explanation_fits_a_desktop_and_a_phone(raced):
    raced.get_by_role("tab", name="Theory").click()
    raced.get_by_role("button", name="Explain the last race").click()
    raced.wait_for_selector("#sv-theory-race:has-text('Why each method')")
    raced.locator("#sv-theory-race").scroll_into_view_if_needed()
    raced.screenshot(path=str(SHOTS / "theory_why_1440.png"))
    fits(raced, "#sv-theory-race", DESK["width"], COLUMNS)
    raced.set_viewport_size(PHONE)
    try:
        raced.locator("#sv-theory-race").scroll_into_view_if_needed()
        raced.screenshot(path=str(SHOTS / "theory_why_390.png"))
        # as on the Race tab, the family is left out on a phone: it is named under the table with its formula
        fits(raced, "#sv-theory-race", PHONE["width"], [c for c in COLUMNS if c != "family"])
        assert raced.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        raced.get_by_role("tab", name="Race").click()
        raced.locator("#sv-why").scroll_into_view_if_needed()
        raced.screenshot(path=str(SHOTS / "race_why_390.png"))
        fits(raced, "#sv-why", PHONE["width"], [c for c in COLUMNS if c != "family"])  # every method's, too
    finally:
        raced.set_viewport_size(DESK)
