"""The app in a real browser (Playwright driving Debian's Chromium) and through gradio_client.

The server runs in this process on a free port with the offline tiny pairs. Chromium must be
installed (`make browser`): when it is missing these tests fail, they never skip.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from specviz.tools.load import free_port

pytestmark = pytest.mark.browser  # deselect locally with -m 'not browser'; CI runs every test

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHOSEN = {"Autoregressive": "autoregressive", "Vanilla SD": "vanilla", "Prompt lookup": "prompt_lookup"}
TIMEOUT_MS = 120_000


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


def race_to_end(page) -> None:
    """Press Run race and wait until this race has finished: until its first update the status line still
    says the last race's "Race finished" (a test that waited for that text alone stepped through the last
    race's runs, CI and a loaded local run, 2026-12-03)."""
    page.click("#sv-run")
    page.wait_for_function("() => !document.querySelector('#sv-race-status').innerText.includes('Race finished')")
    page.wait_for_selector("#sv-race-status:has-text('Race finished')")


def set_option(page, method: str, label: str, value: str) -> None:
    """Types `value` into `method`'s `label` box of the options accordion and leaves the box, then waits
    until the slider holds it: the box's change reaches the race's options a tick later, and a Run race
    pressed at once under load raced the old value (CI, 2026-12-03)."""
    group = page.locator(f"#sv-options-{method}")
    if not page.locator("#sv-method-options button.label-wrap.open").count():
        page.click("#sv-method-options")  # the accordion
    box = group.get_by_label(f"number input for {label}", exact=True)
    box.wait_for(state="visible")  # a ticked method's column shows after a round trip
    box.fill(value)
    box.press("Tab")
    page.wait_for_function(
        "([id, label, v]) => document.querySelector(`#${id} input[aria-label='range slider for ${label}']`)"
        "?.value === v",
        arg=[f"sv-options-{method}", label, value],
    )
    page.wait_for_timeout(300)


def test_a_newcomer_sees_the_prompt_and_run_race_without_scrolling(page):
    """At 1440x900, the first screen holds the prompt, Run race and the methods (Run race was below the fold)."""
    page.set_viewport_size({"width": 1440, "height": 900})
    try:
        page.evaluate("() => window.scrollTo(0, 0)")
        page.wait_for_function("() => window.scrollY === 0")
        for element, whole in (
            ("#sv-prompt textarea", True),
            ("#sv-run", True),
            ("#sv-stop", True),
            ("#sv-methods", False),
        ):
            box = page.locator(element).bounding_box()
            assert box and box["y"] >= 0 and box["y"] + (box["height"] if whole else 40) <= 900, (element, box)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "race_first_screen_1440.png"))
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})


def test_max_new_tokens_out_of_range_is_said_not_silently_changed(page):
    """Issue 38: typing 0 in the Max new tokens box raced 1 token without a word (gradio's slider sets a
    number outside its range to the nearest bound); the page says the bound now."""
    number = page.locator("#sv-max-new input[type=number]")
    try:
        for typed in ("0", "600"):
            number.fill(typed)
            number.press("Tab")  # leaving the box (or pressing Run race) is when the slider takes the number
            page.wait_for_selector(f".toast-body:has-text('must be from 1 to 512, got {typed}')")
            assert number.input_value() == ("1" if typed == "0" else "512")  # set to the bound, and said
        page.locator("#sv-max-new").screenshot(path=str(ARTIFACTS / "max_new_bound.png"))
        page.screenshot(path=str(ARTIFACTS / "max_new_bound_page.png"))
    finally:
        for close in page.locator(".toast-body .toast-close").all():
            close.click()
        number.fill("24")
        number.press("Enter")


