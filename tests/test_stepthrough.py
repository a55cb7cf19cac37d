"""The step-through of one iteration: it states the test each draft met exactly as the run applied it,
and its recomputed distributions reproduce the run's own p(x) and q(x), for every method."""

from __future__ import annotations

import pytest

import specviz
from specviz.errors import SpecvizError
from specviz.methods import get_method, method_names
from specviz.plots.step import step_distributions
from specviz.stepthrough import explain_iteration, recompute_for
from specviz.ui.stepthrough import step_html

PROMPT = "def fibonacci(n):"


def run(pair, method, **kw):
    ids = specviz.encode_prompt(pair, PROMPT)
    return ids, list(specviz.run(method, pair, ids, max_new_tokens=24, **kw))


@pytest.mark.parametrize("method", method_names())
def test_every_iteration_of_every_method_is_explained_as_it_ran(perturbed_pair, method):
    ids, records = run(perturbed_pair, method)
    mode = recompute_for(get_method(method), perturbed_pair, {})
    for i, r in enumerate(records):
        step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute=mode)
        assert step.accepted == r.accepted and len(step.checks) == len(r.drafted)
        assert [c.p for c in step.checks] == list(r.p_target or [None] * len(r.drafted))
        assert [c.accepted for c in step.checks] == [j < r.accepted for j in range(len(r.drafted))]
        if step.p_check is not None:
            assert step.p_check < 1e-3, (method, i, step.p_check)  # the rerun reproduces the run
        for c in step.checks:  # greedy: accepted exactly when the draft is the target's most likely token
            if c.tested and mode:
                assert (c.p_top[0][0] == c.token) == c.accepted, (method, i, c)
        if len(r.emitted) > r.accepted and mode:  # the target's own token is its argmax
            assert step.target_top[0][0] == step.target_token_id
        if mode == "target+draft" and r.drafted:
            assert all(c.q_top for c in step.checks) and step.source == "recomputed"
        if not mode:  # a method verifying with another model than the target: explained from the record
            assert step.source.startswith("from the record only") and not any(c.p_top for c in step.checks)
        html = step_html(step)
        assert f"Accepted {r.accepted} of {len(r.drafted)}" in html
        step_distributions(step)


def test_sampling_shows_the_uniform_each_draft_was_tested_with(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla", temperature=1.0, seed=3)
    corrections = 0
    for i in range(len(records)):
        step = explain_iteration(records, i, ids, {"temperature": 1.0}, pair=perturbed_pair, recompute="target+draft")
        for c in step.checks:
            if c.tested:  # the rule as specviz.verify applied it: u < min(1, p/q) accepts
                assert c.u is not None and (c.u * c.q < c.p) == c.accepted
                assert ("<" if c.accepted else "≥") in c.rule
        if step.target_role == "correction":
            corrections += 1
            assert "norm(max(0, p − q))" in step.target_from
            assert 0 < sum(v for _, _, v in step.target_top) <= 1.0 + 1e-6
    assert corrections > 0


def test_a_race_from_elsewhere_is_explained_from_its_records(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla")
    step = explain_iteration(records, 1, ids, {"temperature": 0.0}, token_text=lambda t: f"<{t}>")
    assert step.source.startswith("from the record only")
    assert [c.text for c in step.checks] == [f"<{t}>" for t in records[1].drafted]
    assert "rollback" in " ".join(step.cache)
    assert "record only" in step_distributions(step).layout.annotations[0].text


def test_an_iteration_that_does_not_exist_is_one_clear_error(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla")
    with pytest.raises(SpecvizError, match="iterations 0 to"):
        explain_iteration(records, len(records), ids, {}, pair=perturbed_pair, recompute="target")
    with pytest.raises(SpecvizError, match="do not follow"):
        explain_iteration(records[1:], 0, ids, {}, pair=perturbed_pair, recompute="target")


@pytest.mark.parametrize("method", ["vanilla", "sssd"])
def test_the_cache_story_names_the_draft_models_cache_only_where_one_ran(perturbed_pair, method):
    """SSSD drafts from text: its step-through said "the draft's cache is cut" (issue 38, item 8)."""
    ids, records = run(perturbed_pair, method)
    i = next(i for i, r in enumerate(records) if r.drafted)
    mode = recompute_for(get_method(method), perturbed_pair, {})
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute=mode)
    rollback = next(line for line in step.cache if line.startswith("rollback"))
    assert ("draft model's cache is cut" in rollback) == (method == "vanilla")
    assert ("no draft model ran" in rollback) == (method == "sssd")
    shown = step_html(step, method)
    assert f"iteration {i + 1} of" in shown and "within 0.0e+00" not in shown
    assert "equal the run's" in shown or "differ from the run's by at most" in shown
    assert step_distributions(step).layout.title.text.startswith(
        f"The distributions behind one iteration: iteration {i + 1} "
    )
