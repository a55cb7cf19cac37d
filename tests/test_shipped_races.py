"""The shipped races the Leaderboard links to: which prompts, recorded as the Race tab saves them, and
never one whose timing the Race tab would flag as disturbed."""

from __future__ import annotations

import threading

import pytest

from specviz.errors import SpecvizError
from specviz.leaderboard import SUITES_BENCHMARK, race_file, shipped_race
from specviz.methods import all_methods
from specviz.serving.saved import load_race
from specviz.tools import shipped_races
from specviz.tools.shipped_races import ShippedPrompt, record_shipped, shipped_prompts

METHODS = ("autoregressive", "vanilla", "prompt_lookup")  # run on a tiny pair (no trained draft or datastore)


def test_one_prompt_per_leaderboard_column_the_first_the_benchmark_ran_at_its_token_count():
    prompts = {(p.benchmark, p.column): p for p in shipped_prompts()}
    first = prompts[(SUITES_BENCHMARK, "HumanEval")]
    assert first.prompt_id == "HumanEval/0" and first.max_new_tokens == 128
    assert first.text.startswith("Complete the following Python function.")
    translation = prompts[("Spec-Bench (by category)", "Translation")]
    assert translation.prompt_id == "specbench/161" and translation.max_new_tokens == 96
    assert len(prompts) == 10 and len({p.file for p in prompts.values()}) == 10  # one file each


def _prompts(tokens: int = 8) -> list[ShippedPrompt]:
    return [
        ShippedPrompt(SUITES_BENCHMARK, "HumanEval", "HumanEval/0", "def fib(n):", tokens),
        ShippedPrompt("Spec-Bench (by category)", "Translation", "specbench/161", "Translate: bonjour", tokens),
    ]


def test_a_quiet_race_is_written_as_the_race_tab_saves_it(perturbed_pair, tmp_path, monkeypatch):
    monkeypatch.setattr("specviz.serving.timing.timing_flags", lambda race: {})  # a quiet machine, whatever this one is
    written = record_shipped(perturbed_pair, _prompts(), METHODS, tmp_path, log=lambda line: None)
    assert [p.name for p in written] == ["suites-humaneval.json.gz", "spec-bench-translation.json.gz"]
    race = load_race(written[0], tuple(s.name for s in all_methods()), 13)  # the Race tab's loader reads it
    assert [r.name for r in race.runs] == list(METHODS) and race.max_new_tokens == 8
    assert race.prompt == "def fib(n):" and all(r.status == "done" for r in race.runs)
    assert shipped_race(SUITES_BENCHMARK, "HumanEval", tmp_path) == written[0]
    assert shipped_race(SUITES_BENCHMARK, "GSM8K", tmp_path) is None  # none recorded: none offered


def test_a_race_flagged_as_disturbed_is_not_written(perturbed_pair, tmp_path, monkeypatch):
    monkeypatch.setattr(
        "specviz.serving.timing.timing_flags", lambda race: {"vanilla": ["the target alone ran slower"]}
    )
    with pytest.raises(SpecvizError, match="flagged as disturbed"):
        record_shipped(perturbed_pair, _prompts()[:1], METHODS, tmp_path, log=lambda line: None)
    assert not list(tmp_path.glob("*.json*"))


def test_a_race_over_its_bound_is_recorded_again_at_fewer_tokens_then_refused(perturbed_pair, tmp_path, monkeypatch):
    monkeypatch.setattr("specviz.serving.timing.timing_flags", lambda race: {})
    monkeypatch.setattr(shipped_races, "MAX_FILE_BYTES", 100)  # every race is over it
    monkeypatch.setattr(shipped_races, "FALLBACK_TOKENS", 4)
    asked = []
    real = shipped_races.record
    monkeypatch.setattr(shipped_races, "record", lambda *a: asked.append(a[3]) or real(*a))
    with pytest.raises(SpecvizError, match="even at 4 tokens"):
        record_shipped(perturbed_pair, _prompts(12)[:1], METHODS, tmp_path, log=lambda line: None)
    assert asked == [12, 4] and not (tmp_path / race_file(SUITES_BENCHMARK, "HumanEval")).exists()


def test_the_command_caps_new_tokens_and_refuses_a_total_over_its_bound(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("specviz.serving.timing.timing_flags", lambda race: {})
    argv = ["--pair", "tiny-perturbed", "--out", str(tmp_path), "--only", "HumanEval", "--max-new-tokens", "8"]
    assert shipped_races.main(argv) == 0
    race = load_race(tmp_path / "suites-humaneval.json.gz", tuple(s.name for s in all_methods()), 13)
    assert race.max_new_tokens == 8 and race.prompt.startswith("Complete the following Python function.")
    monkeypatch.setattr(shipped_races, "MAX_TOTAL_BYTES", 1)
    assert shipped_races.main(argv) == 1
    assert "record them again with --max-new-tokens 64" in capsys.readouterr().err


def test_a_shipped_race_is_the_saved_one_rounded_and_gzipped(perturbed_pair, tmp_path):
    """What ships is the Race tab's download with its numbers to 4 significant digits, gzipped; the loader
    reads it, and a gzip file that unpacks past the saved-race bound is refused before it is parsed."""
    import gzip
    import json

    from specviz.serving import saved
    from specviz.serving.racing import RaceSettings, run_race

    *_, race = run_race(perturbed_pair, RaceSettings("def fib(n):", METHODS, max_new_tokens=8), {}, threading.Event())
    path = tmp_path / "race.json.gz"
    path.write_bytes(shipped_races.saved_bytes(race))
    data = json.loads(gzip.decompress(path.read_bytes()))
    original = saved.race_to_dict(race)["runs"][1]["records"][0]
    assert data["runs"][1]["records"][0]["verify_ms"] == float(f"{original['verify_ms']:.4g}")
    loaded = load_race(path, tuple(s.name for s in all_methods()), 13)
    assert [r.records[-1].emitted for r in loaded.runs] == [r.records[-1].emitted for r in race.runs]
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (saved.MAX_FILE_BYTES + 1)))
    with pytest.raises(SpecvizError, match="unpacks to more than"):
        load_race(bomb, tuple(s.name for s in all_methods()), 13)
