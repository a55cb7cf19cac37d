"""The PEARL tab at 1440x900 in a real browser: a disturbed run is flagged above and in its table, and the
table's headers break between words only (beside the flagged, wider method column they broke "ms/toke n",
"step s", "token s")."""

from __future__ import annotations

import pytest

from tests import test_app_browser as app
from tests.test_phone_browser import LINES

pytestmark = pytest.mark.browser
server, page = app.server, app.page  # the app on the tiny pair, and Chromium on it (module fixtures)


def test_a_flagged_pearl_table_keeps_its_headers_words_whole(page, monkeypatch):
    from specviz.serving import compare
    from specviz.ui.panels import DISTURBED

    # every run flagged (the server runs in this process): the flags' look, whatever this machine's load
    monkeypatch.setattr(compare, "timing_flags", lambda race: {r.name: ["a test's load"] for r in race.runs})
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="PEARL: parallel drafting").click()
    for label, value in (("Max new tokens", "16"), ("Timed runs", "1")):
        number = page.locator(f"input[aria-label^='number input for {label}']").last
        number.fill(value)
        number.press("Enter")
    page.get_by_role("button", name="Run the target alone, vanilla and PEARL").click()
    rows = app.table_rows(page, "sv-pearl-table", 3)
    assert all(row[0].endswith("⚠️") for row in rows), rows
    assert DISTURBED in page.locator("#sv-pearl-status").inner_text()
    heads = page.locator("#sv-pearl-table thead th .header")
    words = [heads.nth(i).evaluate(LINES) for i in range(heads.count())]
    assert len(words) == 9, words
    for text, lines, cut in words:  # "ms/token" on one line, not "ms/toke" over "n"
        assert lines <= len(text.replace("-", " ").split()) and not cut, (text, lines, cut)
    assert page.locator("#sv-pearl-table").evaluate("t => t.scrollWidth <= t.clientWidth + 1")  # every column
    page.locator("#sv-pearl-table").screenshot(path=str(app.ARTIFACTS / "pearl_table_1440.png"))
