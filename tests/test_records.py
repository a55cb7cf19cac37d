"""Records are plain data: they serialise, round-trip, and the metrics are computed from them."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

import specviz
from specviz import metrics
from specviz.methods import all_methods, get_method
from specviz.records import IterationRecord


@pytest.mark.parametrize("method", [s.name for s in all_methods()])
def test_every_methods_records_serialise_and_round_trip(method, perturbed_pair):
    opts = get_method(method).select({"speculation_length": 3})
    result = specviz.generate(method, perturbed_pair, "def f(x):", max_new_tokens=20, **opts)
    for r in result.records:
        text = json.dumps(asdict(r))
        assert IterationRecord.from_dict(json.loads(text)) == r
        assert r.emitted[: r.accepted] == r.drafted[: r.accepted]  # accepted drafts come first
        assert r.t_end >= r.t_start >= 0 and r.draft_ms >= 0 and r.verify_ms >= 0
    json.dumps(asdict(result.summary))
    positions = [r.position for r in result.records]
    assert positions == sorted(positions) and positions[0] == len(result.prompt_ids)


def test_summary_and_metric_definitions(self_pair):
    result = specviz.generate("vanilla", self_pair, "abc", max_new_tokens=20, speculation_length=4)
    s = result.summary
    assert s.new_tokens == 20 == len(s.output_ids)
    assert s.target_forwards == len(result.records)  # one target forward per iteration
    assert metrics.acceptance_rate(s.accepted, s.drafted) == 1.0  # the target drafting for itself
    assert metrics.mean_accepted_length(s.new_tokens, s.target_forwards) == 5.0  # 4 accepted + 1 bonus
    ar = specviz.generate("autoregressive", self_pair, "abc", max_new_tokens=20).summary
    assert metrics.mean_accepted_length(ar.new_tokens, ar.target_forwards) == 1.0
    assert metrics.acceptance_rate(ar.accepted, ar.drafted) is None
    assert metrics.speedup(10.0, 25.0) == 2.5


def test_oracle_sl_counts_the_drafts_future_hits(self_pair, random_pair):
    # The target drafting for itself predicts everything: the oracle SL is the rest of the output.
    result = specviz.generate("autoregressive", self_pair, "abc", max_new_tokens=12)
    assert [r.oracle_sl for r in result.records] == list(range(12, 0, -1))
    # With a random draft the oracle SL is small but defined, and never longer than what follows.
    result = specviz.generate("vanilla", random_pair, "abc", max_new_tokens=12)
    n = result.summary.new_tokens
    for r in result.records:
        assert 0 <= r.oracle_sl <= n - (r.position - len(result.prompt_ids))
