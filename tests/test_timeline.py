"""The timeline plot: busy spans per lane from recorded runs, idle shares, a figure without a server."""

from __future__ import annotations

import json

import specviz
from specviz.plots.timeline import busy_intervals, idle_fractions, timeline
from specviz.records import IterationRecord


def recorded(method, pair, **options):
    result = specviz.generate(method, pair, "def f(x):", max_new_tokens=20, **options)
    saved = json.loads(json.dumps([r.to_dict() for r in result.records]))  # as saved and replayed
    return [IterationRecord.from_dict(r) for r in saved]


def test_lanes_idle_shares_and_figure(perturbed_pair):
    runs = {
        "vanilla": recorded("vanilla", perturbed_pair, speculation_length=3),
        "pearl": recorded("pearl", perturbed_pair, window=3),
        "autoregressive": recorded("autoregressive", perturbed_pair),
    }
    for label, records in runs.items():
        spans = busy_intervals(records)
        for lane, part in spans.groupby("lane"):
            starts, ends = part["start"].tolist(), part["end"].tolist()
            assert all(e1 <= s2 + 1e-9 for e1, s2 in zip(ends[:-1], starts[1:], strict=True)), (
                f"{label} {lane} spans overlap"
            )
        idle = idle_fractions(records)
        assert all(0.0 <= v <= 1.0 for v in idle.values())
    assert set(busy_intervals(runs["autoregressive"])["lane"]) == {"target"}
    assert idle_fractions(runs["autoregressive"])["draft"] == 1.0
    modes = set(busy_intervals(runs["pearl"])["mode"])
    assert "pre-verify" in modes
    fig = timeline(runs)
    labels = {y for trace in fig.data for y in trace.y}
    assert len(labels) == 6 and any(label.startswith("pearl · target (idle") for label in labels)
    assert fig.layout.xaxis.title.text.endswith("(ms)")
