"""Acceptance per draft position and the 'which γ' answer built on it (issue 50: what practitioners ask)."""

from __future__ import annotations

import threading

import pytest

from specviz import metrics
from specviz.cost.formulas import expected_tokens, expected_tokens_by_position, which_gamma
from specviz.cost.from_records import fixed_gamma, gamma_answer
from specviz.metrics import position_counts
from specviz.plots.positions import acceptance_by_position
from specviz.records import IterationRecord
from specviz.serving.racing import RaceSettings, run_race
from specviz.ui.why import gamma_markdown, position_rows


def record(i: int, drafted: int, accepted: int, emitted: int, t_start: float = 0.0, t_end: float = 0.1):
    return IterationRecord(
        method="vanilla",
        iteration=i,
        position=0,
        speculation_length=drafted,
        drafted=tuple(range(10, 10 + drafted)),
        accepted=accepted,
        emitted=tuple(range(10, 10 + emitted)),
        p_target=None,
        q_draft=None,
        draft_forwards=drafted,
        target_forwards=1,
        t_start=t_start,
        t_end=t_end,
        draft_ms=1.0,
        verify_ms=1.0,
    )


def test_a_position_counts_the_passes_that_reached_it():
    records = [
        record(0, 4, 4, 5),  # all four kept, and the bonus token
        record(1, 4, 1, 2),  # the second refused: positions 1 and 2 tested
        record(2, 4, 0, 1),  # the first refused
        record(3, 4, 2, 2),  # the budget ended after two: the third was never judged
        record(4, 0, 0, 1),  # a pass that drafted nothing reaches no position
    ]
    assert [metrics.tested(r) for r in records] == [4, 2, 1, 2, 0]
    assert position_counts(records) == ((4, 3), (3, 2), (1, 1), (1, 1))
    assert position_counts([]) == ()
    assert fixed_gamma(records) == 4  # the last two passes drafted fewer: the budget's end
    assert fixed_gamma([record(9, 0, 0, 1), *records]) == 4  # the first: an engine's prompt pass
    assert fixed_gamma([*records[:2], records[4], *records[2:]]) is None  # a pass of no drafts mid-run
    assert fixed_gamma([record(9, 0, 0, 1)] * 4) is None  # nothing drafted


def test_expected_tokens_by_position_is_leviathans_for_one_alpha():
    assert expected_tokens_by_position([0.6] * 5, 5) == pytest.approx(expected_tokens(0.6, 5))
    assert expected_tokens_by_position([1.0, 0.5, 0.0], 3) == pytest.approx(1 + 1 + 0.5 + 0)
    with pytest.raises(ValueError, match="needs the acceptance at 4 positions"):
        expected_tokens_by_position([0.5] * 3, 4)


def test_which_gamma_prefers_a_short_draft_when_late_positions_fail():
    rows = which_gamma([0.9, 0.2, 0.2, 0.2], pass_ratio=1.8, gamma0=4)  # a pass: 1 + 0.2 step per drafted token
    assert [g for g, *_ in rows] == [1, 2, 3, 4]
    assert [round(cost, 3) for _, _, cost, _ in rows] == [1.2, 1.4, 1.6, 1.8]
    assert rows[3][1] == pytest.approx(expected_tokens_by_position([0.9, 0.2, 0.2, 0.2], 4))
    assert max(rows, key=lambda r: r[3])[0] == 1
    assert max(which_gamma([0.95] * 4, 1.2, 4), key=lambda r: r[3])[0] == 4  # cheap drafts that land: draft all


def test_gamma_answer_reads_a_run_against_its_baseline():
    base = [record(i, 0, 0, 1, t_start=i, t_end=i + 0.05) for i in range(5)]  # a 50 ms step
    run = [record(i, 2, a, a + 1, t_start=i, t_end=i + 0.07) for i, a in enumerate([2, 1, 0, 2])]
    answer = gamma_answer(run, base)
    assert answer["gamma"] == 2 and answer["pass_ratio"] == pytest.approx(1.4)
    assert answer["rates"] == pytest.approx([3 / 4, 2 / 3])
    assert answer["best"] in (1, 2) and len(answer["rows"]) == 2
    assert gamma_answer(run, []) is None  # no baseline: no step to compare with
    assert gamma_answer([*run[:2], record(9, 0, 0, 1), *run[2:]], base) is None  # passes of different lengths


