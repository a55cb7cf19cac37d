"""The Race tab on a phone (390x844, issue 38 item 9), in a real browser: Run race and the colour key
on the first screen, the key at the column's width, the summary's speedup on screen after a race, a
rejected draft's line break kept out of the code's layout. Screenshots go to artifacts/."""

from __future__ import annotations

import pytest

from tests.test_app_browser import ARTIFACTS, CHOSEN, CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, server, set_race

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
__all__ = ["server"]  # the app's server fixture, shared with the other browser tests


@pytest.fixture(scope="module")
def phone(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=PHONE, is_mobile=True, has_touch=True)
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(server)
        page.wait_for_selector("#sv-pair-status:has-text('tiny')")
        yield page
        browser.close()


def test_run_race_and_the_colour_key_are_on_a_phones_first_screen(phone):
    """Run race was below the fold and the colour key a 26 px column beside an 837 px box."""
    phone.evaluate("() => window.scrollTo(0, 0)")
    run = phone.locator("#sv-run").bounding_box()
    assert run and run["y"] >= 0 and run["y"] + run["height"] <= PHONE["height"], run
    key = phone.locator(".sv-legend").bounding_box()
    assert key and key["width"] >= 300 and key["y"] < PHONE["height"], key  # it starts on the first screen
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]  # nothing runs off the side
    ARTIFACTS.mkdir(exist_ok=True)
    phone.screenshot(path=str(ARTIFACTS / "race_first_screen_390.png"))


def test_after_a_race_the_summarys_speedup_is_on_a_phones_screen(phone):
    """The summary scrolled sideways with the speedup off-screen; a rejected draft's line break
    broke the code's layout."""
    set_race(phone, "def fibonacci(n):\n    if n < 2:\n        return n\n", CHOSEN, 24)
    phone.click("#sv-run")
    phone.wait_for_selector("#sv-race-status:has-text('Race finished')")
    phone.locator("#sv-summary").scroll_into_view_if_needed()  # down the page; the table itself not scrolled
    rights = phone.evaluate(
        """() => {
            const head = [...document.querySelectorAll('#sv-summary thead th')];
            const at = head.findIndex(cell => cell.innerText.includes('speedup'));
            const rows = [...document.querySelectorAll('#sv-summary .virtual-row')];  // gradio's table body
            const edge = document.querySelector('#sv-summary .virtual-table-viewport').getBoundingClientRect().right;
            return [head[at], ...rows.map(r => r.children[at])].map(c => c.getBoundingClientRect().right - edge);
        }"""
    )
    assert len(rights) == 4 and max(rights) <= 0, rights  # the header and each method's speedup, inside the table's box
    why = phone.locator("#sv-why table")  # fits its box: every column, both speedups included, on screen
    widths = why.evaluate("t => [t.scrollWidth, t.closest('#sv-why').clientWidth]")
    assert widths[0] <= widths[1], widths
    hidden = why.evaluate("t => [...t.querySelectorAll('th')].filter(th => !th.offsetParent).map(th => th.innerText)")
    assert hidden == ["family"]  # the one column left out (style.py hides it by place), named under the table
    rejected = phone.locator("#sv-board .sv-rejgroup .sv-tok.sv-rejected").first
    assert rejected.evaluate("e => getComputedStyle(e).whiteSpace") in ("normal", "nowrap")  # line breaks collapse
    phone.screenshot(path=str(ARTIFACTS / "race_finished_390.png"), full_page=True)


# a cell's text: how many lines it takes, and whether any of it is cut off at the cell's edge
LINES = """el => { const r = document.createRange(); r.selectNodeContents(el);
    const tops = new Set([...r.getClientRects()].filter(c => c.width > 0).map(c => Math.round(c.top)));
    return [el.innerText.trim(), tops.size, el.scrollWidth > el.clientWidth + 1]; }"""


def test_the_why_tables_numbers_never_break_on_a_phone(phone):
    """Review fault 7: α and c wrapped one character a line ("0 / . / 8 / 4")."""
    phone.wait_for_selector("#sv-why table")  # after the race of the test above
    cells = [phone.locator("#sv-why td").nth(i) for i in range(phone.locator("#sv-why td").count())]
    numbers = [c.evaluate(LINES) for c in cells if c.inner_text().strip().rstrip("×").replace(".", "").isdigit()]
    assert len(numbers) >= 8 and all(lines == 1 for _, lines, _ in numbers), numbers


def test_pearls_and_discos_tables_fit_a_phone(phone):
    """Review fault 7: PEARL's step table wrapped its headers a letter a line ("a c c e p t e d"), and the
    "This prompt" tables showed only the method column, the speedup and ms/token off-screen."""
    from tests.test_app_browser import table_rows

    phone.get_by_role("tab", name="PEARL: parallel drafting").click()
    for label, value in (("Max new tokens", "24"), ("Timed runs", "1")):
        number = phone.locator(f"input[aria-label^='number input for {label}']").last
        number.fill(value)
        number.press("Enter")
    phone.get_by_role("button", name="Run the target alone, vanilla and PEARL").click()
    table_rows(phone, "sv-pearl-table", 3)
    phone.wait_for_selector("#sv-pearl-steps [role=row][aria-rowindex='2']")
    heads = phone.locator("#sv-pearl-steps thead th .header")
    words = [heads.nth(i).evaluate(LINES) for i in range(heads.count())]
    assert len(words) == 7, words
    for text, lines, cut in words:  # each header whole, broken only between its words
        assert lines <= len(text.split()) and not cut, (text, lines, cut)
    phone.locator("#sv-pearl-steps").screenshot(path=str(ARTIFACTS / "pearl_steps_390.png"))
    key_numbers_on_screen(phone, "sv-pearl-table", ["× target alone", "ms/token"])
    phone.get_by_role("tab", name="DISCO: dynamic speculation length").click()
    phone.get_by_role("button", name="Run DISCO vs oracle").click()
    table_rows(phone, "sv-disco-table", 4)
    key_numbers_on_screen(phone, "sv-disco-table", ["speedup vs AR (×)", "ms/token"])
    phone.get_by_role("tab", name="Race").click()


def key_numbers_on_screen(page, elem_id: str, columns: list[str]) -> None:
    """The method's column, then `columns`, whole on a phone's screen; no header broken inside a word."""
    heads = page.locator(f"#{elem_id} thead th")
    texts = [heads.nth(i).get_attribute("title") for i in range(heads.count())]
    assert texts[1 : 1 + len(columns)] == columns, texts
    for i in range(1 + len(columns)):
        box = heads.nth(i).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (texts[i], box)
        text, lines, cut = heads.nth(i).locator(".header").evaluate(LINES)
        assert lines <= len(text.split()) and not cut, (text, lines, cut)
    page.locator(f"#{elem_id}").screenshot(path=str(ARTIFACTS / f"{elem_id}_390.png"))
