"""The race verdict's honesty (review faults 1 and 3): runs the clock cannot tell apart share a place,
and a prompt is placed against the method's shipped average on the suites every method ran, named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_ui_race import timed_race

from specviz.ui.panels import MethodRun
from specviz.ui.verdict import counts, places, prompt_place, ranking, shipped_speedups, verdict_markdown


def _run(name: str, accepted: int) -> MethodRun:
    record = SimpleNamespace(drafted=(1, 2, 3), accepted=accepted, emitted=(1,), draft_forwards=3, target_forwards=1)
    return MethodRun(name, name.upper(), "", status="done", records=[record])  # type: ignore[list-item]


def test_speedups_within_the_noise_or_equal_counts_share_a_place():
    a, b, c, d = _run("a", 3), _run("b", 2), _run("c", 1), _run("d", 3)
    assert places([(a, 1.30), (b, 1.20), (c, 1.00)], {}) == [
        (1, ""),
        (1, "within 10% of A: the gap is within the clock's noise"),
        (3, ""),
    ]
    same = places([(a, 1.5), (d, 1.2), (c, 1.0)], {})  # d did a's work: only the clock differs, by 25 %
    assert same == [(1, ""), (1, "same drafts and counts as A: the gap is clock noise"), (3, "")]
    assert places([(a, 1.30), (b, 1.25)], {"b": ["disturbed"]}) == [(1, ""), (2, "")]  # a flagged run shares nothing


def test_online_sd_before_any_update_shares_vanilla_sds_place(perturbed_pair):
    """The reviewer's race: Online SD had Vanilla SD's drafts and counts, and its clock said 1.15× against
    1.07×: the verdict gave them 2nd and 3rd place. Here OSD's clock runs 12 % faster."""
    race = timed_race(perturbed_pair, {"osd": 0.88}, methods=("autoregressive", "vanilla", "osd"))
    vanilla, osd = race.runs[1], race.runs[2]
    assert counts(vanilla) == counts(osd)
    verdict = verdict_markdown(race)
    lines = {line.split("**")[1]: line for line in verdict.split("\n") if line.startswith("- **")}
    assert [r.name for r, _ in ranking(race)][:2] == ["osd", "vanilla"]  # the clock alone puts OSD ahead
    faster, slower = osd, vanilla
    assert ", 1st (shared)" in lines[faster.label]
    assert f", 1st (shared: same drafts and counts as {faster.label}: the gap is clock noise)" in lines[slower.label]
    assert "share first place**: the clock cannot tell them apart" in verdict.split("\n")[0]
    assert ("★" in lines[osd.label]) == ("★" in lines[vanilla.label])


def test_a_prompt_is_placed_against_the_shared_suites_named_not_a_folder():
    """Review fault 1: '2.64× here against 1.58× on average' compared with DISCO's average over its own
    run (HumanEval, GSM8K, MBPP) and named the run by its path."""
    disco = shipped_speedups("default")["disco"]
    words = prompt_place(2.64, disco)
    assert disco.suites == ("HumanEval", "GSM8K") and "HumanEval and GSM8K prompts" in words
    assert f"against {disco.on_suites:.2f}× on average" in words and "benchmarks/" not in words
    assert disco.on_suites == pytest.approx(1.5448, abs=5e-4)  # the Leaderboard tab's shared column: 1.54×
