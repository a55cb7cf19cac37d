"""Token trees: the 4D mask, one-pass tree logits equal sequential logits, keep-indices, and the
tree acceptance rule (greedy walk; recursive rejection over siblings distributed as p)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specviz.models.kv import BatchCachedLM, CachedLM, tree_allowed, tree_depths
from specviz.sampling import SamplingConfig
from specviz.verify import verify_tree
from tests.test_verify import T1, N, assert_distributed_as, logits_of

# A hand-built tree over 3 committed tokens:   root ─ a(0) ─ b(1) ─ d(3)
#                                                  └ c(2) ─ e(4)
TOKENS = [10, 11, 12, 13, 14]
PARENTS = [-1, 0, -1, 1, 2]
PATHS = {0: [10], 1: [10, 11], 2: [12], 3: [10, 11, 13], 4: [12, 14]}  # tokens from the root to each node


def test_mask_lets_each_node_see_the_prefix_and_its_ancestors_only():
    seen = (
        tree_allowed(past=2, m=1, parents=PARENTS).int().tolist()
    )  # rows: pending token, then nodes; cols: 2 cached, 1 pending, 5 nodes
    assert seen == [
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],  # a
        [1, 1, 1, 1, 1, 0, 0, 0],  # b: a, b
        [1, 1, 1, 0, 0, 1, 0, 0],  # c
        [1, 1, 1, 1, 1, 0, 1, 0],  # d: a, b, d
        [1, 1, 1, 0, 0, 1, 0, 1],  # e: c, e
    ]
    assert tree_depths(PARENTS) == [1, 2, 1, 3, 2]
    with pytest.raises(ValueError):
        tree_depths([1, -1])  # a child before its parent


@torch.inference_mode()
def test_tree_logits_equal_sequential_logits_and_keep_path_leaves_the_accepted_cache(self_pair):
    model = self_pair.target
    prefix = [5, 6, 7, 8]
    lm = CachedLM(model)
    lm.forward(prefix[:2])
    logits = lm.forward_tree(prefix[2:], TOKENS, PARENTS)  # two pending committed tokens, then the tree

    def sequential(ids):
        return model(input_ids=torch.tensor([ids])).logits[0, -1]

    torch.testing.assert_close(logits[0], sequential(prefix), rtol=1e-4, atol=1e-4)
    for node, path in PATHS.items():
        torch.testing.assert_close(logits[1 + node], sequential(prefix + path), rtol=1e-4, atol=1e-4)
    lm.keep_path(len(prefix), [0, 1, 3])
    assert lm.tokens == [*prefix, 10, 11, 13] and lm.cache_length() == 7
    after = lm.forward([20, 21], n_logits=2)  # what the cache holds is the accepted path's keys and values
    fresh = model(input_ids=torch.tensor([[*prefix, 10, 11, 13, 20, 21]])).logits[0, -2:]
    torch.testing.assert_close(after, fresh, rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_keep_path_of_a_second_branch_and_of_nothing(self_pair):
    model = self_pair.target
    for path, kept in (([2, 4], [12, 14]), ([], [])):
        lm = CachedLM(model)
        lm.forward_tree([5, 6, 7], TOKENS, PARENTS)
        lm.keep_path(3, path)
        assert lm.tokens == [5, 6, 7, *kept] and lm.cache_length() == 3 + len(kept)
        after = lm.forward([30])
        torch.testing.assert_close(
            after[0], model(input_ids=torch.tensor([[5, 6, 7, *kept, 30]])).logits[0, -1], rtol=1e-4, atol=1e-4
        )
    with pytest.raises(ValueError):
        lm.keep([0, 0])


def test_greedy_walk_follows_the_target_argmax():
    V = 16
    logits = torch.zeros(6, V)
    logits[0, 12] = 5  # root -> c
    logits[3, 14] = 5  # c -> e
    logits[5, 3] = 5  # after e: bonus token 3
    v = verify_tree(TOKENS, PARENTS, logits, None, SamplingConfig())
    assert (v.path, v.next_token) == ((2, 4), 3)
    drafted, verdict = v.linear(TOKENS, PARENTS)
    assert drafted == [12, 14] and (verdict.accepted, verdict.next_token) == (2, 3)
    logits[1, 11] = 5  # would continue a -> b, but the root picks 9: nothing accepted
    logits[0] = 0
    logits[0, 9] = 5
    v = verify_tree(TOKENS, PARENTS, logits, None, SamplingConfig())
    assert (v.path, v.next_token) == ((), 9)
    assert v.linear(TOKENS, PARENTS)[0] == [10, 11, 13]  # the record shows the first line as rejected


# Sampling: two siblings at the root (tokens 0 and 1), a child of the first (token 2).
P_ROOT, P_A, P_B = [0.3, 0.2, 0.1, 0.4], [0.1, 0.2, 0.6, 0.1], [0.25, 0.25, 0.25, 0.25]


def emitted_frequencies(rule, q_root: list[float] | None, n: int = N):
    """First emitted token overall, and the second one whenever child a (node 0) was accepted."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.stack([logits_of(P_ROOT), logits_of(P_A), logits_of(P_B), logits_of(P_B)])  # [4, V]
    first, second = np.zeros(4), np.zeros(4)
    q_t = torch.tensor(q_root) if q_root is not None else None
    for _ in range(n):
        if q_t is None:
            tokens, q = [0, 1, 2], None  # deterministic siblings: one-hot q
        else:  # siblings drawn independently from q_root; the grandchild deterministic (q one-hot)
            a, b = torch.multinomial(q_t, 2, replacement=True, generator=gen).tolist()
            tokens, q = [a, b, 2], torch.stack([q_t, q_t, torch.nn.functional.one_hot(torch.tensor(2), 4).float()])
        v = rule(tokens, [-1, -1, 0], logits, q, T1, gen)
        emitted = [tokens[i] for i in v.path] + [v.next_token]
        first[emitted[0]] += 1
        if v.path[:1] == (0,):
            second[emitted[1]] += 1
    return first, second


