"""Records are plain data: they serialise, round-trip, and the metrics are computed from them."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import pytest

import specviz
from specviz import extras, metrics
from specviz.errors import SpecvizError
from specviz.methods import all_methods, get_method, new_session
from specviz.records import IterationRecord, RunBounds
from tests.conftest import own_methods


@pytest.mark.parametrize("method", [s.name for s in own_methods()])
def test_every_methods_records_serialise_and_round_trip(method, perturbed_pair):
    opts = get_method(method).select({"speculation_length": 3})
    result = specviz.generate(method, perturbed_pair, "def f(x):", max_new_tokens=20, **opts)
    for r in result.records:
        text = json.dumps(r.to_dict())
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


@pytest.mark.parametrize("method", [s.name for s in own_methods()])
def test_every_methods_records_carry_exactly_its_declared_extra_fields(method, perturbed_pair):
    """The registry says which families of `extra` fields a method writes (specviz.extras); its records
    hold those keys and no other, each family whole, and come back from JSON through the checked
    `from_dict` (under sampling too, where Decoding.commit adds `u`)."""
    spec = get_method(method)
    families = spec.extra_families()
    declared = extras.keys(families)
    sampling = {"temperature": 1.0, "seed": 5} if spec.supports_sampling else {}
    opts = spec.select({"speculation_length": 3})
    session = new_session(spec, perturbed_pair)  # OSD: its learner
    result = specviz.generate(
        method, perturbed_pair, "def f(x):", max_new_tokens=20, **sampling, **opts, session=session
    )
    bounds = RunBounds(
        method=method,
        records=len(result.records),
        prompt_tokens=len(result.prompt_ids),
        max_new_tokens=20,
        vocab_size=perturbed_pair.vocab_size,
        families=families,
    )
    for r in result.records:
        wire = r.to_dict()["extra"]
        assert {type(e) for e in r.extra} <= set(families), f"{method} writes undeclared families {r.extra}"
        assert wire.keys() <= declared, f"{method} writes undeclared extra keys {sorted(wire.keys() - declared)}"
        for family in spec.extras:
            assert extras.required(family) <= wire.keys(), f"{method}'s record lacks {family.__name__} fields"
            assert r.extras(family) is not None
        assert IterationRecord.from_dict(json.loads(json.dumps(r.to_dict())), bounds) == r
        with pytest.raises(SpecvizError, match="'undeclared' is not a field"):
            IterationRecord.from_dict({**r.to_dict(), "extra": {**wire, "undeclared": 1}}, bounds)
    assert result.records[-1].stop in extras.STOPS and all(r.stop is None for r in result.records[:-1])
    assert all((r.uniforms is not None) == bool(sampling and r.drafted) for r in result.records if not r.tree())


def test_each_extra_key_belongs_to_one_family():
    assert len(extras.keys(extras.FAMILIES)) == sum(len(fields(f)) for f in extras.FAMILIES)
    assert {f for s in all_methods() for f in s.extra_families()} <= set(extras.FAMILIES)


BOUNDS = RunBounds(method="vanilla", records=3, prompt_tokens=4, max_new_tokens=8, vocab_size=100)
GOOD = {
    "method": "vanilla",
    "iteration": 2,
    "position": 6,
    "speculation_length": 3,
    "drafted": [7, 8, 9],
    "accepted": 1,
    "emitted": [7, 5],
    "p_target": [0.9, 0.1, 0.2],
    "q_draft": [0.8, 0.5, 0.3],
    "draft_forwards": 3,
    "target_forwards": 1,
    "t_start": 0.5,
    "t_end": 0.75,
    "draft_ms": 100.0,
    "verify_ms": 150.0,
    "oracle_sl": 1,
    "extra": {"u": [0.1, 0.95, 0.4]},
}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("iteration", 3, "below the run's 3 records"),
        ("position", 3, "at least the prompt's 4"),
        ("position", 11, "past the prompt and max_new_tokens"),
        ("speculation_length", 2, "more tokens than 'speculation_length'"),
        ("emitted", [8, 5], "the accepted drafts"),
        ("emitted", [7, 5, 6], "at most one token"),
        ("drafted", [7, 8, 100], "below the vocabulary"),
        ("p_target", [0.9, 0.1], "one probability"),
        ("q_draft", [0.8, 1.5, 0.3], "one probability"),
        ("oracle_sl", 9, "'oracle_sl'"),
        ("t_end", 0.25, "'t_end' must not come before"),
        ("verify_ms", -1.0, "must not be negative"),
        ("draft_forwards", 2**63, "'draft_forwards' must be a whole number from 0 to 2\\*\\*63 - 1"),
        ("t_start", float("inf"), "'t_start' must be a finite number"),
        ("method", "sssd", "another method"),
        ("extra", {"u": [0.1, float("nan"), 0.4]}, "extra 'u'"),
        ("extra", {"u": [0.1]}, "extra 'u' must hold one number"),
        ("extra", {"stop": "tired"}, "extra 'stop'"),
        ("extra", {"tree_tokens": []}, "extra '[a-z_]+' is missing"),
    ],
)
def test_from_dict_refuses_a_field_out_of_its_bounds_naming_it(field, value, message):
    assert IterationRecord.from_dict(GOOD, BOUNDS).to_dict()["extra"] == GOOD["extra"]
    with pytest.raises(SpecvizError, match=message):
        IterationRecord.from_dict({**GOOD, field: value}, BOUNDS, "record 2")


TREE = {"tree_tokens": [7, 8, 9], "tree_parents": [-1, 0, 0], "tree_scores": [0.5, 0.25, 0.25]}
TREE |= {"tree_sources": ["input"] * 3, "sources": ["input"] * 3}


@pytest.mark.parametrize(
    ("path", "is_path"), [([], True), ([0], True), ([0, 2], True), ([1], False), ([0, 1, 2], False), ([0, 3], False)]
)
def test_from_dict_checks_that_accepted_path_walks_down_the_tree_from_its_root(path, is_path):
    record = {**GOOD, "extra": {**GOOD["extra"], **TREE, "accepted_path": path}}
    if is_path:
        assert IterationRecord.from_dict(record, BOUNDS).tree().accepted_path == tuple(path)
    else:
        with pytest.raises(SpecvizError, match="'accepted_path' must be a path of the tree"):
            IterationRecord.from_dict(record, BOUNDS)


PASS = {"layers": 4, "stream_layers": 2, "gamma": 3, "committed_rows": 1}  # a fused streaming pass's shape


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({}, None),
        ({"stream_layers": 5}, "'stream_layers' must be from 1 to 'layers'"),
        ({"committed_rows": 0}, "'committed_rows' must be at least 1"),
        ({"gamma": -1}, "extra 'gamma' must be a whole number"),
        ({"layers": None}, "extra 'layers' is missing"),
    ],
)
def test_a_streaming_pass_shape_round_trips_and_is_checked(shape, message):
    pass_ = {k: v for k, v in {**PASS, **shape}.items() if v is not None}
    record = {**GOOD, "extra": {**GOOD["extra"], **pass_}}
    if message is None:
        r = IterationRecord.from_dict(record, BOUNDS)
        assert r.extras(extras.StreamingPassExtra) == extras.StreamingPassExtra(4, 2, 3, 1)
        assert IterationRecord.from_dict(json.loads(json.dumps(r.to_dict())), BOUNDS) == r
    else:
        with pytest.raises(SpecvizError, match=message):
            IterationRecord.from_dict(record, BOUNDS)
