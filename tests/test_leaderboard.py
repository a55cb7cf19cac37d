"""The Leaderboard: paired speedups from shipped runs, the same figures the benchmark wrote, and the tab."""

from __future__ import annotations

import csv
import gzip
import json
from contextlib import contextmanager

import pytest

from specviz.leaderboard import (
    ALL,
    BENCHMARK_OF,
    DECLARATION,
    SHARED,
    SUITE_COLUMNS,
    SUITES_BENCHMARK,
    Source,
    leaderboard_rows,
    load_declaration,
    paired_rows,
    shared_columns,
    shipped_race,
    summarise,
)
from specviz.methods import method_names
from tests.conftest import leaderboard_of_two_runs


def _row(method, prompt, wall, tokens=10, passes=10, variant=None, suite="gsm8k"):
    row = {"method": method, "prompt_id": prompt, "suite": suite, "wall_s": wall, "new_tokens": tokens}
    row["target_forwards"] = passes
    return row | ({"variant": variant} if variant else {})


def test_speedups_pair_each_prompt_with_the_target_alone_of_the_same_run(tmp_path):
    runs = [
        _row("autoregressive", "a", 2.0),
        _row("autoregressive", "b", 4.0),
        _row("vanilla", "a", 1.0, passes=4, variant="γ=4"),
        _row("vanilla", "b", 0.5, passes=6, variant="γ=4"),
        _row("vanilla", "a", 9.0, variant="γ=8"),  # another variant: not taken
        _row("vanilla", "c", 1.0, variant="γ=4"),  # no target-alone row for c: not paired
    ]
    path = tmp_path / "results.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"device": {"device": "cpu", "cpu": "x86_64", "threads": 2}, "runs": runs}, f)
    rows = paired_rows(Source(path, "test", {"vanilla": "γ=4"}))
    assert sorted(rows["prompt_id"]) == ["a", "b"]
    summary = summarise(rows).set_index("column")
    assert summary.loc["all", "speedup"] == pytest.approx(6.0 / 1.5)  # Σ target-alone s ÷ Σ method s, not mean ratio 5
    assert (summary.loc["all", "p25"], summary.loc["all", "p75"]) == pytest.approx((3.5, 6.5))  # ratios 2 and 8
    assert summary.loc["all", "tokens_per_pass"] == pytest.approx(20 / 10)
    assert summary.loc["GSM8K", "prompts"] == 2 and summary.loc["all", "machine"] == "CPU (x86_64, 2 threads)"


def test_a_run_without_its_device_must_name_its_machine(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [_row("autoregressive", "a", 1.0), _row("sssd", "a", 0.5)]}))
    with pytest.raises(Exception, match="records no device"):
        paired_rows(Source(path, "test", {"sssd": None}))
    assert set(paired_rows(Source(path, "test", {"sssd": None}, machine="CPU"))["machine"]) == {"CPU"}


def test_every_declared_method_is_registered_and_every_run_pairs():
    sources = load_declaration()
    assert {m for s in sources for m in s.take} <= set(method_names())
    rows = leaderboard_rows()
    for s in sources:
        taken = set(rows[rows["source"] == s.folder]["method"])
        assert taken == set(s.take), s.path


@pytest.mark.parametrize(
    "folder, method, benchmark",
    [("fast-target/leaderboard", "vanilla", SUITES_BENCHMARK), ("specbench", "sssd", BENCHMARK_OF["specbench"])],
)
def test_the_overall_speedup_is_the_one_the_benchmark_wrote(folder, method, benchmark):
    """The bench's summary.csv (tokens/s ratio) and the leaderboard's Σ-time ratio are one figure."""
    with open(DECLARATION.parent / folder / "summary.csv") as f:
        wrote = {r["method"]: r for r in csv.DictReader(f)}[method]
    summary = summarise(leaderboard_rows())
    cell = summary[(summary["method"] == method) & (summary["column"] == "all") & (summary["benchmark"] == benchmark)]
    assert cell["speedup"].item() == pytest.approx(float(wrote["speedup vs AR"]), rel=1e-9)
    assert cell["tokens_per_pass"].item() == pytest.approx(float(wrote["mean accepted length"]), rel=1e-9)