def test_the_plot_draws_accepted_over_tested_per_position():
    fig = acceptance_by_position([("Vanilla", 1, ((4, 3), (3, 2), (1, 1))), ("Empty", 2, ())])
    (trace,) = fig.data
    assert trace.name == "Vanilla" and list(trace.x) == [1, 2, 3]
    assert list(trace.y) == pytest.approx([0.75, 2 / 3, 1.0])
    assert "given the previous accepted" in fig.layout.yaxis.title.text
    assert "No chain method" in acceptance_by_position([]).layout.annotations[0].text


def test_a_race_draws_its_chains_positions_and_answers_which_gamma(perturbed_pair):
    settings = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla", "sssd"), max_new_tokens=24)
    race = list(run_race(perturbed_pair, settings, {}, threading.Event()))[-1]
    order = [r.name for r in race.runs]
    rows = position_rows(race, order)
    assert [label for label, *_ in rows] == [race.runs[1].label]  # SSSD's tree has no line of positions
    vanilla = next(r for r in race.runs if r.name == "vanilla")
    assert rows[0][2] == position_counts(vanilla.records)
    text = gamma_markdown(race)
    gamma = fixed_gamma(vanilla.records)
    assert f"raced at γ = {gamma}" in text and vanilla.label in text and "SSSD" not in text
    alone = RaceSettings("def fibonacci(n):", ("vanilla",), max_new_tokens=8)
    no_base = list(run_race(perturbed_pair, alone, {}, threading.Event()))[-1]
    assert "beside its engine's target alone" in gamma_markdown(no_base)


def test_which_gamma_reads_a_bench_file_again(tmp_path, capsys):
    import json

    from specviz.harness import RunRow
    from specviz.tools.which_gamma import main

    def row(method, prompt, wall, passes, positions, pass_s, drafted):
        return RunRow(method, "method", [1] * 20, 20, wall, passes, 0, drafted, 0, passes, "max_new_tokens", None,
                      positions=positions, pass_s=pass_s, prompt_id=prompt).to_dict()  # fmt: skip

    runs = []
    for prompt in ("p/1", "p/2"):
        runs.append(row("autoregressive", prompt, 1.0, 20, [], 0.05, 0))
        runs.append(row("vanilla", prompt, 0.8, 10, [[10, 8], [8, 5]], 0.07, 20))  # gamma: not recorded
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"runs": runs}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"runs": runs[:2]}))
    assert main([str(path)]) == 0 and "vanilla" not in capsys.readouterr().out  # no γ known: no answer
    assert main([str(path), "--gamma", "vanilla=2", "--prompts-of", str(other)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 prompts of") and "vanilla (γ = 2, a pass 1.400 of autoregressive's steps" in out
    assert "accepted per position 0.800 0.625): measured 1.250x autoregressive" in out
    assert f"γ = 2: {expected_tokens_by_position([0.8, 0.625], 2):.3f} tokens a pass for 1.400 steps" in out


def test_which_gamma_says_when_a_timing_was_disturbed(perturbed_pair):
    from specviz.ui.panels import DISTURBED

    settings = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla"), max_new_tokens=24)
    race = list(run_race(perturbed_pair, settings, {}, threading.Event()))[-1]
    race = race.flagged({})  # timed as their own (a tiny model's race on a busy machine may be flagged)
    assert DISTURBED not in gamma_markdown(race)
    # the baseline's clock was not its own
    race = race.flagged({"autoregressive": ["its step ran at twice the probe's"]})
    assert f"⚠️ {DISTURBED} ({race.runs[0].label})." in gamma_markdown(race)
