"""The draft_quality experiment on the tiny pair: one row per (suite, γ), lossless greedy outputs."""

from __future__ import annotations

import importlib
import json

import pytest

from specviz.experiments import draft_quality


def test_draft_quality_sweeps_gamma_and_reports_alpha_c_and_speedup(tmp_path):
    argv = [
        "--pair",
        "tiny-random",
        "--suites",
        "humaneval,gsm8k",
        "--limit",
        "1",
        "--max-new-tokens",
        "12",
        "--gammas",
        "2,3",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    assert draft_quality.main(argv) == 0
    result = json.loads((tmp_path / "draft_quality.json").read_text())
    assert result["greedy_mismatches"] == 0
    rows = result["rows"]
    assert [(r["suite"], r["gamma"]) for r in rows] == [
        ("humaneval", 2),
        ("gsm8k", 2),
        ("humaneval", 3),
        ("gsm8k", 3),
        ("all", 2),
        ("all", 3),
    ]
    for r in rows:
        assert 0.0 <= r["acceptance_rate"] <= 1.0 and r["c"] > 0 and r["measured_speedup"] > 0
        assert 1.0 <= r["mean_accepted_length"] <= r["gamma"] + 1
    assert "| all | 3 |" in (tmp_path / "draft_quality.md").read_text()


def test_draft_quality_runs_on_a_prompt_file_of_ones_own(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("def add(a, b):\nWhat is 2 + 2?\n")
    argv = [
        "--pair",
        "tiny-random",
        "--prompts",
        str(mine),
        "--max-new-tokens",
        "8",
        "--gammas",
        "2",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert draft_quality.main(argv) == 0
    result = json.loads((tmp_path / "out" / "draft_quality.json").read_text())
    assert [(r["suite"], r["prompts"]) for r in result["rows"]] == [("mine", 2), ("all", 2)]
    assert result["greedy_mismatches"] == 0


@pytest.mark.parametrize("experiment", ["disco", "draft_quality", "osd", "pearl", "sssd", "streaming"])
def test_every_paper_experiment_takes_a_prompt_file(experiment, capsys):
    module = importlib.import_module(f"specviz.experiments.{experiment}")
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert "--prompts FILE" in capsys.readouterr().out