def test_race_shows_coloured_tokens_metrics_legend_and_toggles(page):
    page.wait_for_selector("#sv-plot-time .js-plotly-plot:has-text('Run a race to see this plot')")
    set_race(page, "def fibonacci(n):", CHOSEN, 24)
    race_to_end(page)
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
    assert "p(target)" in rejected.get_attribute("data-tip") and "rule (greedy)" in rejected.get_attribute("data-tip")
    rejected.hover()  # the page's tooltip (also on focus and on a tap): the rule that decided, as applied
    page.wait_for_selector(".sv-tip:not([hidden]):has-text('rule (greedy)')")
    legend = page.locator(".sv-legend")
    assert (
        legend.locator(".sv-accepted").count()
        == legend.locator(".sv-target").count()
        == legend.locator(".sv-rejected:not(.sv-untested)").count()
        == legend.locator(".sv-untested").count()
        == 1
    )
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
    traces = (
        "id => { const e = document.querySelector(`#sv-plot-${id} .js-plotly-plot`); "
        "return e && e.data ? e.data.length : -1; }"
    )
    for plot, n in (("time", 3), ("acceptance", 2), ("histogram", 2), ("sl", 3)):
        page.wait_for_function(f"() => ({traces})('{plot}') === {n}")
    page.screenshot(path=str(ARTIFACTS / "race.png"), full_page=True)
    # replay: all finished runs restart on one clock, in the page
    page.click("#sv-replay")
    page.wait_for_selector("#sv-replay-track .sv-clock:has-text('Replay')")
    page.wait_for_function("() => document.querySelectorAll('#sv-replay-track .sv-finish').length === 3")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#sv-replay-track .sv-finish')].every(e => "
        "e.innerText.includes('finished'))"
    )
    assert page.locator("#sv-board .sv-future").count() == 0  # every token revealed at the end
    assert page.locator("#sv-replay-track .sv-finish").first.inner_text().split(":")[0] in ("1st", "2nd", "3rd")


def test_stop_ends_a_long_race(page):
    set_race(page, "Tell me a long story.", CHOSEN, 512)
    page.click("#sv-run")
    page.wait_for_selector("#sv-board .sv-status.sv-running")
    page.click("#sv-stop")
    page.wait_for_selector("#sv-race-status:has-text('Stopped')")
    with contextlib.suppress(PlaywrightTimeout):  # the panels may be drawn a moment after the status line
        page.wait_for_function(
            "() => [...document.querySelectorAll('#sv-board .sv-status')].map(e => e.innerText.trim()).join()"
            " === 'stopped,skipped,skipped'",
            timeout=10_000,
        )
    statuses = page.locator("#sv-board .sv-status").all_inner_texts()
    assert statuses[0] == "stopped" and statuses[1:] == ["skipped", "skipped"], statuses


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
    status, _track, _placeholder, *rest = client.predict(
        "tiny-perturbed",
        "def add(a, b):",
        ["autoregressive", "vanilla"],
        {"vanilla.speculation_length": 3},
        12,
        0.0,
        1.0,
        0,
        api_name="/race",
    )
    assert "Race finished" in status
    panels = [x for x in rest if isinstance(x, str) and "data-method" in x]
    assert [re.search(r'data-method="(\w+)"', p).group(1) for p in panels] == ["autoregressive", "vanilla"]
    table = next(x for x in rest if isinstance(x, dict) and "headers" in x)
    assert sorted(row[0] for row in table["data"]) == ["Autoregressive", "Vanilla SD"]  # fastest first
    assert [row[3] for row in table["data"]] == [12, 12]  # after method, speedup and place


def test_a_saved_race_loads_and_replays_without_its_model(page, perturbed_pair, tmp_path):
    """A race recorded elsewhere (here: a pair this page does not have) is shown from its file."""
    import json
    import threading

    from specviz.serving.racing import RaceSettings, run_race
    from specviz.serving.saved import race_to_dict

    *_, race = run_race(
        perturbed_pair,
        RaceSettings("def add(a, b):", ("autoregressive", "vanilla"), max_new_tokens=20),
        {},
        threading.Event(),
    )
    data = race_to_dict(race) | {"pair": "Vicuna-7B / EAGLE on an A100 (recorded elsewhere)"}
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(data))
    page.set_input_files("#sv-load-race input[type=file]", str(path))
    page.wait_for_selector("#sv-race-status:has-text('Loaded a saved race')")
    assert "recorded elsewhere" in page.locator("#sv-race-status").inner_text()
    page.wait_for_function("() => document.querySelectorAll('#sv-board .sv-panel').length === 2")
    panels = page.locator("#sv-board .sv-panel")
    assert [panels.nth(i).get_attribute("data-method") for i in range(2)] == ["autoregressive", "vanilla"]
    assert [int(panels.nth(i).get_attribute("data-tokens")) for i in range(2)] == [20, 20]
    assert page.locator("#sv-board .sv-tok.sv-accepted").count() == sum(r.accepted for r in race.runs[1].records)
    assert "Vanilla SD" in page.locator("#sv-why").inner_text()
    page.click("#sv-replay")
    page.wait_for_function("() => document.querySelectorAll('#sv-replay-track .sv-finish').length === 2")


