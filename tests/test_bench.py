"""The benchmark CLI end to end on the tiny-random pair."""

from __future__ import annotations

import json

from specviz import bench
from tests.conftest import own_methods


def test_bench_cli_runs_every_method_and_writes_json(tmp_path, capsys):
    out = tmp_path / "out.json"
    code = bench.main(
        [
            "--pair",
            "tiny-random",
            "--methods",
            "all",
            "--suite",
            "humaneval",
            "--limit",
            "2",
            "--max-new-tokens",
            "16",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert {r["method"] for r in result["runs"]} == {s.name for s in own_methods()}  # "all": specviz's own
    assert len(result["runs"]) == 2 * len(own_methods())
    for run in result["runs"]:
        for key in (
            "method",
            "prompt_id",
            "output_ids",
            "new_tokens",
            "wall_s",
            "target_forwards",
            "draft_forwards",
            "drafted",
            "accepted",
            "iterations",
        ):
            assert key in run
        assert run["matches_autoregressive"] is True
    for row in result["summary"]:
        for key in (
            "method",
            "tokens_per_s",
            "speedup_vs_autoregressive",
            "acceptance_rate",
            "mean_accepted_length",
            "target_forwards_per_token",
        ):
            assert key in row
    assert next(r for r in result["summary"] if r["method"] == "autoregressive")["speedup_vs_autoregressive"] == 1.0
    table = capsys.readouterr().out
    assert "vanilla" in table and "speedup" in table


def test_bench_interleaves_methods_and_rotates_their_order(tmp_path):
    out = tmp_path / "o.json"
    bench.main(
        [
            "--pair",
            "tiny-random",
            "--methods",
            "autoregressive,vanilla,prompt_lookup",
            "--suite",
            "gsm8k",
            "--limit",
            "3",
            "--max-new-tokens",
            "4",
            "--json",
            str(out),
            "--quiet",
            "--no-warmup",
        ]
    )
    order = [r["method"] for r in json.loads(out.read_text())["runs"]]
    assert order[:3] == ["autoregressive", "vanilla", "prompt_lookup"]
    assert order[3:6] == ["vanilla", "prompt_lookup", "autoregressive"]


def test_spec_bench_runs_per_category_and_reports_in_its_layout(tmp_path):
    from specviz.prompts import SPEC_BENCH_COLUMNS, take

    every = take("specbench", limit=1)
    assert len(every) == 13 and len({p.category for p in every}) == 13  # one per category
    assert {c for cats in SPEC_BENCH_COLUMNS.values() for c in cats} == {p.category for p in every}
    code = bench.main(
        [
            "--pair",
            "tiny-random",
            "--methods",
            "autoregressive,vanilla",
            "--suite",
            "specbench",
            "--category",
            "translation,writing,qa",
            "--limit",
            "2",
            "--max-new-tokens",
            "8",
            "--report",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert (
        sorted({r["category"] for r in result["runs"]}) == ["qa", "translation", "writing"]
        and len(result["runs"]) == 12
    )
    assert {r["category"] for r in result["by_category"]} == {
        "Translation",
        "Multi-turn Conversation",
        "Question Answering",
    }
    md = (tmp_path / "summary.md").read_text()
    layout = md.split("## In Spec-Bench's layout")[1]
    assert "| Translation" in layout and "#Mean Accepted Tokens" in layout and "| vanilla " in layout


def test_a_prompt_file_of_json_lines_or_plain_text(tmp_path):
    from specviz.errors import SpecvizError
    from specviz.prompts import load_prompt_file

    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text(
        '{"prompt": "Say hi.", "category": "greet"}\n\n{"turns": ["Count to 3.", "Now to 4."], "id": "c"}\n'
    )
    prompts = load_prompt_file(jsonl)
    assert [(p.id, p.text, p.category) for p in prompts] == [
        ("mine/1", "Say hi.", "greet"),
        ("mine/c", "Count to 3.", ""),
    ]
    text = tmp_path / "lines.txt"
    text.write_text("def add(a, b):\n\nWhat is 2 + 2?\n")
    assert [p.text for p in load_prompt_file(text)] == ["def add(a, b):", "What is 2 + 2?"]
    out = tmp_path / "r.json"
    assert (
        bench.main(
            ["--pair", "tiny-random", "--prompts", str(text), "--max-new-tokens", "4", "--json", str(out), "--quiet"]
        )
        == 0
    )
    assert [r["prompt_id"] for r in json.loads(out.read_text())["runs"]][:1] == ["lines/1"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt field"}\n')
    for path, message in ((bad, "line 1: expected a JSON object"), (tmp_path / "missing.txt", "cannot read")):
        try:
            load_prompt_file(path)
        except SpecvizError as e:
            assert message in str(e)
        else:
            raise AssertionError(f"{path} was accepted")
    assert bench.main(["--pair", "tiny-random", "--suite", "specbench", "--category", "poetry", "--quiet"]) == 2


def test_the_command_line_reads_prompt_files_and_the_app_never_does(tmp_path):
    import pytest

    from specviz.errors import SpecvizError
    from specviz.prompts import load_suite, take
    from specviz.serving.stream import StreamConfig, request_stream

    mine = tmp_path / "mine.txt"
    mine.write_text("one\ntwo\n")
    assert [p.text for p in take(str(mine))] == ["one", "two"]
    assert {p.text for p in request_stream(StreamConfig((str(mine),), 3, files=True))} == {"one", "two"}
    for sent in (str(mine), "/etc/passwd"):  # a name a visitor sends to the app is a suite name, never a path
        with pytest.raises(SpecvizError, match="unknown prompt suite"):
            load_suite(sent)
        with pytest.raises(SpecvizError, match="unknown prompt suite"):
            request_stream(StreamConfig((sent,), 3))


def test_each_method_takes_its_own_options_by_the_apps_names(tmp_path, capsys):
    """--option METHOD.NAME=VALUE sets one method's option; --gamma every method's speculation_length;
    the HF peers take their counterpart's γ."""
    from specviz.methods import get_method

    args = bench.parse_args(
        [
            "--methods",
            "vanilla,sssd,disco,pearl",
            "--gamma",
            "3",
            "--option",
            "sssd.speculation_length=6",
            "--option",
            "disco.threshold=auto",
            "--option",
            "pearl.concurrent=false",
            "--peers",
        ]
    )
    cfg = bench.config_from_args(args)
    assert cfg.options == {
        "sssd": {"speculation_length": 6},
        "disco": {"threshold": None},
        "pearl": {"concurrent": False},
    }
    assert bench.method_options(cfg, "vanilla") == {"speculation_length": 3}
    assert bench.method_options(cfg, "sssd") == {"speculation_length": 6}
    assert bench.method_options(cfg, "pearl") == {
        "concurrent": False
    }  # PEARL has no speculation_length: its window is its own
    default = bench.config_from_args(bench.parse_args(["--methods", "vanilla,sssd"]))
    assert bench.method_options(default, "sssd") == {} and get_method("sssd").make_options().speculation_length == 8
    assert bench.main(["--list-options"]) == 0
    listing = capsys.readouterr().out
    assert "sssd.speculation_length  int in [1, 64], default 8: S: tree nodes" in listing
    assert (
        "disco.threshold  float in [0, 1], default tuned" in listing
        and "sssd.datastore  text, default 'auto'" in listing
    )
    assert "osd.learner" not in listing
    out = tmp_path / "o.json"
    assert (
        bench.main(
            [
                "--pair",
                "tiny-random",
                "--methods",
                "autoregressive,vanilla",
                "--option",
                "vanilla.speculation_length=2",
                "--peers",
                "--suite",
                "gsm8k",
                "--limit",
                "1",
                "--max-new-tokens",
                "8",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    runs = {r["method"]: r for r in json.loads(out.read_text())["runs"]}
    assert runs["vanilla"]["drafted"] <= 2 * runs["vanilla"]["iterations"] and runs["vanilla"]["matches_autoregressive"]
