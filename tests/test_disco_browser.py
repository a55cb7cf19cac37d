"""The DISCO and Online-learning tabs in a real browser (issue 38 items 3, 6 and 8): one name per
metric, SL-opt said, a default stream that can show learning. The tiny pair: layout and names only
(the default pair's learning is measured in benchmarks/osd/README.md)."""

from __future__ import annotations

import pytest

from tests import test_app_browser as app

pytestmark = pytest.mark.browser
server, page = app.server, app.page  # the app on the tiny pair, and Chromium on it (module fixtures)


def test_the_disco_table_names_alpha_and_the_acceptance_rate_and_says_what_sl_opt_is(page):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="DISCO: dynamic speculation length").click()
    page.get_by_role("button", name="Run DISCO vs oracle").click()
    page.wait_for_selector("text=SL-opt (best fixed speculation length) =")
    headers = page.locator("#sv-disco-table thead").inner_text()
    assert "α (accepted ÷ tested)" in headers and "acceptance rate (%)" in headers
    rows = app.table_rows(page, "sv-disco-table", 4)
    assert [r[0] for r in rows][2].startswith("SL-opt =") and "best fixed length" in rows[2][0]
    table = page.locator("#sv-disco-table")
    assert table.evaluate("t => t.scrollWidth <= t.clientWidth + 1")  # every column on a 1440 px page
    assert not page.locator("#sv-disco-pivot").is_visible()  # the phone's pivoted copy stays hidden


def test_the_online_tab_starts_on_a_repeating_translation_stream(page):
    page.get_by_role("tab", name="Online learning").click()
    suites = page.get_by_label("translation")
    suites.wait_for()
    assert suites.is_checked() and not page.get_by_label("gsm8k").is_checked()
    page.get_by_role("button", name="Serve the stream").click()
    page.wait_for_selector("text=12 / 12 requests served")
    summary = page.locator("text=12 / 12 requests served").locator("xpath=..").inner_text()
    assert "α (accepted ÷ tested)" in summary and "3 updates" in summary