def test_the_streaming_row_is_the_run_of_the_registered_method():
    """Issue 38/39: Speculative Streaming's figures come from a run of the method as registered (one target
    pass per iteration, the streams' head over the frequent tokens, the shipped adapter), now the
    Leaderboard's run of every method on the fast target step; each cell is Σ target-alone s ÷ Σ
    Streaming s over that run's prompts of the column."""
    from specviz.methods.streaming import StreamingOptions
    from specviz.ui.leaderboard import BENCHMARK_CHOICES, leaderboard_view, machines

    default = StreamingOptions()
    assert (default.passes, default.stream_vocab) == ("fused", "frequent")  # what the run's defaults ran
    run = DECLARATION.parent / "fast-target" / "leaderboard" / "results.json.gz"
    (source,) = [s for s in load_declaration() if "streaming" in s.take]
    assert source.path == run and source.take["streaming"] is None
    with gzip.open(run, "rt") as f:
        runs = json.load(f)["runs"]
    wall: dict[tuple[str, str], float] = {}
    tokens = passes = 0
    for r in runs:
        if r["method"] in ("autoregressive", "streaming"):
            key = (r["method"], SUITE_COLUMNS[r["suite"]])
            wall[key] = wall.get(key, 0.0) + r["wall_s"]
        if r["method"] == "streaming":
            tokens, passes = tokens + r["new_tokens"], passes + r["target_forwards"]
    summary = summarise(leaderboard_rows())
    cells = summary[summary["method"] == "streaming"].set_index("column")
    assert set(cells.index) == {"HumanEval", "GSM8K", "MT-Bench", "MBPP", ALL, SHARED}
    for column in ("HumanEval", "GSM8K", "MT-Bench", "MBPP"):
        expected = wall["autoregressive", column] / wall["streaming", column]
        assert cells.loc[column, "speedup"] == pytest.approx(expected, rel=1e-9)
        assert cells.loc[column, "prompts"] == 10
    assert cells.loc[ALL, "tokens_per_pass"] == pytest.approx(tokens / passes)  # one target pass an iteration
    _, table, sources = leaderboard_view(BENCHMARK_CHOICES[0], "speedup", machines()[0])
    streaming = table.set_index("method").loc["Speculative Streaming"]
    assert streaming["run (its prompts)"] == "Every method on the fast target step (40 prompts)"
    assert "10 prompts each, 128 tokens" in sources and "every method at its registered defaults" in sources
    for column in ("HumanEval", "GSM8K", "MT-Bench", "MBPP"):  # each of its cells leads to a shipped race
        assert shipped_race(SUITES_BENCHMARK, column) is not None


def test_methods_rank_on_the_suites_every_one_ran_not_on_their_own_runs(tmp_path):
    """Review fault 1: a method whose run had an easy extra suite must not outrank one that is faster on
    every suite both ran. Here "b" ran GSM8K and MBPP (easy), "a" GSM8K and MT-Bench: on GSM8K, the only
    suite both have, "a" is faster; over their own runs "b" looks faster."""
    runs = [_row("autoregressive", p, 2.0, suite=s) for p, s in [("g", "gsm8k"), ("m", "mbpp"), ("t", "mtbench")]]
    runs += [_row("vanilla", "g", 1.0), _row("vanilla", "t", 2.0, suite="mtbench")]  # 2.0× on GSM8K
    runs += [_row("disco", "g", 1.25), _row("disco", "m", 0.5, suite="mbpp")]  # 1.6× on GSM8K
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"device": {"gpu": "G"}, "runs": runs}))
    summary = summarise(paired_rows(Source(path, "test", {"vanilla": None, "disco": None})))
    assert shared_columns(summary) == ["GSM8K"]
    cell = summary.set_index(["method", "column"])["speedup"]
    assert cell["disco", ALL] > cell["vanilla", ALL]  # 4/1.75 against 4/3: each run's own prompts
    assert (cell["vanilla", SHARED], cell["disco", SHARED]) == pytest.approx((2.0, 1.6))


@pytest.fixture
def two_runs(tmp_path, monkeypatch):
    """The tab over two runs whose suites differ (tests.conftest.leaderboard_of_two_runs)."""
    import specviz.ui.leaderboard as tab

    rows = leaderboard_of_two_runs(tmp_path)
    monkeypatch.setattr(tab, "leaderboard_rows", lambda: rows)
    return rows


def test_the_tab_ranks_on_shared_suites_and_says_what_differs(two_runs):
    from specviz.ui.leaderboard import BENCHMARK_CHOICES, leaderboard_view, machines

    figure, table, sources = leaderboard_view(BENCHMARK_CHOICES[0], "speedup", machines()[0])
    ranked_on, own = table.columns[1], "speedup (×), its own run's prompts (differ per method)"
    assert "HumanEval + GSM8K + MT-Bench (every method ran these)" in ranked_on and own in table.columns
    shared = [float(v) for v in table[ranked_on]]
    assert shared == sorted(shared, reverse=True)
    places = list(table["method"])
    assert places.index("DISCO") < places.index("Vanilla SD")  # faster on the suites both ran (1.42 against 1.33)
    vanilla = table.set_index("method").loc["Vanilla SD"]
    assert (vanilla[own], vanilla["run (its prompts)"]) == ("1.36", "Every method on the fast target step (40 prompts)")
    assert "prompts" not in table.columns  # the narrow count column whose header broke as "prompt / s"
    assert "*Every method on the fast target step: the Leaderboard's run*" in sources and "Measured on CPU" in sources
    assert "benchmarks/" not in sources and not table["run (its prompts)"].str.contains("benchmarks/").any()
    heat = figure.data[0]
    assert heat.type == "heatmap" and "×" in heat.text[0][-1]
    assert list(heat.x[-2:]) == [
        "HumanEval +<br>GSM8K +<br>MT-Bench<br>(every method<br>ran these)",
        "its own run's<br>prompts (differ<br>per method)",
    ]
    assert list(heat.y).index("DISCO") < list(heat.y).index("Vanilla SD")
    pearl = list(heat.y).index("PEARL")
    assert heat.text[pearl][list(heat.x).index("MBPP")] == "not measured" and heat.z[pearl][3] is None
    white = next(at for at, colour in heat.colorscale if colour == "#FFFFFF")
    assert heat.zmin + white * (heat.zmax - heat.zmin) == pytest.approx(1.0)  # white = as fast as the target