def test_step_through_shows_each_drafts_test_with_the_runs_values(page, perturbed_pair, tmp_path):
    import json
    import threading

    from specviz.serving.racing import RaceSettings, run_race
    from specviz.serving.saved import race_to_dict

    settings = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla"), max_new_tokens=24)
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(race_to_dict(race)))  # the page's own pair: the step-through reruns the models
    page.set_input_files("#sv-load-race input[type=file]", str(path))
    page.wait_for_selector("#sv-race-status:has-text('Loaded a saved race')")
    page.click("#sv-step button:has-text('Step through one iteration')")
    page.locator("#sv-step-method input").click()
    page.get_by_role("option", name="Vanilla SD").click()
    records = race.runs[1].records
    for i in (0, 1):
        page.wait_for_selector(f"#sv-step-view:has-text('Vanilla SD, iteration {i + 1} of {len(records)}')")
        rows = page.locator("#sv-step-view .sv-step-table tbody tr")
        assert rows.count() == len(records[i].drafted)
        shown = [rows.nth(j).locator("td").nth(2).inner_text() for j in range(rows.count())]
        assert shown == [f"{p:.3g}" for p in records[i].p_target]  # three significant digits
        assert f"Accepted {records[i].accepted} of" in page.locator("#sv-step-view").inner_text()
        assert "the recomputed p(x)" in page.locator("#sv-step-view").inner_text()
        page.wait_for_function(
            "() => { const e = document.querySelector('#sv-step-plot .js-plotly-plot'); "
            "return e && e.data && e.data.length > 1; }"
        )
        if i == 0:
            page.click("#sv-step-next")
    page.click("#sv-step-view .sv-step-view")  # a click in the explanation gives the section the keys
    page.keyboard.press("ArrowLeft")  # the keys step too
    page.wait_for_selector(f"#sv-step-view:has-text('iteration 1 of {len(records)}')")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#sv-step").screenshot(path=str(ARTIFACTS / "step_through.png"))


def _overlap(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return False
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("width", [1440, 390])
def test_plot_titles_are_not_covered_at_desktop_and_phone_widths(page, width):
    """No label chip or legend over a plot's title (the race's plots hold data from the tests above)."""
    page.set_viewport_size({"width": width, "height": 900})
    try:
        tabs = page.get_by_role("tab")
        assert tabs.count() >= 7 and all(
            tabs.nth(i).is_visible() for i in range(tabs.count())
        )  # none behind a "…" menu
        for plot in ("time", "acceptance", "histogram", "sl"):
            block = page.locator(f"#sv-plot-{plot}")
            block.scroll_into_view_if_needed()
            title = block.locator(".gtitle").first.bounding_box()
            assert title, plot
            covers = [
                block.locator("[data-testid='block-label']"),
                block.locator(".legend"),
                block.locator(".modebar-container:visible"),
            ]
            for loc in covers:
                for i in range(loc.count()):
                    assert not _overlap(title, loc.nth(i).bounding_box()), (plot, width)
        page.screenshot(path=str(ARTIFACTS / f"race_plots_{width}.png"), full_page=True)
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})


def test_a_prompt_file_of_ones_own_becomes_the_examples(page, tmp_path):
    mine = tmp_path / "lecture.txt"
    mine.write_text("Explain a KV cache in one sentence.\nWrite a haiku about drafts.\n")
    page.click("text=Your own prompts")
    page.set_input_files("#sv-prompt-file input[type=file]", str(mine))
    page.wait_for_function(
        "() => document.querySelector('#sv-prompt textarea').value === 'Explain a KV cache in one sentence.'"
    )
    page.get_by_label("Example", exact=True).click()
    page.get_by_role("option", name="2: Write a haiku about drafts.").click()
    page.wait_for_function(
        "() => document.querySelector('#sv-prompt textarea').value === 'Write a haiku about drafts.'"
    )


