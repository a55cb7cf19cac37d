"""Sampling is lossless for every method, multi-token drafts included: the first five tokens of each
method follow the target's distribution exactly.

Each method drafts γ = 3 tokens (PEARL: a window of 3; SSSD and Speculative Streaming: trees with
siblings at every level) under a budget of γ + 2 = 5 tokens, so the budget never shortens the first
draft. With top_k = 3 the target alone gives the exact probability of each of the 3^5 = 243 outputs.
Each method's frequencies over RUNS fixed seeds are compared with them (chi-square) on windows of the
output: every pair of adjacent tokens (9 outcomes: power for an error at one position) and the first
and the last four tokens (81 outcomes). Registry-driven, like the parity tests.

The records show that the runs reach what a wrong rule would hide in: drafts of 2 or more tokens,
rejections after an acceptance (the residual norm(max(0, p - q)) at position >= 2), bonus tokens
after 2 or more acceptances and, in trees, later siblings accepted and several siblings rejected,
below the root too. Negative controls break each rule at position >= 2 only: the check fails.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

import specviz
from specviz import verify as verify_module
from specviz.methods import get_method, speculative
from specviz.records import IterationRecord
from specviz.sampling import SamplingConfig, probabilities, sample
from tests.conftest import own_methods
from tests.test_verify import chi_square_pvalue

CFG = SamplingConfig(temperature=0.5, top_k=3)
GAMMA = 3  # tokens drafted per iteration
BUDGET = GAMMA + 2  # max_new_tokens: the first iteration's draft is never cut by the budget
RUNS = 600  # seeds per method: enough for each negative control below to fail with a p-value under 1e-8
MIN_PVALUE = 1e-4  # per window: 6 windows x 12 methods raise a false alarm for under 1 % of seed sets
WINDOWS = [(0, 2), (1, 3), (2, 4), (3, 5), (0, 4), (1, 5)]  # output tokens [a, b) compared jointly
MIN_EVENTS = 10  # each event below must happen this often in a method's runs
# Found by a search over the tiny target: token 423 recurs, and what follows each occurrence is among
# the target's top 3 after the prompt (509, 163), then after that token (509 or 493), and so on. So
# prompt lookup copies drafts the target may accept, and SSSD's tree has siblings at the root (163,
# 509) and below (493, 509 after 509).
PROMPT = [481, 510, 201, 409, 423, 509, 509, 493, 423, 509, 493, 493, 423, 163, 493, 493, 423]
# γ = 3 and trees with siblings at every level, by option name: each method takes those it has.
OPTIONS = {
    "speculation_length": GAMMA,  # vanilla, heuristic, OSD, prompt lookup: γ; Speculative Streaming: streams (depth)
    "max_speculation_length": GAMMA,  # DISCO, confidence: SL_max
    "window": GAMMA,  # PEARL: pre-verify tests x_1, post-verify x_2..x_γ
    "concurrent": False,  # PEARL: the same tokens as concurrent (test_pearl), at a steadier pace
    "tree_width": 3,  # Speculative Streaming, EAGLE: the top 3 tokens are children of every expanded node
    "tree_nodes": 9,
}
# SSSD: S = 8 tree nodes, paths of up to γ tokens, from the prompt and output (no datastore fits the tiny tokenizer).
# EAGLE: γ levels of 3 children each, reranked to 9 nodes (the untrained head: no head fits the tiny target).
OWN_OPTIONS = {
    "sssd": {"speculation_length": 8, "max_depth": GAMMA, "sources": "input"},
    "eagle": {"depth": GAMMA},
}
METHODS = [s.name for s in own_methods() if s.supports_sampling]
DRAFTS_NOTHING = {"autoregressive": "the baseline drafts nothing: every token is the target's own"}

LONG_DRAFT = "a draft of 2 or more tokens"
REJECTED_LATER = "a rejection after an acceptance"
BONUS = "a bonus token after 2 or more acceptances"
LATER_SIBLING, SIBLINGS_REJECTED = "a later sibling accepted", "several siblings rejected"
BELOW = " below the root"
CHAIN_EVENTS = (LONG_DRAFT, REJECTED_LATER, BONUS)
TREE_EVENTS = (LATER_SIBLING, LATER_SIBLING + BELOW, SIBLINGS_REJECTED, SIBLINGS_REJECTED + BELOW)


def options(method: str) -> dict:
    """The method's options from OPTIONS, then its own."""
    return {**get_method(method).select(OPTIONS), **OWN_OPTIONS.get(method, {})}


