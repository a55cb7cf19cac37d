"""A new tree method is one file: a TreeDrafter and a loop of `tree_step`, registered, and the
library runs it losslessly with no edit elsewhere (shown here with a toy method registered by this
test and removed after it)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import pytest

import specviz
from specviz import methods
from specviz.cost.families import TREE
from specviz.methods.ngram_tree import TokenTree
from specviz.methods.trees import TreeContext, tree_step
from specviz.models.kv import CachedLM


class FollowersDrafter:
    """Toy TreeDrafter: the two tokens that most often followed the last token so far, each with the
    token that most often followed it as a child (a 4-node tree at most)."""

    hidden_layer = None

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        ids, tree = context.ids, TokenTree()

        def follows(t: int) -> list[int]:
            return [b for (a, b), _ in Counter(itertools.pairwise(ids)).most_common() if a == t]

        for first in follows(ids[-1])[:2]:
            if len(tree) >= min(budget, 2 * context.depth) or context.depth < 1:
                break
            tree.tokens.append(first)
            tree.parents.append(-1)
            tree.scores.append(1.0)
            tree.sources.append("followers")
            second = follows(first)[:1]
            if second and context.depth >= 2 and len(tree) < budget:
                tree.parents.append(len(tree) - 1)  # the node just added
                tree.tokens.append(second[0])
                tree.scores.append(0.5)
                tree.sources.append("followers")
        return tree

    def kept(self, path, hidden) -> None:
        pass


@dataclass(frozen=True)
class FollowersOptions:
    tree_nodes: int = 4


def followers(dec, opts: FollowersOptions):
    target, drafter = CachedLM(dec.pair.target), FollowersDrafter()
    while not dec.done:
        yield tree_step(dec, target, drafter, opts.tree_nodes)


@pytest.fixture
def toy_method():
    methods.register(
        "followers-toy",
        label="Followers (toy)",
        description="A toy tree method.",
        paper="this test",
        options=FollowersOptions,
        family=TREE,
        needs_draft=False,
    )(followers)
    yield "followers-toy"
    methods._REGISTRY.pop("followers-toy")


@pytest.mark.parametrize("prompt", ["def fibonacci(n):", [5, 17, 300, 42, 42, 42, 7, 42, 42]])
def test_a_toy_tree_method_is_lossless_with_no_edit_elsewhere(toy_method, perturbed_pair, prompt):
    assert toy_method in methods.method_names()
    for max_new in (1, 7, 40):
        ref = specviz.generate("autoregressive", perturbed_pair, prompt, max_new_tokens=max_new).summary.output_ids
        run = specviz.generate(toy_method, perturbed_pair, prompt, max_new_tokens=max_new)
        assert run.summary.output_ids == ref
    records = list(specviz.run(toy_method, perturbed_pair, prompt, max_new_tokens=40))
    assert any(r.drafted for r in records) and all(
        r.tree().tree_sources == ("followers",) * len(r.tree().tree_tokens) for r in records
    )
    sampled = specviz.generate(toy_method, perturbed_pair, prompt, max_new_tokens=20, temperature=1.0, seed=3)
    assert sampled.summary.new_tokens == 20