def test_each_ticked_method_shows_its_own_options_and_runs_with_them(page):
    set_race(page, "def add(a, b):", {"Autoregressive": 1, "Vanilla SD": 1, "DISCO": 1}, 12)
    page.click("#sv-method-options")  # the accordion
    group = page.locator("#sv-method-options .block:has-text('Vanilla SD')").first
    slider = page.locator("#sv-options-vanilla").get_by_label("number input for speculation_length")
    slider.wait_for(state="visible")  # the accordion opens and the ticked methods' columns show after a round trip
    assert slider.is_visible() and slider.input_value() == "4"  # vanilla's default γ
    assert not page.locator("#sv-method-options").get_by_text("SSSD (n-gram tree)").is_visible()  # SSSD is not ticked
    assert group.is_visible()
    set_option(page, "vanilla", "speculation_length", "2")
    race_to_end(page)
    vanilla = page.locator("#sv-board .sv-panel[data-method=vanilla] .sv-paper")
    assert "speculation_length = 2" in vanilla.inner_text()
    assert (
        "speculation_length"
        not in page.locator("#sv-board .sv-panel[data-method=autoregressive] .sv-paper").inner_text()
    )
    disco = page.locator("#sv-board .sv-panel[data-method=disco]")  # its empty boxes: the tuned τ and SL_max
    assert "sv-done" in disco.get_attribute("class")
    tuned = disco.locator(".sv-paper").inner_text()  # the values it ran with, named as defaults (issue 38)
    assert re.search(r"threshold = [0-9.]+ \(tuned for this pair, the default\)", tuned), tuned
    assert re.search(r"max_speculation_length = \d+ \(tuned for this pair, the default\)", tuned), tuned
    assert "speculation_length = 2 (default)" not in vanilla.inner_text()  # a changed option is not a default


# Issue 38: the race tells the truth. The checks below share one race (`raced`) and two saved races.
TIPS = "sel => [...document.querySelectorAll(sel)].map(e => e.dataset.tip)"
# a Dataframe's rows as the page shows them (gradio draws its body as rows of cells, not <td>s)
ROWS = (
    "id => [...document.querySelectorAll(`#${id} [role=row]`)].filter(r => r.getAttribute('aria-rowindex') > 1)"
    ".map(r => [...r.children].map(c => c.innerText.trim()))"
)


def table_rows(page, elem_id: str, count: int) -> list[list[str]]:
    """The cells of a Dataframe's `count` rows, once they are drawn."""
    page.wait_for_function(
        f"id => {{ const r = ({ROWS})(id); return r.length === {count} && r[0][0] !== ''; }}", arg=elem_id
    )
    return page.evaluate(ROWS, elem_id)


ISSUE_38 = {"Autoregressive": "autoregressive", "Vanilla SD": "vanilla", "Prompt lookup": "prompt_lookup"}


@pytest.fixture(scope="module")
def raced(page):
    """One race of three methods on the tiny pair (its drafts have rejections with untested tokens after them)."""
    set_race(page, "def fibonacci(n):", ISSUE_38, 24)
    page.click("#sv-run")
    page.wait_for_function(  # this race's board (the page may still show an earlier race's status)
        "names => { const p = [...document.querySelectorAll('#sv-board .sv-panel')];"
        " return p.map(e => e.dataset.method).join() === names.join()"
        " && p.every(e => e.classList.contains('sv-done')); }",
        arg=list(ISSUE_38.values()),
    )
    page.wait_for_selector("#sv-race-status:has-text('Race finished')")
    return page


