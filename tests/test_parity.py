"""Greedy parity: every registered method emits exactly the target's autoregressive tokens.

Registry-driven: a method added later is covered without touching this file. Four tiny pairs
exercise every path: a random draft (nearly everything rejected), the target drafting for itself
(everything accepted), a perturbed copy (some of each) and a perturbed copy whose head leaves out
a quarter of the vocabulary (q = 0 there; drafted through its lean decoding pass).
"""

from __future__ import annotations

import dataclasses

import pytest

import specviz
from specviz.methods import get_method
from tests.conftest import own_methods

PROMPTS = ["def fibonacci(n):", "Janet's ducks lay 16 eggs per day.", "x", [5, 17, 300, 42, 42, 42, 7]]
METHODS = [s.name for s in own_methods()]


def outputs(method, pair, prompt, **kw):
    """Run `method` with gamma = 4 when it takes a speculation length."""
    return specviz.generate(method, pair, prompt, **get_method(method).select({"speculation_length": 4}), **kw)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["random", "self", "perturbed", "reduced"])
def test_greedy_output_equals_autoregressive(method, kind, tiny_pairs):
    pair = tiny_pairs[kind]
    for prompt in PROMPTS:
        for max_new in (1, 7, 40):  # 7 with gamma 4: the budget runs out in the middle of a draft
            ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=max_new).summary.output_ids
            got = outputs(method, pair, prompt, max_new_tokens=max_new)
            assert got.summary.output_ids == ref, (
                f"{method} on {kind} pair, prompt {prompt!r}, max_new_tokens={max_new}"
            )
            assert got.summary.new_tokens == max_new  # these pairs never emit EOS (id 0) here


@pytest.mark.parametrize("method", METHODS)
def test_eos_inside_a_draft_ends_the_run_like_autoregressive(method, tiny_pairs):
    """Declare as EOS a token that the target emits mid-run; with the self-drafting pair it lands
    inside an accepted draft, and every method must stop right after it."""
    for kind in ("self", "perturbed"):
        pair = tiny_pairs[kind]
        free = specviz.generate("autoregressive", pair, PROMPTS[0], max_new_tokens=40).summary.output_ids
        eos = free[9]
        stop_at = free.index(eos)
        pair_eos = dataclasses.replace(pair, eos_token_ids=(eos,))
        got = outputs(method, pair_eos, PROMPTS[0], max_new_tokens=40)
        assert got.summary.output_ids == free[: stop_at + 1]
        assert got.summary.stop_reason == "eos"
        assert got.records[-1].stop == "eos"


def test_the_pairs_exercise_accept_and_reject_paths(tiny_pairs):
    def run(kind):
        return specviz.generate("vanilla", tiny_pairs[kind], PROMPTS[0], max_new_tokens=60).summary

    everything = run("self")
    assert everything.accepted == everything.drafted > 0
    some = run("perturbed")
    assert 0 < some.accepted < some.drafted
    rejections = [
        r
        for r in specviz.generate("vanilla", tiny_pairs["perturbed"], PROMPTS[1], max_new_tokens=60).records
        if r.rejected
    ]
    assert rejections, "the perturbed pair must reject some drafts"


def test_eos_inside_accepted_drafts_truncates_the_record(tiny_pairs):
    pair = tiny_pairs["self"]
    free = specviz.generate("autoregressive", pair, PROMPTS[0], max_new_tokens=40).summary.output_ids
    eos = free[6]
    result = specviz.generate(
        "vanilla", dataclasses.replace(pair, eos_token_ids=(eos,)), PROMPTS[0], max_new_tokens=40, speculation_length=8
    )
    last = result.records[-1]
    assert last.emitted[-1] == eos
    assert last.accepted == len(last.drafted) == len(last.emitted)  # nothing after EOS survives
    assert len(last.p_target) == len(last.q_draft) == len(last.drafted)
