"""The app in a real browser (Playwright driving Debian's Chromium) and through gradio_client.

The server runs in this process on a free port with the offline tiny pairs. Chromium must be
installed (`make browser`): when it is missing these tests fail, they never skip.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser  # deselect locally with -m 'not browser'; CI runs every test

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHOSEN = {"Autoregressive": "autoregressive", "Vanilla SD": "vanilla", "Prompt lookup": "prompt_lookup"}
TIMEOUT_MS = 120_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    from specviz.ui import build_app, launch

    demo = build_app(pair="tiny-perturbed")  # random weights; a draft that agrees often but not always
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(server)
        page.wait_for_selector("#sv-pair-status:has-text('tiny')")
        yield page
        browser.close()


def set_race(page, prompt: str, methods: dict[str, str], max_new: int) -> None:
    page.locator("#sv-prompt textarea").fill(prompt)
    for box in page.locator("#sv-methods label").all():
        label = box.inner_text().strip()
        box.locator("input").set_checked(label in methods)
    number = page.locator("#sv-max-new input[type=number]")
    number.fill(str(max_new))
    number.press("Enter")


def test_race_shows_coloured_tokens_metrics_legend_and_toggles(page):
    page.wait_for_selector("#sv-plot-time .js-plotly-plot:has-text('Run a race to see this plot')")
    set_race(page, "def fibonacci(n):", CHOSEN, 24)
    page.click("#sv-run")
    page.wait_for_selector("#sv-race-status:has-text('Race finished')")
    panels = page.locator("#sv-board .sv-panel")
    assert panels.count() == 3
    assert [panels.nth(i).get_attribute("data-method") for i in range(3)] == list(CHOSEN.values())
    assert page.locator("#sv-board .sv-status.sv-done").count() == 3
    for kind in ("accepted", "rejected", "target"):
        assert page.locator(f"#sv-board .sv-tok.sv-{kind}").count() > 0, kind
    accepted = page.locator("#sv-board .sv-tok.sv-accepted").first
    assert accepted.evaluate("e => getComputedStyle(e).borderBottomStyle") == "solid"
    rejected = page.locator("#sv-board .sv-tok.sv-rejected").first
    assert "line-through" in rejected.evaluate("e => getComputedStyle(e).textDecorationLine")
    assert "p(target)" in rejected.get_attribute("title") and "min(1, p/q)" in rejected.get_attribute("title")
    legend = page.locator(".sv-legend")
    assert legend.locator(".sv-accepted").count() == legend.locator(".sv-target").count() == legend.locator(".sv-rejected").count() == 1
    # metrics: in each panel and in the summary table
    assert page.locator("#sv-board .sv-panel").first.locator(".sv-metric").count() == 6
    table = page.locator("#sv-summary").inner_text()
    for label in CHOSEN:
        assert label in table
    assert "speedup vs AR" in table
    # the rejected-token toggle
    toggle = page.locator("#sv-show-rejected input")
    toggle.set_checked(False)
    page.wait_for_function("() => document.body.classList.contains('sv-hide-rejected')")
    assert not rejected.is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "race_hidden_rejected.png"), full_page=True)
    toggle.set_checked(True)
    page.wait_for_function("() => !document.body.classList.contains('sv-hide-rejected')")
    assert rejected.is_visible()
    # the plots hold this race's data (before any race they are titled placeholders without traces)
    traces = "id => { const e = document.querySelector(`#sv-plot-${id} .js-plotly-plot`); return e && e.data ? e.data.length : -1; }"
    for plot, n in (("time", 3), ("acceptance", 2), ("histogram", 2), ("sl", 3)):
        page.wait_for_function(f"() => ({traces})('{plot}') === {n}")
    page.screenshot(path=str(ARTIFACTS / "race.png"), full_page=True)
    # replay: all finished runs restart on one clock, in the page
    page.click("#sv-replay")
    page.wait_for_selector("#sv-replay-track .sv-clock:has-text('Replay')")
    page.wait_for_function("() => document.querySelectorAll('#sv-replay-track .sv-finish').length === 3")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#sv-replay-track .sv-finish')].every(e => e.innerText.includes('finished'))"
    )
    assert page.locator("#sv-board .sv-future").count() == 0  # every token revealed at the end
    assert page.locator("#sv-replay-track .sv-finish").first.inner_text().split(":")[0] in ("1st", "2nd", "3rd")


def test_stop_ends_a_long_race(page):
    set_race(page, "Tell me a long story.", CHOSEN, 512)
    page.click("#sv-run")
    page.wait_for_selector("#sv-board .sv-status.sv-running")
    page.click("#sv-stop")
    page.wait_for_selector("#sv-race-status:has-text('Stopped')")
    statuses = page.locator("#sv-board .sv-status").all_inner_texts()
    assert statuses[0] == "stopped" and statuses[1:] == ["skipped", "skipped"]


def test_empty_prompt_shows_an_error_and_the_app_keeps_serving(page):
    set_race(page, "", CHOSEN, 8)
    page.click("#sv-run")
    page.wait_for_selector("text=/the prompt is empty/i")
    set_race(page, "hello", {"Autoregressive": "autoregressive"}, 4)
    page.click("#sv-run")
    page.wait_for_function(
        "() => document.querySelectorAll('#sv-board .sv-panel').length === 1 && "
        "document.querySelector('#sv-race-status').innerText.includes('Race finished')"
    )


def test_gradio_client_calls_race(server):
    from gradio_client import Client

    client = Client(server, verbose=False)
    status, track, placeholder, *rest = client.predict(
        "tiny-perturbed", "def add(a, b):", ["autoregressive", "vanilla"], 3, 12, 0.0, 1.0, 0, api_name="/race"
    )
    assert "Race finished" in status
    panels = [x for x in rest if isinstance(x, str) and "data-method" in x]
    assert [re.search(r'data-method="(\w+)"', p).group(1) for p in panels] == ["autoregressive", "vanilla"]
    table = next(x for x in rest if isinstance(x, dict) and "headers" in x)
    assert [row[0] for row in table["data"]] == ["Autoregressive", "Vanilla SD"]
    assert [row[1] for row in table["data"]] == [12, 12]