def test_the_shipped_run_is_one_run_of_every_method_on_the_same_prompts():
    from specviz.ui.leaderboard import BENCHMARK_CHOICES, leaderboard_view, machines

    figure, table, _ = leaderboard_view(BENCHMARK_CHOICES[0], "speedup", machines()[0])
    assert table.columns[1] == "speedup (×), all prompts (every method ran them)"
    assert set(table["run (its prompts)"]) == {"Every method on the fast target step (40 prompts)"}
    assert table.set_index("method").loc["Vanilla SD", table.columns[1]] == "1.36"  # its README's 1.36×
    assert list(figure.data[0].x) == [
        "HumanEval",
        "GSM8K",
        "MT-Bench",
        "MBPP",
        "all prompts<br>(every method<br>ran them)",
    ]
    by_category, table, _ = leaderboard_view(BENCHMARK_CHOICES[1], "tokens_per_pass", machines()[0])
    assert "Mathematical Reasoning" in by_category.data[0].x and "×" not in by_category.data[0].text[0][0]
    assert by_category.data[0].x[-1] == "all prompts<br>(every method<br>ran them)"  # one run, the same prompts


def test_the_phone_view_has_every_methods_figures_best_first(two_runs):
    """The cards a phone shows instead of the heatmap (issue 38 item 9): the desktop table's order and
    ranking figure, every column's figure or 'not measured', and the chosen metric."""
    from specviz.ui.leaderboard import BENCHMARK_CHOICES, leaderboard_view, machines, phone_view

    _, table, _ = leaderboard_view(BENCHMARK_CHOICES[0], "speedup", machines()[0])
    cards = phone_view(BENCHMARK_CHOICES[0], "speedup", machines()[0]).split('<li class="sv-lb-card">')[1:]
    assert len(cards) == len(table)
    for place, (card, method, figure) in enumerate(
        zip(cards, table["method"], table[table.columns[1]], strict=True), 1
    ):
        assert f"<span>{place}. {method}</span>" in card and f"<b>{figure}×</b>" in card
    pearl = cards[list(table["method"]).index("PEARL")]
    assert '<span>MBPP</span><span class="sv-lb-none">not measured</span>' in pearl
    assert "1.38×" in cards[list(table["method"]).index("Vanilla SD")]  # HumanEval, as the heatmap's cell
    per_pass = phone_view(BENCHMARK_CHOICES[0], "tokens_per_pass", machines()[0])
    assert "×" not in per_pass.split("<ol")[1] and "tokens per target pass" in per_pass


@contextmanager
def leaderboard_page():
    """A Chromium page on the Leaderboard tab of the app (the tiny-random pair), at 1440 × 900."""
    from playwright.sync_api import sync_playwright
    from test_app_browser import CHROMIUM, CHROMIUM_ARGS

    from specviz.tools.load import free_port
    from specviz.ui import build_app, launch

    demo = build_app(pair="tiny-random")
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_role("tab", name="Leaderboard").click()
            page.wait_for_selector("#sv-leaderboard-plot .js-plotly-plot")
            yield page
            browser.close()
    finally:
        demo.close()


@pytest.mark.browser
def test_the_leaderboard_tab_renders_the_shipped_results_in_chromium(tmp_path):
    from test_app_browser import ARTIFACTS

    with leaderboard_page() as page:
        table = page.locator("#sv-leaderboard-table").inner_text()
        assert (
            "Vanilla SD" in table and "1.36" in table and "Every method on the fast target step (40 prompts)" in table
        )
        assert "1.38×" in page.locator("#sv-leaderboard-plot").inner_text()  # vanilla on HumanEval
        assert "Measured on CPU" in page.locator("#sv-leaderboard-sources").inner_text()
        assert not page.locator("#sv-leaderboard-phone").is_visible()  # the phone's cards, hidden here
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "leaderboard_1440.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(ARTIFACTS / "leaderboard_390.png"), full_page=True)
        page.locator("#sv-board-benchmark label", has_text="Spec-Bench").click()
        page.wait_for_selector("#sv-leaderboard-phone:has-text('Mathematical Reasoning')")  # a phone: cards
        page.set_viewport_size({"width": 1440, "height": 900})
        page.wait_for_selector("#sv-leaderboard-plot:has-text('Mathematical Reasoning')")
