"""The Leaderboard's columns lead to a race one can watch: a shipped saved race of one of the column's
prompts, loaded onto the Race tab by its own loader; no offer where none is shipped."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from specviz.leaderboard import BENCHMARK_OF, SUITES_BENCHMARK, race_file, read_run
from specviz.tools.shipped_races import ShippedPrompt, record_shipped

SHOTS = Path("/tmp/shots-Q2")
METHODS = ("autoregressive", "vanilla", "prompt_lookup")


@pytest.fixture
def races(perturbed_pair, tmp_path, monkeypatch):
    """A races folder with one tiny race, for HumanEval only, in place of assets/races."""
    monkeypatch.setattr("specviz.serving.timing.timing_flags", lambda race: {})
    prompt = ShippedPrompt(SUITES_BENCHMARK, "HumanEval", "HumanEval/0", "def fib(n):", 12)
    record_shipped(perturbed_pair, [prompt], METHODS, tmp_path, log=lambda line: None)
    monkeypatch.undo()
    monkeypatch.setattr("specviz.leaderboard.RACES", tmp_path)
    return tmp_path


def test_only_columns_with_a_shipped_race_are_offered(races):
    from specviz.ui.leaderboard import watchable

    assert watchable(SUITES_BENCHMARK) == ["HumanEval"]
    assert watchable(BENCHMARK_OF["specbench"]) == []


def test_a_cell_of_a_column_with_a_shipped_race_says_where_to_watch_it(races):
    from specviz.plots.leaderboard import WATCH_HINT
    from specviz.ui.leaderboard import leaderboard_view, machines

    heat = leaderboard_view(SUITES_BENCHMARK, "speedup", machines()[0])[0].data[0]
    humaneval, gsm8k = list(heat.x).index("HumanEval"), list(heat.x).index("GSM8K")
    vanilla = list(heat.y).index("Vanilla SD")
    assert WATCH_HINT in heat.hovertext[vanilla][humaneval] and WATCH_HINT not in heat.hovertext[vanilla][gsm8k]


def test_only_a_method_the_shipped_race_holds_is_offered_its_race(races):
    """The tiny race holds the target alone, vanilla and prompt lookup: DISCO's HumanEval cell leads to no
    DISCO panel, so it offers nothing."""
    from specviz.plots.leaderboard import WATCH_HINT
    from specviz.ui.leaderboard import leaderboard_view, machines

    heat = leaderboard_view(SUITES_BENCHMARK, "speedup", machines()[0])[0].data[0]
    humaneval = list(heat.x).index("HumanEval")
    disco = list(heat.y).index("DISCO")
    assert "not measured" not in heat.hovertext[disco][humaneval]
    assert WATCH_HINT not in heat.hovertext[disco][humaneval]


def test_the_watch_row_names_the_methods_a_race_holds_and_those_it_lacks(races):
    """A column's race holds the methods it was recorded with, not every row of the leaderboard: the offer
    says which (Speculative Streaming's cells lead to a race with no Streaming panel)."""
    from specviz.ui.leaderboard import watch_info, watch_update

    info = watch_info(SUITES_BENCHMARK)
    raced, lacking = info.split(" Not in it: ")
    assert raced.endswith("by Autoregressive, Vanilla SD, Prompt lookup.")
    assert "Speculative Streaming" in lacking and "DISCO" in lacking and "Vanilla SD" not in lacking
    assert watch_update(SUITES_BENCHMARK)[1]["info"] == info


def copy_race(races: Path, column: str, drop: tuple[str, ...] = ()) -> Path:
    """The tiny HumanEval race saved again as `column`'s, without the runs of the methods in `drop`."""
    race = read_run(races / race_file(SUITES_BENCHMARK, "HumanEval"))
    race["runs"] = [run for run in race["runs"] if run["name"] not in drop]
    path = races / race_file(SUITES_BENCHMARK, column)
    path.write_bytes(gzip.compress(json.dumps(race).encode()))
    return path


def test_streamings_columns_resolve_to_races_without_streaming_and_the_row_says_so(races):
    """Streaming's columns (the Leaderboard's run: HumanEval, GSM8K, MT-Bench, MBPP) each lead to a race recorded
    without Streaming: the watch row says it is not in every race, and names only the methods every
    race holds."""
    from specviz.leaderboard import leaderboard_rows
    from specviz.ui.leaderboard import watch_info, watch_methods

    rows = leaderboard_rows()
    columns = list(dict.fromkeys(rows[rows["method"] == "streaming"]["column"]))
    assert columns == ["HumanEval", "GSM8K", "MT-Bench", "MBPP"]
    copy_race(races, "GSM8K", drop=("prompt_lookup",))
    copy_race(races, "MT-Bench")
    copy_race(races, "MBPP")
    assert all("streaming" not in watch_methods(SUITES_BENCHMARK)[c] for c in columns)
    raced, lacking = watch_info(SUITES_BENCHMARK).split(" Not in every race: ")
    assert raced.endswith("by Autoregressive, Vanilla SD.")  # prompt lookup is missing from GSM8K's race
    assert "Speculative Streaming" in lacking and "Prompt lookup" in lacking and "Vanilla SD" not in lacking


def test_a_race_that_cannot_be_read_offers_no_race_and_stops_nothing(races):
    """A broken shipped race (cut short, not a race) leaves its column without an offer; the others stay."""
    from specviz.ui.leaderboard import WATCH_INFO, watch_info, watch_update, watchable

    (races / race_file(SUITES_BENCHMARK, "GSM8K")).write_bytes(b"\x1f\x8b not a whole gzip file")
    (races / race_file(SUITES_BENCHMARK, "MT-Bench")).write_bytes(gzip.compress(b'{"name": "no runs"}'))
    assert watchable(SUITES_BENCHMARK) == ["HumanEval"]
    assert " Not in it: " in watch_info(SUITES_BENCHMARK)  # one readable race
    (races / race_file(SUITES_BENCHMARK, "HumanEval")).write_bytes(gzip.compress(b"[1, 2]"))
    assert watchable(SUITES_BENCHMARK) == [] and watch_info(SUITES_BENCHMARK) == WATCH_INFO
    assert watch_update(SUITES_BENCHMARK)[0]["visible"] is False


def test_a_re_recorded_race_is_read_again(races):
    """race_methods is cached per version of the file, not per path."""
    from specviz.leaderboard import race_methods

    path = races / race_file(SUITES_BENCHMARK, "HumanEval")
    assert race_methods(path) == METHODS
    stamp = path.stat().st_mtime_ns
    copy_race(races, "HumanEval", drop=("vanilla",))
    os.utime(path, ns=(stamp + 10**9, stamp + 10**9))  # a later version, even on a coarse clock
    assert race_methods(path) == ("autoregressive", "prompt_lookup")


@pytest.mark.browser
def test_watch_loads_the_columns_race_onto_the_race_tab_in_chromium(races):
    from test_leaderboard import leaderboard_page

    SHOTS.mkdir(exist_ok=True)
    with leaderboard_page() as page:
        watch = page.locator("#sv-board-watch")
        assert watch.is_visible() and page.locator("#sv-board-watch-column input").input_value() == "HumanEval"
        sources = page.locator("#sv-leaderboard-sources").inner_text()
        assert "benchmarks/" not in sources and "Every method on the fast target step" in sources
        watch.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "watch_offered_1440.png"), full_page=True)
        page.locator("#sv-board-benchmark label", has_text="Spec-Bench").click()
        page.wait_for_selector("#sv-leaderboard-plot:has-text('Mathematical Reasoning')")
        page.wait_for_selector("#sv-board-watch", state="hidden")  # none shipped: no offer, no dead link
        page.locator("#sv-board-benchmark label", has_text="HumanEval").click()
        page.wait_for_selector("#sv-board-watch", state="visible")
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the Race tab's status is far from here
        page.locator("#sv-board-watch-btn").click()
        page.wait_for_selector("#sv-race-status:has-text('Loaded a saved race')")
        assert page.locator("#sv-run").is_visible()  # the Race tab is the one shown
        assert page.get_by_role("tab", name="Race", exact=True).get_attribute("aria-selected") == "true"
        page.wait_for_function("() => document.querySelectorAll('#sv-board .sv-panel').length === 3")
        assert page.locator("#sv-board .sv-status.sv-done").count() == 3  # the three methods recorded
        page.wait_for_timeout(1_000)  # the page settles (the Race tab's scripts run on a redraw)
        top = page.evaluate("() => document.getElementById('sv-race-status').getBoundingClientRect().top")
        assert 0 <= top < 844  # its status line in view, not the Leaderboard's scroll position (3000 px down)
        page.screenshot(path=str(SHOTS / "watch_loaded_390.png"))
        page.set_viewport_size({"width": 1440, "height": 900})
        page.screenshot(path=str(SHOTS / "watch_loaded_1440.png"), full_page=True)
