"""The benchmark CLI end to end on the tiny-random pair."""

from __future__ import annotations

import json

from specviz import bench
from specviz.methods import method_names


def test_bench_cli_runs_every_method_and_writes_json(tmp_path, capsys):
    out = tmp_path / "out.json"
    code = bench.main(["--pair", "tiny-random", "--methods", "all", "--suite", "humaneval", "--limit", "2",
                       "--max-new-tokens", "16", "--json", str(out), "--quiet"])
    assert code == 0
    result = json.loads(out.read_text())
    assert {r["method"] for r in result["runs"]} == set(method_names())
    assert len(result["runs"]) == 2 * len(method_names())
    for run in result["runs"]:
        for key in ("method", "prompt_id", "output_ids", "new_tokens", "wall_s", "target_forwards",
                    "draft_forwards", "drafted", "accepted", "iterations"):
            assert key in run
        assert run["matches_autoregressive"] is True
    for row in result["summary"]:
        for key in ("method", "tokens_per_s", "speedup_vs_autoregressive", "acceptance_rate",
                    "mean_accepted_length", "target_forwards_per_token"):
            assert key in row
    assert next(r for r in result["summary"] if r["method"] == "autoregressive")["speedup_vs_autoregressive"] == 1.0
    table = capsys.readouterr().out
    assert "vanilla" in table and "speedup" in table


def test_bench_interleaves_methods_and_rotates_their_order(tmp_path):
    out = tmp_path / "o.json"
    bench.main(["--pair", "tiny-random", "--methods", "autoregressive,vanilla,prompt_lookup", "--suite", "gsm8k",
                "--limit", "3", "--max-new-tokens", "4", "--json", str(out), "--quiet", "--no-warmup"])
    order = [r["method"] for r in json.loads(out.read_text())["runs"]]
    assert order[:3] == ["autoregressive", "vanilla", "prompt_lookup"]
    assert order[3:6] == ["vanilla", "prompt_lookup", "autoregressive"]