def sampled_runs(method: str, pair) -> list[list[IterationRecord]]:
    """The records of RUNS runs of `method`, seeds 0..RUNS-1."""
    sampling = dict(max_new_tokens=BUDGET, temperature=CFG.temperature, top_k=CFG.top_k, **options(method))
    return [list(specviz.run(method, pair, PROMPT, seed=seed, **sampling)) for seed in range(RUNS)]


@torch.inference_mode()
def exact_distribution(pair) -> dict[tuple[int, ...], float]:
    """p(x_1..x_BUDGET | PROMPT) of every output that top-k sampling can give, from the target alone."""
    paths = {(): 1.0}
    for _ in range(BUDGET):
        grown = {}
        for ids, w in paths.items():
            logits = pair.target(input_ids=torch.tensor([PROMPT + list(ids)], device=pair.device)).logits[0, -1]
            p = probabilities(logits, CFG)
            for x in torch.nonzero(p).flatten().tolist():
                grown[(*ids, x)] = w * float(p[x])
        paths = grown
    assert not any(set(ids) & set(pair.eos_token_ids) for ids in paths), "EOS would end runs early: pick another prompt"
    return paths


@pytest.fixture(scope="module")
def exact(reduced_pair):
    return exact_distribution(reduced_pair)


@pytest.fixture(scope="module")
def runs(reduced_pair):
    """method -> its runs on the reduced pair (a noisy copy of the target whose head leaves out a
    quarter of the vocabulary: drafts are often rejected, and the residual then holds tokens with
    q = 0), run once for every test that reads them."""
    done: dict[str, list[list[IterationRecord]]] = {}

    def of(method: str) -> list[list[IterationRecord]]:
        if method not in done:
            done[method] = sampled_runs(method, reduced_pair)
        return done[method]

    return of


def assert_follows_target(runs: list[list[IterationRecord]], exact: dict[tuple[int, ...], float], label: str) -> None:
    """Each window of the outputs against the target's exact marginal (chi-square; the outcomes
    expected fewer than 5 times are pooled into one)."""
    outputs = [tuple(t for r in records for t in r.emitted) for records in runs]
    assert {len(o) for o in outputs} == {BUDGET}
    for a, b in WINDOWS:
        expected: dict[tuple[int, ...], float] = defaultdict(float)
        for ids, w in exact.items():
            expected[ids[a:b]] += w * len(outputs)
        counts = Counter(o[a:b] for o in outputs)
        impossible = sorted(set(counts) - set(expected))
        where = f"{label}: tokens {a + 1}-{b}"
        assert not impossible, f"{where} were {impossible[0]}, which top-{CFG.top_k} sampling cannot produce"
        cells = [[k] for k, e in expected.items() if e >= 5] + [[k for k, e in expected.items() if e < 5]]
        cells = [c for c in cells if c]
        observed = np.array([sum(counts[k] for k in c) for c in cells], float)
        stat, pvalue = chi_square_pvalue(observed, np.array([sum(expected[k] for k in c) for c in cells]))
        assert pvalue > MIN_PVALUE, f"{where} do not follow p (chi2={stat:.1f}, p-value={pvalue:.2g})"


def tree_of(record: IterationRecord) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The parents of a tree method's tree and the path it kept (None: no tree in this iteration)."""
    tree = record.tree()
    return (tree.tree_parents, tree.accepted_path[: record.accepted]) if tree and tree.tree_parents else None


def events(record: IterationRecord) -> set[str]:
    """What this iteration did that a wrong sampling rule would get wrong."""
    k, n = len(record.drafted), record.accepted
    own = len(record.emitted) == n + 1  # the target's own token was emitted (the budget did not cut it)
    found = {LONG_DRAFT} if k >= 2 else set()
    if own and 1 <= n < k:
        found.add(REJECTED_LATER)
    if own and n == k >= 2:
        found.add(BONUS)
    if (tree := tree_of(record)) is not None:
        parents, path = tree

        def children(node: int) -> list[int]:
            return [i for i, p in enumerate(parents) if p == node]

        for parent, node in itertools.pairwise((-1, *path)):
            if children(parent).index(node) > 0:
                found.add(LATER_SIBLING + (BELOW if parent >= 0 else ""))
        last = path[-1] if path else -1
        if own and len(children(last)) >= 2:  # every child of the path's end was tried and rejected
            found.add(SIBLINGS_REJECTED + (BELOW if last >= 0 else ""))
    return found