def test_drafts_after_a_rejection_are_shown_untested_with_their_own_text(raced):
    """Item 1: only the first refused draft of an iteration was tested; the board called the ones after it
    'rejected ... it is not the target's most likely token' and drew them zero-width."""
    groups = raced.evaluate(
        "() => [...document.querySelectorAll('#sv-board .sv-rejgroup')].map(g => [...g.children].map(e => "
        "({untested: e.classList.contains('sv-untested'), tip: e.dataset.tip, text: e.innerText})))"
    )
    assert any(len(g) > 1 for g in groups), groups  # this race has drafts after a rejection
    for group in groups:
        first, *after = group
        assert first["untested"] or "rejected by the target" in first["tip"]
        for token in after:
            assert token["untested"] and "untested" in token["tip"] and "without a test" in token["tip"]
            assert "rejected by the target" not in token["tip"] and "it is not" not in token["tip"]
        for token in group:  # each with its own text, none zero-width with a note of another's character
            assert token["text"] not in ("", "\u200b") and "completes the next token" not in token["tip"]
    untested = raced.locator("#sv-board .sv-untested").first
    untested.scroll_into_view_if_needed()
    untested.hover()
    raced.wait_for_selector(".sv-tip:not([hidden]):has-text('dropped without a test')")
    assert float(untested.evaluate("e => getComputedStyle(e).opacity")) < 0.55  # drawn faded
    ARTIFACTS.mkdir(exist_ok=True)
    raced.screenshot(path=str(ARTIFACTS / "race_untested_tip_1440.png"))


def test_iterations_count_from_one_on_the_board_the_plots_and_the_step_through(raced):
    """Item 4: the step-through counted from 1, its plot title and the tooltips from 0."""
    tips = raced.evaluate(TIPS, "#sv-board .sv-tok")
    numbers = [int(re.match(r"iteration (\d+):", t).group(1)) for t in tips]
    assert min(numbers) == 1
    for plot in ("acceptance", "sl"):
        xs = raced.evaluate(
            f"() => document.querySelector('#sv-plot-{plot} .js-plotly-plot')._fullData.flatMap(t => "
            "Array.from(t.x || []))"
        )
        assert min(xs) == 1, plot
    if not raced.locator("#sv-step-method input").is_visible():  # an earlier test may have opened it
        raced.click("#sv-step button:has-text('Step through one iteration')")
    raced.locator("#sv-step-method input").click()
    raced.get_by_role("option", name="Vanilla SD").click()
    raced.wait_for_selector("#sv-step-view:has-text('Vanilla SD, iteration 1 of')")
    raced.wait_for_function(
        "() => { const e = document.querySelector('#sv-step-plot .js-plotly-plot');"
        " return e && e.layout && e.layout.title.text.includes('iteration 1 of'); }"
    )
    assert "within 0.0e+00" not in raced.locator("#sv-step-view").inner_text()


def test_one_name_per_metric_and_the_formula_marked_as_predicted(raced):
    """Item 3: 'acceptance' meant accepted ÷ drafted on the panels and α in the why table; the reading
    stated the formula's tokens per iteration as if measured."""
    labels = raced.evaluate(
        "() => [...document.querySelectorAll('#sv-board .sv-metric span')].map(e => e.innerText.toLowerCase())"
    )
    assert "accepted ÷ drafted" in labels and "tokens per target pass" in labels and "acceptance" not in labels
    headers = raced.locator("#sv-summary thead").inner_text()
    for name in ("α (accepted ÷ tested)", "acceptance rate (%)", "tokens per target pass"):
        assert " ".join(name.split()) in " ".join(headers.split()), name
    if not raced.locator("#sv-term-alpha").is_visible():
        raced.click("#sv-glossary button:has-text('What the numbers mean')")
    raced.wait_for_selector("#sv-term-alpha")
    terms = raced.locator("#sv-glossary dt").all_inner_texts()
    assert sum("α" in t for t in terms) == 1 and any("accepted ÷ drafted" in t for t in terms)
    assert raced.locator("#sv-why tbody tr").count() == 2
    readings = raced.locator("#sv-why li")
    assert readings.count() == 2
    for i in range(2):  # the formula's tokens labelled predicted, beside the measured ones (or the run flagged)
        reading = readings.nth(i).inner_text()
        assert ("predicted by the formula" in reading and "measured" in reading) or "timing disturbed" in reading


