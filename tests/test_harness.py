"""The benchmark harness (specviz.harness): rows, rotation, parity, on the tiny pairs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specviz.errors import SpecvizError
from specviz.harness import RunRow, Variant, mark_parity, run_interleaved, summary_rows
from specviz.prompts import Prompt

BENCH_KEYS = [
    "method",
    "kind",
    "output_ids",
    "new_tokens",
    "wall_s",
    "target_forwards",
    "draft_forwards",
    "drafted",
    "accepted",
    "iterations",
    "stop_reason",
    "oracle_sl_mean",
    "positions",
    "gamma",
    "pass_s",
    "suite",
    "category",
    "prompt_id",
    "repeat",
    "matches_autoregressive",
    "matches_hf_greedy",
]
PROMPTS = [Prompt("mine", "mine/1", "def add(a, b):"), Prompt("mine", "mine/2", "What is 2 + 2?")]


def test_a_row_is_the_benchmarks_json_row_and_says_parity_once_judged():
    row = RunRow("vanilla", "method", [1, 2], 2, 0.1, 2, 4, 4, 1, 2, "max_new_tokens", None, variant="SL-2")
    assert list(row.to_dict()) == BENCH_KEYS  # the label and the records stay in memory
    assert list(replace(row, parity="same").to_dict()) == [*BENCH_KEYS, "parity"]
    assert list(replace(row, parity="tie", first_difference=1).to_dict()) == [*BENCH_KEYS, "parity", "first_difference"]
    assert row.to_dict(("variant", "new_tokens")) == {"variant": "SL-2", "new_tokens": 2}


def test_variants_rotate_prompt_by_prompt_and_every_greedy_output_equals_ar(random_pair):
    variants = [
        Variant("AR", "autoregressive"),
        Variant("SL-2", "vanilla", {"speculation_length": 2}),
        Variant("SL-3", "vanilla", {"speculation_length": 3}),
    ]
    rows = run_interleaved(
        random_pair, variants, PROMPTS, max_new_tokens=6, warmup=False, keep_records=True, progress=False
    )
    assert [r.variant for r in rows] == ["AR", "SL-2", "SL-3", "SL-2", "SL-3", "AR"]
    assert all(r.records and sum(len(x.emitted) for x in r.records) == r.new_tokens for r in rows)
    rows = mark_parity(rows, random_pair, PROMPTS)
    assert {(r.matches_autoregressive, r.parity) for r in rows} == {(True, "same")}
    assert {r.matches_autoregressive for r in mark_parity(rows, random_pair, PROMPTS, greedy=False)} == {None}
    out = rows[1].output_ids  # SL-2 on the first prompt, whose AR run is rows[0]
    wrong = replace(rows[1], output_ids=[*out[:2], 0 if out[2] else 1, *out[3:]])
    judged = mark_parity([rows[0], wrong], random_pair, PROMPTS)[1]
    assert (judged.matches_autoregressive, judged.parity, judged.first_difference) == (
        False,
        "differs",
        2,
    )  # float32: no tie
    summary = summary_rows(rows, ["autoregressive", "vanilla"])
    assert [(s["method"], s["runs"], s["speedup_vs_autoregressive"] is not None) for s in summary] == [
        ("autoregressive", 2, True),
        ("vanilla", 4, True),
    ]


def test_a_series_carries_osds_learner_and_lends_pearl_one_thread(random_pair, watch_forwards):
    """What the harness lends a variant's runs: OSD one learner for the whole series (every record
    says which draft version served it), PEARL one thread for its target lane, warm-up included."""
    import threading

    from specviz.extras import OnlineExtra

    names: list[str] = []
    watch_forwards((random_pair.target,), lambda: names.append(threading.current_thread().name))
    rows = run_interleaved(
        random_pair,
        [Variant("OSD", "osd"), Variant("PEARL", "pearl", {"window": 2})],
        PROMPTS,
        max_new_tokens=6,
        keep_records=True,
        progress=False,
    )
    assert all(r.records[0].extras(OnlineExtra) is not None for r in rows if r.method == "osd")
    assert {n for n in names if n != threading.current_thread().name} == {"specviz-lane_0"}  # runner.series_executor's


@pytest.mark.parametrize("experiment", ["pearl", "disco", "streaming", "draft_quality"])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--offset", "-5"], "--offset must be at least 0, got -5"),
        (["--limit", "0"], "--limit must be at least 1, got 0"),
        (["--limit", "all"], "--limit must be an integer, got 'all'"),
        (["--max-new-tokens", "-1"], "--max-new-tokens must be at least 1, got -1"),
        (["--out", "/proc/specviz-results"], "cannot write /proc/specviz-results/results.json"),
        (["--out", __file__], f"cannot write {__file__}/results.json (Not a directory)"),
    ],
)
def test_an_experiments_bad_flag_is_refused_in_one_line_before_any_work(experiment, args, message, monkeypatch, capsys):
    """Issue 41: an experiment took --offset -5 (the last five prompts) and found an unwritable --out
    only after the whole run; now each is refused as it is parsed, before any model loads."""
    from specviz import bench
    from specviz.models import pair

    def loaded(*args, **kwargs):
        raise SpecvizError("a model was loaded")  # the work began: once, only then came the refusal

    monkeypatch.setattr(pair, "load_pair", loaded)
    code = bench.main([experiment, "--pair", "tiny-random", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_a_progress_line_that_only_updates_the_last_is_said_at_most_every_so_often():
    from specviz.harness import every_s

    said: list[str] = []
    say = every_s(30, said.append)
    for s in range(0, 60, 5):
        say(f"starting vLLM for default: {s} s (loading, then compiling)")
    say("vLLM is serving default (started in 60 s)")
    say("starting vLLM for default: 1 s (loading, then compiling)")  # another wait: said again
    assert said == [
        "starting vLLM for default: 0 s (loading, then compiling)",
        "vLLM is serving default (started in 60 s)",
        "starting vLLM for default: 1 s (loading, then compiling)",
    ]
