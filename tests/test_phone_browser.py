"""The Race tab on a phone (390x844, issue 38 item 9), in a real browser: Run race and the colour key
on the first screen, the key at the column's width, the summary's speedup on screen after a race, a
rejected draft's line break kept out of the code's layout. Screenshots go to artifacts/."""

from __future__ import annotations

import contextlib

import pytest

from tests.test_app_browser import ARTIFACTS, CHOSEN, CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, race_to_end, server, set_race

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


def test_after_a_race_the_whole_summary_is_on_a_phones_screen(phone):
    """The summary scrolled sideways with the speedup off-screen, then cut its place column and every one
    right of it at 390 px; a rejected draft's line break broke the code's layout."""
    set_race(phone, "def fibonacci(n):\n    if n < 2:\n        return n\n", CHOSEN, 24)
    race_to_end(phone)
    summary_fits(phone, list(CHOSEN))
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


# the texts of a Dataframe's body cells that run past their cell's right edge (gradio hides the overflow)
CUT_CELLS = """id => [...document.querySelectorAll(`#${id} [role=gridcell]`)].filter(cell => {
    const r = document.createRange(); r.selectNodeContents(cell);
    return [...r.getClientRects()].some(c => c.width > 0 && c.right > cell.getBoundingClientRect().right + 1);
}).map(cell => cell.innerText)"""


def test_the_why_tables_numbers_never_break_on_a_phone(phone):
    """Review fault 7: α and c wrapped one character a line ("0 / . / 8 / 4")."""
    phone.wait_for_selector("#sv-why table")  # after the race of the test above
    cells = [phone.locator("#sv-why td").nth(i) for i in range(phone.locator("#sv-why td").count())]
    numbers = [c.evaluate(LINES) for c in cells if c.inner_text().strip().rstrip("×").replace(".", "").isdigit()]
    assert len(numbers) >= 8 and all(lines == 1 for _, lines, _ in numbers), numbers


def test_pearls_and_discos_tables_fit_a_phone(phone):
    """Review fault 7: PEARL's step table wrapped its headers a letter a line ("a c c e p t e d"). Issue 38
    item 9: the "This prompt" tables scrolled sideways with most of their numbers off-screen; on a phone
    they are now pivoted (a row a figure, a column a method) and fit the screen."""
    from specviz.ui.disco import HEADERS
    from specviz.ui.pearl import ROW_COLUMNS

    phone.get_by_role("tab", name="PEARL: parallel drafting").click()
    for label, value in (("Window γ", "8"), ("Max new tokens", "24"), ("Timed runs", "1")):  # γ = 8: long drafts
        number = phone.locator(f"input[aria-label^='number input for {label}']").last
        number.fill(value)
        number.press("Enter")
    phone.get_by_role("button", name="Run the target alone, vanilla and PEARL").click()
    phone.wait_for_selector("#sv-pearl-steps [role=row][aria-rowindex='2']")
    heads = phone.locator("#sv-pearl-steps thead th .header")
    words = [heads.nth(i).evaluate(LINES) for i in range(heads.count())]
    assert len(words) == 7, words
    for text, lines, cut in words:  # each header whole, broken only between its words
        assert lines <= len(text.split()) and not cut, (text, lines, cut)
    cut = phone.evaluate(CUT_CELLS, "sv-pearl-steps")  # a draft without spaces ran past its cell's edge, hidden
    assert not cut, cut
    phone.locator("#sv-pearl-steps").screenshot(path=str(ARTIFACTS / "pearl_steps_390.png"))
    pivot_fits(phone, "sv-pearl", ROW_COLUMNS, 3)
    phone.get_by_role("tab", name="DISCO: dynamic speculation length").click()
    phone.get_by_role("button", name="Run DISCO vs oracle").click()
    pivot_fits(phone, "sv-disco", HEADERS, 4)
    phone.get_by_role("tab", name="Race").click()


def pivot_fits(page, name: str, columns: list[str], methods: int) -> None:
    """On a phone `#{name}-table` (a method a row) is hidden and `#{name}-pivot` shown: every figure of every
    method, within the screen, with no sideways scrolling and no word or number broken or cut."""
    pivot = page.locator(f"#{name}-pivot table")
    pivot.wait_for()
    assert not page.locator(f"#{name}-table").is_visible()
    pivot.scroll_into_view_if_needed()
    rows, cols, scroll, room, right = pivot.evaluate(
        """t => [t.rows.length, t.rows[0].cells.length, t.scrollWidth, t.closest('.sv-pivot').clientWidth,
                 t.getBoundingClientRect().right]"""
    )
    assert (rows, cols) == (len(columns), methods + 1)  # the header row, then a row a figure; a column a method
    assert scroll <= room and right <= PHONE["width"], (scroll, room, right)
    cells = pivot.locator("th, td")
    for i in range(cells.count()):
        text, lines, cut = cells.nth(i).evaluate(LINES)
        assert not cut and lines <= max(1, len(text.replace("-", " ").split())), (
            text,
            lines,
            cut,
        )  # at a hyphen is whole
    pivot.screenshot(path=str(ARTIFACTS / f"{name}_pivot_390.png"))