def test_a_metrics_glossary_link_opens_the_collapsed_glossary(raced):
    """Item 8: the panels' metric labels link to the glossary, which did nothing while it was collapsed."""
    if raced.locator("#sv-term-acceptance").is_visible():  # an earlier check opened it: close it
        raced.click("#sv-glossary button:has-text('What the numbers mean')")
        raced.wait_for_selector("#sv-term-acceptance", state="hidden")
    raced.locator("#sv-board .sv-panel[data-method=vanilla] a[href='#sv-term-acceptance']").click()
    entry = raced.locator("#sv-term-acceptance")
    entry.wait_for(state="visible")
    raced.wait_for_function(
        "() => { const b = document.getElementById('sv-term-acceptance').getBoundingClientRect();"
        " return b.top >= 0 && b.bottom <= window.innerHeight; }"
    )
    assert "accepted ÷ drafted" in entry.inner_text()


def _saved_race(pair, tmp_path, name: str, scale: dict[str, float]) -> str:
    """A race of the tiny pair saved with a quiet machine's timings (test_ui_race.timed_race), each
    method's scaled by `scale` (a run disturbed by other load)."""
    import json

    from test_ui_race import timed_race

    from specviz.serving.saved import race_to_dict

    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(race_to_dict(timed_race(pair, scale))))
    return str(path)


def test_a_verdict_after_every_race_and_disturbed_timing_flagged(page, perturbed_pair, tmp_path):
    """Items 10 and 2: the summary fastest first with the winner marked, one sentence per method, the
    winner in the status line; a run whose timing is impossible is flagged on its panel, not explained."""
    page.set_input_files("#sv-load-race input[type=file]", _saved_race(perturbed_pair, tmp_path, "clean", {}))
    page.wait_for_selector("#sv-race-status:has-text('Loaded a saved race')")
    page.wait_for_selector("#sv-verdict:has-text('Verdict')")
    rows = table_rows(page, "sv-summary", 3)
    speedups = [float(r[1]) for r in rows]
    assert len(rows) == 3 and speedups == sorted(speedups, reverse=True) and rows[0][2] == "★ fastest"
    verdict = page.locator("#sv-verdict")
    items = verdict.locator("li").all_inner_texts()
    assert [i.split(" ")[0] for i in items] == [r[0].split(" ")[0] for r in rows]  # one line per method, same order
    assert verdict.locator("strong").first.inner_text().startswith("Verdict:")
    assert all("by these counts" in i or "baseline" in i for i in items)
    assert page.locator("#sv-board .sv-flag").count() == 0
    page.set_viewport_size({"width": 1440, "height": 900})  # the summary's last column, "stop", was cut off here
    try:
        page.locator("#sv-summary").scroll_into_view_if_needed()
        page.wait_for_timeout(500)  # the table redraws its columns for the new width
        fits = page.evaluate(
            "() => { const t = document.querySelector('#sv-summary [role=grid]');"
            " const body = t.querySelector('.virtual-table-viewport') || t; const b = body.getBoundingClientRect();"
            " const stop = [...t.querySelectorAll('[role=columnheader]')].find(c => c.innerText.trim() === 'stop');"
            " const cell = [...t.querySelectorAll('[role=row]')].at(-1).lastElementChild.getBoundingClientRect();"
            " return {scroll: body.scrollWidth - body.clientWidth, stop: stop.getBoundingClientRect().right - b.right,"
            " cell: cell.right - b.right}; }"
        )
        assert fits["scroll"] <= 1 and fits["stop"] <= 1 and fits["cell"] <= 1, fits
        page.locator("#sv-summary").screenshot(path=str(ARTIFACTS / "summary_1440.png"))
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})
    page.set_input_files(
        "#sv-load-race input[type=file]", _saved_race(perturbed_pair, tmp_path, "loaded", {"prompt_lookup": 0.4})
    )
    page.wait_for_selector("#sv-board .sv-flag")
    flags = page.locator("#sv-board .sv-flag")
    assert flags.count() == 1 and "timing disturbed by other load: re-run" in flags.first.inner_text()
    assert page.locator("#sv-board .sv-panel[data-method=prompt_lookup] .sv-flag").count() == 1
    assert "Prompt lookup" not in page.locator("#sv-verdict strong").first.inner_text()
    assert "timing disturbed" in page.locator("#sv-why").inner_text()
    page.locator("#sv-board").screenshot(path=str(ARTIFACTS / "race_disturbed_flag.png"))


