"""The streaming experiment runs end to end on the tiny pair and checks parity against the right baseline."""

from __future__ import annotations

import json

from specviz.experiments import streaming


def test_experiment_end_to_end(tmp_path):
    argv = [
        "--pair",
        "tiny-random",
        "--suites",
        "gsm8k",
        "--limit",
        "1",
        "--max-new-tokens",
        "6",
        "--tree-width",
        "2",
        "--out",
        str(tmp_path),
        "--quiet",
        "--no-warmup",
    ]
    assert streaming.main(argv) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    rows = [r for r in result["summary"] if r["suite"] == "all"]
    assert [r["method"] for r in rows] == ["autoregressive", "streaming", "streaming", "streaming", "vanilla"]
    assert all(r["matches_baseline"] for r in rows)
    assert {r["baseline"] for r in rows if r["method"] == "streaming"} == {"AR (tuned target)"}
    assert rows[2]["extra_params"] > 0 and rows[0]["extra_params"] == 0
    assert result["tuned_vs_original"]["identical_outputs"] == 1.0  # untrained adapter: zero LoRA