@pytest.mark.parametrize("q_root", [None, [0.1, 0.6, 0.2, 0.1]])
def test_tree_sampling_yields_p_at_every_level(q_root):
    first, second = emitted_frequencies(verify_tree, q_root)
    assert_distributed_as(first, P_ROOT)
    assert_distributed_as(second, P_A)  # after child a the next token follows p at a


def test_the_check_catches_a_rule_without_residual():
    """Negative control: trying each sibling with its plain p (no residual) over-emits siblings."""

    def naive(tokens, parents, logits, q, cfg, gen):
        p = torch.softmax(logits[0], -1)
        for c in (0, 1):
            if float(torch.rand(1, generator=gen)) < float(p[tokens[c]]):
                return type(
                    "V",
                    (),
                    {
                        "path": (c,),
                        "next_token": int(torch.multinomial(torch.softmax(logits[1 + c], -1), 1, generator=gen)),
                    },
                )
        return type("V", (), {"path": (), "next_token": int(torch.multinomial(p, 1, generator=gen))})

    first, _ = emitted_frequencies(naive, None)
    with pytest.raises(AssertionError, match="not distributed as p"):
        assert_distributed_as(first, P_ROOT)


@torch.inference_mode()
def test_batched_trees_compute_what_each_row_computes_alone(self_pair):
    """Two rows with different prefixes and trees in one pass (padding, holes after keep_paths):
    every row's logits equal its own sequential logits, before and after a step."""
    model = self_pair.target
    lm = BatchCachedLM(model)
    prefixes = [[5, 6, 7, 8, 9], [40, 41]]
    trees = [(TOKENS, PARENTS), ([50, 51], [-1, -1])]
    logits = lm.forward_trees(prefixes, trees)

    def sequential(ids):
        return model(input_ids=torch.tensor([ids])).logits[0, -1]

    for prefix, (tokens, _parents), rows in zip(prefixes, trees, logits, strict=True):
        assert rows.shape[0] == len(tokens) + 1
        torch.testing.assert_close(rows[0], sequential(prefix), rtol=1e-4, atol=1e-4)
    for node, path in PATHS.items():
        torch.testing.assert_close(logits[0][1 + node], sequential(prefixes[0] + path), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[1][2], sequential(prefixes[1] + [51]), rtol=1e-4, atol=1e-4)
    lm.keep_paths([[2, 4], []])  # row 0 keeps c, e; row 1 keeps nothing of its tree
    assert lm.lengths == [7, 2] and lm.valid.sum(dim=1).tolist() == [7, 2]
    logits = lm.forward_trees([[60], [61, 62]], [([70], [-1]), ([], [])])
    torch.testing.assert_close(logits[0][1], sequential(prefixes[0] + [12, 14, 60, 70]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[1][0], sequential(prefixes[1] + [61, 62]), rtol=1e-4, atol=1e-4)
    lm.keep_paths([[0], []])
    lm.select_rows([1])  # row 0 finished
    torch.testing.assert_close(
        lm.forward_trees([[63]], [([], [])])[0][0], sequential(prefixes[1] + [61, 62, 63]), rtol=1e-4, atol=1e-4
    )


@torch.inference_mode()
def test_batch_refuses_rows_without_a_tree_each_and_paths_before_a_step(self_pair):
    lm = BatchCachedLM(self_pair.target)
    with pytest.raises(ValueError, match="follows a forward_trees step"):
        lm.keep_paths([[0]])
    with pytest.raises(ValueError, match="shorter"):  # two rows, one tree: no row may go unscored
        lm.forward_trees([[5, 6], [7]], [([8], [-1])])