def test_the_pearl_tab_races_pearl_within_the_limit_against_the_target_alone(page, server):
    """Item 5: γ at most 16 (and refused above), a target-alone row, vanilla at its own default γ, whitespace
    tokens visible, and the table fits the page at 1440 px."""
    from gradio_client import Client

    page.set_viewport_size({"width": 1440, "height": 900})
    try:
        page.get_by_role("tab", name="PEARL: parallel drafting").click()
        slider = page.get_by_label("number input for Window γ, at most 16 (0: round(T_target / T_draft), measured)")
        assert slider.get_attribute("max") == "16"
        slider.fill("16")  # the longest drafts: the tables must still fit
        slider.press("Enter")
        number = page.locator("input[aria-label^='number input for Max new tokens']").last
        number.fill("32")
        number.press("Enter")
        runs = page.locator("input[aria-label^='number input for Timed runs']")
        runs.fill("1")
        runs.press("Enter")
        page.get_by_role("button", name="Run the target alone, vanilla and PEARL").click()
        methods = [row[0].removesuffix(" ⚠️") for row in table_rows(page, "sv-pearl-table", 3)]  # ⚠️: timing disturbed
        assert methods == ["target alone", "vanilla (γ=4, its default)", "PEARL (γ=16)"]
        steps = page.evaluate(ROWS, "sv-pearl-steps")
        assert steps and all(cell for row in steps for cell in row)  # no blank cell: a space is ·, a line break ⏎
        for table in ("#sv-pearl-table", "#sv-pearl-steps"):  # no column cut off at the right
            fits = page.evaluate(
                f"() => {{ const t = document.querySelector('{table} [role=grid]');"
                " const b = t.getBoundingClientRect(); const body = t.querySelector('.virtual-table-viewport') || t;"
                " return b.right <= window.innerWidth && body.scrollWidth <= body.clientWidth + 1; }"
            )
            assert fits, table
        page.screenshot(path=str(ARTIFACTS / "pearl_1440.png"), full_page=True)
    finally:
        page.get_by_role("tab", name="Race").click()
        page.set_viewport_size({"width": 1500, "height": 1100})
    client = Client(server, verbose=False)
    with pytest.raises(Exception, match="at most 16"):
        client.predict("tiny-perturbed", "def f(x):", 23, False, 8, 1, api_name="/pearl")


def test_html_in_a_saved_race_is_shown_as_text_never_as_elements(page, perturbed_pair, tmp_path):
    """Issue 53 item 11: a run label `<img src=x onerror=alert(4)>` put three <img> elements on the page
    (the Verdict and Why panels). Every text of a saved race reaches the page as text: the board, the
    verdict, the why table, the summary table, the method dropdowns and the plots."""
    import json

    from test_ui_race import timed_race

    from specviz.serving.saved import race_to_dict

    hostile = "<img src=x onerror=alert(4)>"
    data = race_to_dict(timed_race(perturbed_pair, {}))
    for run in data["runs"]:
        run["label"] = f"{hostile} {run['label']}"
        run["note"] = f"<b>{hostile}</b>"
    data["pair"] = f"**{hostile}**"
    path = tmp_path / "hostile_labels.json"
    path.write_text(json.dumps(data))
    page.set_input_files("#sv-load-race input[type=file]", str(path))
    page.wait_for_selector("#sv-race-status:has-text('Loaded a saved race')")
    page.wait_for_function(  # this race's verdict, not an earlier test's
        "text => document.querySelector('#sv-verdict').innerText.includes(text)", arg=hostile
    )
    page.wait_for_selector("#sv-why table")
    assert page.locator("img[src='x']").count() == 0
    assert hostile in page.locator("#sv-verdict").inner_text()  # shown, as text
    assert hostile in page.locator("#sv-why").inner_text()
    assert hostile in page.locator("#sv-race-status").inner_text()
    page.screenshot(path=str(ARTIFACTS / "hostile_labels.png"), full_page=True)