def test_the_leaderboard_reads_on_a_phone(phone):
    """Issue 38 item 9: at 390 px the heatmap squeezed nine methods by six columns into unreadable cells and
    its labels overlapped; the table broke its headers a letter a line. A phone shows one card a method
    instead: every figure on screen, in type no smaller than 12 px, best first as on a desktop."""
    from specviz.ui.leaderboard import BENCHMARK_CHOICES, leaderboard_view, machines

    _, table, _ = leaderboard_view(BENCHMARK_CHOICES[0], "speedup", machines()[0])
    phone.get_by_role("tab", name="Leaderboard").click()
    cards = phone.locator("#sv-leaderboard-phone .sv-lb-card")
    cards.first.wait_for()
    assert not phone.locator("#sv-leaderboard-plot").is_visible()
    assert not phone.locator("#sv-leaderboard-table").is_visible()
    names = [cards.nth(i).locator(".sv-lb-head > span").first.inner_text() for i in range(cards.count())]
    assert names == [f"{i}. {m}" for i, m in enumerate(table["method"], 1)]  # the desktop table's order
    heads = [cards.nth(i).locator(".sv-lb-head b").inner_text() for i in range(cards.count())]
    assert heads == [f"{v}×" for v in table[table.columns[1]]]  # each method's ranking figure, as in the table
    box = phone.locator("#sv-leaderboard-phone")
    scroll, room, right = box.evaluate(
        "e => { const c = e.querySelector('.sv-lb-phone'); return [c.scrollWidth, c.clientWidth,"
        " c.getBoundingClientRect().right]; }"
    )
    assert scroll <= room and right <= PHONE["width"], (scroll, room, right)
    smallest = box.evaluate(
        "e => Math.min(...[...e.querySelectorAll('.sv-lb-card *')].filter(n => n.childElementCount === 0)"
        ".map(n => parseFloat(getComputedStyle(n).fontSize)))"
    )
    assert smallest >= 12, smallest
    assert all("MBPP" in cards.nth(i).inner_text() for i in range(cards.count()))  # one run: every suite each
    phone.screenshot(path=str(ARTIFACTS / "leaderboard_390.png"), full_page=True)
    phone.locator("#sv-board-metric label", has_text="tokens per target pass").click()
    phone.wait_for_function(
        "() => !document.querySelector('#sv-leaderboard-phone .sv-lb-head b').innerText.includes('×')"
    )
    phone.get_by_role("tab", name="Race").click()


def test_the_theorys_roofline_table_fits_a_phone(phone):
    """Issue 38 item 9: at 390 px the roofline table scrolled sideways with its budget and knee columns
    off-screen (its cells kept on one line, the last one 10rem wide at least). Now every column is on
    screen: headers wrap between words, no number breaks or is cut."""
    import os
    from pathlib import Path

    shots = Path(os.environ.get("SPECVIZ_SHOTS", ARTIFACTS))
    shots.mkdir(parents=True, exist_ok=True)
    phone.get_by_role("tab", name="Theory").click()
    table = phone.locator("#sv-roofline-text table")
    table.wait_for()
    table.scroll_into_view_if_needed()
    scroll, client, right = table.evaluate("t => [t.scrollWidth, t.clientWidth, t.getBoundingClientRect().right]")
    assert scroll <= client + 1 and right <= PHONE["width"], (scroll, client, right)
    heads = [th.inner_text() for th in table.locator("th").all()]
    assert any(h.startswith("budget") for h in heads) and any(h.startswith("knee") for h in heads), heads
    cells = table.locator("th, td")
    for i in range(cells.count()):
        text, lines, cut = cells.nth(i).evaluate(LINES)
        assert not cut and lines <= max(1, len(text.split())), (text, lines, cut)  # words and numbers whole
    table.screenshot(path=str(shots / "theory_roofline_table_390.png"))
    phone.get_by_role("tab", name="Race").click()


def summary_fits(page, labels: list[str]) -> None:
    """On a phone the Race summary (a method a row, twelve columns) is hidden and shown pivoted: a column a
    method under a short name (the full one its tooltip), a few methods a table, each table a row a figure
    in the summary's order; every table within the screen, no word or number broken or cut."""
    from specviz.plots.summary import summary_table
    from specviz.ui.race import PHONE_METHODS, speedup_first

    columns = [c for c in speedup_first(summary_table({})).columns if c != "method"]
    tables = page.locator("#sv-summary-pivot table")
    tables.first.wait_for()
    assert not page.locator("#sv-summary").is_visible()
    shown = []
    for k in range(tables.count()):
        table = tables.nth(k)
        table.scroll_into_view_if_needed()
        heads = table.locator("thead th[title]")
        names = [heads.nth(i).get_attribute("title") for i in range(heads.count())]
        assert 1 <= len(names) <= PHONE_METHODS, names
        shown += names
        assert [th.inner_text() for th in table.locator("tbody th").all()] == columns
        scroll, room, right = table.evaluate(
            "t => [t.scrollWidth, t.closest('.sv-pivot').clientWidth, t.getBoundingClientRect().right]"
        )
        assert scroll <= room and right <= PHONE["width"], (k, scroll, room, right)
        cells = table.locator("th, td")
        for i in range(cells.count()):
            text, lines, cut = cells.nth(i).evaluate(LINES)
            assert not cut and lines <= max(1, len(text.replace("-", " ").split())), (text, lines, cut)
    assert sorted(shown) == sorted(labels)  # every method of the race, each once
    speedups = page.locator("#sv-summary-pivot tbody tr:first-child td")
    assert all(cell.inner_text().replace(".", "").isdigit() for cell in speedups.all()), speedups.all_inner_texts()
    page.locator("#sv-summary-pivot").screenshot(path=str(ARTIFACTS / f"summary_pivot_{len(labels)}_390.png"))