@pytest.mark.parametrize("method", METHODS)
def test_sampled_tokens_follow_the_target_distribution(method, runs, exact):
    assert_follows_target(runs(method), exact, method)


@pytest.mark.parametrize("method", METHODS)
def test_the_runs_reach_multi_token_drafts_rejections_and_bonus_tokens(method, runs):
    """The distribution test means something: each path of the acceptance rule ran often."""
    seen = Counter(e for records in runs(method) for r in records for e in events(r))
    if method in DRAFTS_NOTHING:
        assert not seen, DRAFTS_NOTHING[method]
        return
    is_tree = any(tree_of(r) for records in runs(method) for r in records)
    too_rare = {e: seen[e] for e in CHAIN_EVENTS + (TREE_EVENTS if is_tree else ()) if seen[e] < MIN_EVENTS}
    assert not too_rare, f"{method}: too rare in {RUNS} runs: {too_rare}"


def test_the_reduced_draft_cannot_propose_tokens_the_target_samples(reduced_pair, exact):
    """The reduced pair tests what it should: some outputs need a token with q = 0."""
    head = set(reduced_pair.draft.lm_head.vocab_ids.tolist())
    assert any(not set(ids) <= head for ids in exact), "every output lies inside the draft's head: pick another prompt"


# -- negative controls: a rule broken at position >= 2 only, and the check says so ---------------

FAILS = "do not follow p|cannot produce"


@pytest.mark.parametrize("method", ["vanilla", "prompt_lookup"])  # a draft model's q, and one-hot drafts
def test_the_check_catches_a_residual_broken_after_an_acceptance(method, reduced_pair, exact, monkeypatch):
    """Wrong: after x_1 is accepted, the token after a rejected x_n comes from p, not from norm(max(0, p - q))."""
    right = verify_module._residual

    def wrong(p_n, q, n, drafted):
        return p_n if n >= 1 else right(p_n, q, n, drafted)

    monkeypatch.setattr(verify_module, "_residual", wrong)
    with pytest.raises(AssertionError, match=FAILS):
        assert_follows_target(sampled_runs(method, reduced_pair), exact, method)


@pytest.mark.parametrize("source", ["q", "residual"])
def test_the_check_catches_a_bonus_token_from_the_wrong_distribution(source, reduced_pair, exact, monkeypatch):
    """Wrong: after k >= 2 accepted drafts the bonus token comes from q_k (the last draft's
    distribution) or from the residual at x_k (as if x_k had been rejected), not from p_{k+1}."""
    right = verify_module.verify

    def wrong(drafted, target_logits, q, cfg, generator=None):
        v, k = right(drafted, target_logits, q, cfg, generator), len(drafted)
        if k >= 2 and v.accepted == k and v.next_token is not None:
            p = probabilities(target_logits, cfg)  # [k+1, V]
            bonus = q[k - 1] if source == "q" else verify_module._residual(p[k - 1], q, k - 1, drafted)
            v = dataclasses.replace(v, next_token=int(sample(bonus, generator)))
        return v

    monkeypatch.setattr(speculative, "verify", wrong)
    with pytest.raises(AssertionError, match=FAILS):
        assert_follows_target(sampled_runs("vanilla", reduced_pair), exact, "vanilla")


def test_the_check_catches_a_tree_rejection_that_keeps_p(reduced_pair, exact, monkeypatch):
    """Wrong (SpecInfer's recursive rejection without its update): below the root, each sibling is
    tested against the parent's p itself rather than what the rejected siblings before it left of p.
    SSSD drafts deterministically (one-hot q), so the test of x is u < p(x)."""
    right = verify_module._try_children

    def wrong(p, children, tokens, q, generator):
        if 0 in children:  # the root's children (node 0 is always one of them): the right rule
            return right(p, children, tokens, q, generator)
        for c in children:
            if float(torch.rand(1, generator=generator, device=p.device)) < float(p[tokens[c]]):
                return c, p
        left = p.clone()
        left[[tokens[c] for c in children]] = 0.0
        return None, left / left.sum() if float(left.sum()) > 0 else p

    monkeypatch.setattr(verify_module, "_try_children", wrong)
    with pytest.raises(AssertionError, match=FAILS):
        assert_follows_target(sampled_runs("sssd", reduced_pair), exact, "sssd")
