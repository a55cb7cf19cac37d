"""The KV-cache module: after a rejection the cache holds exactly the accepted prefix."""

from __future__ import annotations

import pytest
import torch

import specviz
from specviz.models import kv
from specviz.models.kv import CachedLM


@torch.inference_mode()
def test_truncate_keeps_exactly_the_prefix(self_pair):
    lm = CachedLM(self_pair.target)
    lm.forward([5, 6, 7, 8, 9, 10], n_logits=1)
    lm.truncate(3)
    assert lm.tokens == [5, 6, 7] and lm.cache_length() == 3
    # What the cache holds is right, not just its length: continuing from it equals a fresh pass.
    after = lm.forward([11, 12], n_logits=2)
    fresh = self_pair.target(input_ids=torch.tensor([[5, 6, 7, 11, 12]])).logits[0, -2:]
    torch.testing.assert_close(after, fresh, rtol=1e-4, atol=1e-5)


def test_every_rollback_in_a_run_leaves_cache_and_tokens_in_step(perturbed_pair, monkeypatch):
    seen = []
    original = CachedLM.truncate

    def checked(self, length):
        original(self, length)
        seen.append((len(self.tokens), self.cache_length(), length))

    monkeypatch.setattr(kv.CachedLM, "truncate", checked)
    result = specviz.generate("vanilla", perturbed_pair, "def f(x):", max_new_tokens=30, speculation_length=4)
    assert any(r.rejected for r in result.records)
    assert seen and all(tokens == cache == length for tokens, cache, length in seen)


@pytest.mark.parametrize("method", ["vanilla", "heuristic"])
def test_each_iteration_costs_one_target_forward_and_no_recomputation(method, perturbed_pair, monkeypatch):
    fed = []
    original = CachedLM.forward

    def counting(self, new_tokens, n_logits=1):
        if self.model is perturbed_pair.target:
            fed.append(len(new_tokens))
        return original(self, new_tokens, n_logits)

    monkeypatch.setattr(kv.CachedLM, "forward", counting)
    result = specviz.generate(method, perturbed_pair, "def f(x):", max_new_tokens=30, speculation_length=4)
    assert len(fed) == len(result.records)
    # The target sees the prompt once, then per iteration the one token it emitted itself last
    # time plus the drafts it verifies: accepted drafts are never fed again.
    drafted = sum(len(r.drafted) for r in result.records)
    assert sum(fed) == len(result.prompt_ids) + (len(result.records) - 1) + drafted