def test_a_race_of_every_method_keeps_its_summary_on_a_phones_screen(phone):
    """Issue 38 item 9: with every method ticked, a pivot of twelve methods side by side would give each a
    20-pixel column; a few methods a table, one table under another, keep every figure whole."""
    from specviz.ui.race import FAILED_NOTE, PHONE_METHODS

    phone.get_by_role("tab", name="Race").click()
    phone.get_by_role("button", name="All", exact=True).click()
    number = phone.locator("#sv-max-new input[type=number]")
    number.fill("12")
    number.press("Enter")
    boxes = phone.locator("#sv-methods label").all()
    ticked = [box.inner_text().strip() for box in boxes if box.locator("input").is_checked()]
    assert len(ticked) > 2 * PHONE_METHODS, ticked
    assert not [t for t in ticked if t.startswith("vLLM")], "All ticks specviz's own methods, no vLLM server"
    race_to_end(phone)  # this race's, not the last one's
    status = phone.locator("#sv-race-status").inner_text()
    failed = status.split(FAILED_NOTE + ": ")[1].split(".")[0].split(", ") if FAILED_NOTE in status else []
    summary_fits(phone, [label for label in ticked if label not in failed])


def test_the_step_throughs_distributions_read_on_a_phone(phone):
    """Issue 38 item 9: on a phone the distributions' title ran off the plot and its five panels a row were
    ~45 px each, their token labels on each other. The title fits the screen; the panels keep a desktop's
    width and the plot scrolls sideways, as the animated iteration does."""
    phone.wait_for_selector("#sv-race-status:has-text('Race finished')")  # the race of the test above
    step = phone.locator("#sv-step")
    step.locator("button:has-text('Step through one iteration')").click()
    phone.locator("#sv-step-method input").click()
    phone.get_by_role("option", name="Vanilla SD").click()
    phone.wait_for_function(
        "() => { const e = document.querySelector('#sv-step-plot .js-plotly-plot'); return e && e.data.length > 1; }"
    )
    plot = phone.locator("#sv-step-plot .js-plotly-plot")
    plot.scroll_into_view_if_needed()
    title = phone.locator("#sv-step-plot .gtitle").bounding_box()
    assert title and title["x"] >= 0 and title["x"] + title["width"] <= PHONE["width"], title
    panels = """e => Object.keys(e._fullLayout).filter(k => /^xaxis\\d*$/.test(k)).map(k => e._fullLayout[k]._length)"""
    for _ in range(12):  # an iteration with three panels or more (drafts tested, and the target's own token)
        if len(plot.evaluate(panels)) >= 3:
            break
        shown = phone.locator("#sv-step-view").inner_text()
        phone.click("#sv-step-next")
        phone.wait_for_function("s => document.querySelector('#sv-step-view').innerText !== s", arg=shown)
        phone.wait_for_timeout(500)  # the plot follows the explanation
    assert len(plot.evaluate(panels)) >= 3, plot.evaluate(panels)
    # each panel's plot area, in pixels: the style sheet widens the box once the panels are drawn, and the
    # plot redraws to the box (page.js); CI once read it before that redraw, at 29 px a panel
    wide = f"() => {{ const e = document.querySelector('#sv-step-plot .js-plotly-plot'); return ({panels})(e); }}"
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        phone.wait_for_function(f"() => Math.min(...({wide})()) >= 100", timeout=5000)
    widths = plot.evaluate(panels)
    assert min(widths) >= 100, widths
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]  # the page stays put
    phone.locator("#sv-step-plot").screenshot(path=str(ARTIFACTS / "step_distributions_390.png"))


def test_a_plot_redraws_when_its_box_widens_without_the_window(phone):
    """Plotly redraws on a window resize only; a box the style sheet widens (or a tab shows) left the plot at
    its old width until page.js watched each plot's box."""
    plot = phone.locator("#sv-step-plot .js-plotly-plot")
    before = plot.evaluate("e => e._fullLayout.width")
    plot.evaluate(f"e => {{ e.style.minWidth = '{before + 300}px'; }}")
    try:
        phone.wait_for_function(
            "w => document.querySelector('#sv-step-plot .js-plotly-plot')._fullLayout.width >= w", arg=before + 299
        )
    finally:
        plot.evaluate("e => { e.style.minWidth = ''; }")
