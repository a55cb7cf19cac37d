"""Sampling is lossless for every method: the first two tokens follow the target's distribution.

With top_k = 4 the target's distribution over the first two tokens has 16 outcomes whose exact
probabilities we compute from the target alone; each method's empirical frequencies over many
seeded runs must match them (chi-square). Registry-driven, like the parity tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz
from specviz.methods import all_methods, get_method
from specviz.sampling import SamplingConfig, probabilities
from tests.test_verify import chi_square_pvalue

CFG = SamplingConfig(temperature=1.0, top_k=4)
PROMPT = [5, 17, 300, 42, 5, 17]  # repeats itself, so prompt lookup has something to copy
RUNS = 1200


@torch.inference_mode()
def exact_two_token_distribution(pair) -> dict[tuple[int, int], float]:
    def dist(ids):
        logits = pair.target(input_ids=torch.tensor([ids], device=pair.device)).logits[0, -1]
        return probabilities(logits, CFG)

    p1 = dist(PROMPT)
    out = {}
    for x1 in torch.nonzero(p1).flatten().tolist():
        p2 = dist(PROMPT + [x1])
        for x2 in torch.nonzero(p2).flatten().tolist():
            out[(x1, x2)] = float(p1[x1] * p2[x2])
    return out


def test_the_reduced_draft_cannot_propose_tokens_the_target_samples(reduced_pair):
    """The reduced pair tests what it should: some outcomes need a token with q = 0."""
    head = set(reduced_pair.draft.lm_head.vocab_ids.tolist())
    outside = [k for k in exact_two_token_distribution(reduced_pair) if not set(k) <= head]
    assert outside, "every sampled outcome lies inside the draft's head: pick other dropped ids"


@pytest.mark.parametrize("kind", ["perturbed", "reduced"])
@pytest.mark.parametrize("method", [s.name for s in all_methods() if s.supports_sampling])
def test_sampled_tokens_follow_the_target_distribution(method, kind, tiny_pairs):
    pair = tiny_pairs[kind]
    exact = exact_two_token_distribution(pair)
    options = get_method(method).select({"speculation_length": 2})
    counts = dict.fromkeys(exact, 0)
    for seed in range(RUNS):
        records = specviz.run(method, pair, PROMPT, max_new_tokens=2, temperature=1.0, top_k=4, seed=seed, **options)
        key = tuple(t for r in records for t in r.emitted)
        assert key in counts, f"{method} emitted {key}, which the target's top-4 sampling cannot produce"
        counts[key] += 1
    keys = list(exact)
    stat, pvalue = chi_square_pvalue(np.array([counts[k] for k in keys], float), np.array([exact[k] for k in keys]) * RUNS)
    assert pvalue > 1e-3, f"{method}: sampled tokens do not follow p (chi2={stat:.1f}, p-value={pvalue:.2g})"
