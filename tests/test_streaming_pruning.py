"""Speculative Streaming's parallel tree-pruning layer (section 3.2.3): a node whose early-exit
transition probability is below the threshold goes with its subtree; the rows kept compute exactly
what they compute in the unpruned pass (main logits, streams, cache entries), so greedy output and
the sampling distribution do not change; one target pass per iteration still."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import specviz
from specviz.extras import StreamingPassExtra, checked
from specviz.methods import streaming as streaming_method
from specviz.methods.ngram_tree import TokenTree
from specviz.methods.streaming import StreamDrafter
from specviz.models import streaming as msa
from specviz.models.kv import CachedLM
from specviz.models.streaming import StreamingLM
from specviz.models.tiny import TARGET_CONFIG
from specviz.models.tree_pruning import TreePruner, pruned, transition_probs
from specviz.train import pruning
from specviz.train.loop import Checkpoint
from specviz.verify import TreeVerdict
from tests.test_sampling_methods import (
    BUDGET,
    CFG,
    FAILS,
    MIN_EVENTS,
    PROMPT,
    RUNS,
    assert_follows_target,
    exact_distribution,
    options,
)
from tests.test_streaming_fused import PARENTS, PREFIX, TREE, path_to
from tests.test_streaming_model import CFG as STREAM_CFG
from tests.test_streaming_model import tuned_lm

# The tiny target has 4 layers and the adapter 2 stream layers: the streams start after layer 2.
FIRST_STREAM_LAYER = 2
PRUNE_LAYERS = [1, FIRST_STREAM_LAYER]  # below the stream layers, and the paper's place just before them
THRESHOLD = 0.002  # with the random pruner below: most trees lose some nodes, some lose none, some all
GREEDY = {"max_new_tokens": 30, "tree_width": 2, "tree_nodes": 6, "speculation_length": 3}


def pruned_nodes(record) -> tuple[int, ...] | None:
    """The tree nodes the pruning layer dropped in this record's pass (None: no pruning layer ran)."""
    shape = record.extras(StreamingPassExtra)
    return shape.pruned if shape is not None else None


def test_the_tiny_adapter_has_the_stream_layers_these_tests_assume():
    lm = tuned_lm()
    assert lm.tuned.config.num_hidden_layers - STREAM_CFG.stream_layers == lm.first_stream_layer == FIRST_STREAM_LAYER


# -- the pruning rule ------------------------------------------------------------------------------


def test_a_node_below_the_threshold_goes_with_its_whole_subtree():
    #          0    1    2    3    4    5      (PARENTS: 0, 1 under the root; 2, 3 under 0; 4 under 1; 5 under 2)
    probs = [0.5, 0.3, 0.05, 0.4, 0.2, 0.9]
    assert pruned(PARENTS, probs, 0.1) == [False, False, True, False, False, True]  # 2 low; 5 (0.9) under it
    assert pruned(PARENTS, [0.5, 0.05, 0.5, 0.5, 0.9, 0.5], 0.1) == [False, True, False, False, True, False]
    assert pruned(PARENTS, [0.05, 0.5, 0.5, 0.5, 0.5, 0.5], 0.1) == [True, False, True, True, False, True]
    assert pruned(PARENTS, probs, 0.0) == [False] * 6  # threshold 0: nothing goes
    assert pruned(PARENTS, probs, 0.3) == [False, False, True, False, True, True]  # 0.3 itself stays
    assert pruned([-1, 0, 1], [0.9, 0.01, 0.9], 0.1) == [False, True, True]  # a chain: all below the cut
    assert pruned([], [], 0.5) == []


def test_transition_probs_read_the_parents_row_at_the_childs_column():
    early = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])  # rows: two parents; columns: 3 tokens
    got = transition_probs(early, [0, 1, 0], torch.tensor([2, 0, 1]))
    p = early.softmax(-1)
    torch.testing.assert_close(got, torch.stack([p[0, 2], p[1, 0], p[0, 1]]))


def test_an_untrained_pruner_is_the_logit_lens():
    """U = 0: o_theta is the identity, the early-exit logits are the final norm and head at layer l;
    a non-zero U changes them."""
    lm = tuned_lm()
    pruner = TreePruner(lm.tuned.config.hidden_size, 1)
    h = torch.randn(5, lm.tuned.config.hidden_size)
    norm, head = lm.tuned.get_decoder().norm, lm.tuned.get_output_embeddings().weight
    with torch.no_grad():
        torch.testing.assert_close(pruner.early_logits(h, norm, head), F.linear(norm(h), head))
        torch.nn.init.normal_(pruner.up.weight)
        assert not torch.allclose(pruner.early_logits(h, norm, head), F.linear(norm(h), head), atol=1e-3)


# -- the fused pass with pruning -------------------------------------------------------------------


def pass_with(lm: StreamingLM, keep: list[int] | None, committed: int = 1):
    """The fused pass over PREFIX (its last `committed` tokens new) and TREE, keeping the rows of the
    nodes `keep` at the pruning layer (None: no prune callback). Returns the cache, logits, streams,
    the kept rows and the hidden states the callback was given."""
    cache = CachedLM(lm.tuned)
    cache.forward(PREFIX[:-committed])
    given: list[torch.Tensor] = []

    def prune(h: torch.Tensor) -> list[int]:
        given.append(h.clone())
        assert keep is not None
        return [0, *(1 + i for i in keep)]

    rows = 1 + len(TREE)
    logits, streams, kept = cache.forward_tree_by(
        PREFIX[-committed:],
        TREE,
        PARENTS,
        lambda ids, positions, mask, append: lm.fused_tree_pass(
            ids, positions, mask, append, rows, None, None if keep is None else prune
        ),
    )
    return cache, logits, streams, kept, given


@pytest.mark.parametrize("committed", [1, 3])  # new committed rows ahead of the tree: 1, or several
@pytest.mark.parametrize("keep", [[0, 2, 5], [1, 4], [0, 1, 3], []])  # closed under parents
@pytest.mark.parametrize("layer", PRUNE_LAYERS)
def test_kept_rows_compute_what_the_unpruned_pass_computes(layer, keep, committed):
    lm = tuned_lm()
    lm.pruner = TreePruner(lm.tuned.config.hidden_size, layer)
    _, want_logits, want_streams, all_rows, _ = pass_with(lm, None, committed)
    assert all_rows == list(range(1 + len(TREE)))
    rows = [0, *(1 + i for i in keep)]
    _, logits, streams, kept, given = pass_with(lm, keep, committed)
    assert kept == rows
    assert logits.shape == (len(rows), want_logits.shape[1])
    assert streams.shape == (len(rows), lm.cfg.gamma, lm.tuned.config.hidden_size)
    torch.testing.assert_close(logits, want_logits[rows], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(streams, want_streams[rows], rtol=1e-5, atol=1e-5)
    # the callback ran once, on the candidate rows' hidden states after `layer` layers
    assert len(given) == 1
    plain = CachedLM(lm.tuned)
    plain.forward(PREFIX[:-committed])
    _, hidden = plain.forward_tree_hidden(PREFIX[-committed:], TREE, PARENTS, layer)
    torch.testing.assert_close(given[0], hidden, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("committed", [1, 3])
@pytest.mark.parametrize("keep", [[0, 2, 5], [1, 4], []])
@pytest.mark.parametrize("layer", PRUNE_LAYERS)
def test_the_cache_after_a_pruned_pass_keeps_a_kept_path_exactly(layer, keep, committed):
    """Keeping the path to any kept node leaves the cache of a plain prefill of PREFIX + that path, at
    every layer (the pruned rows' zero entries above the pruning layer are gone)."""
    lm = tuned_lm()
    lm.pruner = TreePruner(lm.tuned.config.hidden_size, layer)
    for node in [-1, *keep]:
        path = path_to(node)
        assert set(path) <= set(keep)
        cache, *_ = pass_with(lm, keep, committed)
        assert len(cache) == cache.cache_length() == len(PREFIX) + len(TREE)
        cache.keep_path(len(PREFIX), path)
        plain = CachedLM(lm.tuned)
        plain.forward(PREFIX + [TREE[i] for i in path])
        assert cache.tokens == plain.tokens
        for i in range(lm.tuned.config.num_hidden_layers):
            for got, want in zip(cache.layer_kv(i), plain.layer_kv(i), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"layer {i}, path {path}")


@pytest.mark.parametrize("vocab", [None, "some"])  # the head over every token, or a few (the tree's among them)
@pytest.mark.parametrize("layer", PRUNE_LAYERS)
def test_the_drafter_prunes_by_each_nodes_probability_at_its_parent(layer, vocab):
    """`StreamDrafter.kept_rows`, against the rule written out: node i's early-exit probability is
    softmax(H(o_theta(h))) of its parent's row h after `layer` layers, read at its token."""
    lm = tuned_lm()
    lm.pruner = TreePruner(lm.tuned.config.hidden_size, layer)
    with torch.no_grad():
        torch.nn.init.normal_(lm.pruner.up.weight, std=0.5)
    ids = None if vocab is None else torch.tensor(sorted({*TREE, 0, 8, 100, 202, 303, 404, 511}))
    cache = CachedLM(lm.tuned)
    cache.forward(PREFIX[:-1])
    _, hidden = cache.forward_tree_hidden(PREFIX[-1:], TREE, PARENTS, layer)
    head = lm.tuned.get_output_embeddings().weight if ids is None else lm.head_rows(ids)
    columns = TREE if ids is None else [ids.tolist().index(t) for t in TREE]
    with torch.no_grad():
        early = lm.pruner.early_logits(hidden, lm.tuned.get_decoder().norm, head).softmax(-1)  # [1 + n, K]
    probs = [float(early[1 + p, c]) for p, c in zip(PARENTS, columns, strict=True)]
    tree = TokenTree(TREE, PARENTS, [1.0] * 6, ["stream"] * 6)
    cuts = sorted(probs)
    for threshold in [cuts[0] / 2, (cuts[1] + cuts[2]) / 2, (cuts[3] + cuts[4]) / 2, cuts[-1] * 2]:
        gone = [False] * 6
        for i, p in enumerate(PARENTS):
            gone[i] = probs[i] < threshold or (p >= 0 and gone[p])
        drafter = StreamDrafter(lm, 3, 2, ids, threshold)
        assert drafter.kept_rows(hidden, tree) == [0, *(1 + i for i in range(6) if not gone[i])], threshold


def test_no_pruner_no_pruning():
    """Without a pruning layer the pass never calls `prune` and keeps every row."""
    lm = tuned_lm()
    assert lm.pruner is None
    _, want_logits, want_streams, _, _ = pass_with(lm, None)
    _, logits, streams, kept, given = pass_with(lm, [0])
    assert given == [] and kept == list(range(1 + len(TREE)))
    torch.testing.assert_close(logits, want_logits)
    torch.testing.assert_close(streams, want_streams)


# -- decoding with a pruning adapter ---------------------------------------------------------------


def attach_pruner(adapter: Path, layer: int, seed: int = 5) -> TreePruner:
    """Write a random pruner (U off zero) at `layer` into the adapter file, as
    `python -m specviz.train.pruning --attach` does from a training checkpoint."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pruner = TreePruner(TARGET_CONFIG["hidden"], layer)
        torch.nn.init.normal_(pruner.up.weight, std=0.5)
    out = adapter.parent / f"pruning-{adapter.stem}"
    out.mkdir()
    Checkpoint(out / "checkpoint.pt").save({"pruners": {str(layer): pruner.state_dict()}})
    pruning.attach(argparse.Namespace(out=out, attach=layer, adapter=adapter))
    return pruner


def pruning_adapter(tmp_path: Path, layer: int) -> Path:
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    attach_pruner(path, layer)
    return path


@pytest.mark.parametrize("layer", PRUNE_LAYERS)
def test_an_attached_pruner_loads_with_the_adapter(layer, tmp_path, random_pair):
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    want = attach_pruner(path, layer)
    assert msa.read_adapter_meta(path)["pruner_layer"] == str(layer)
    lm = msa.load_adapter(random_pair.target, path)
    assert lm.pruner is not None and lm.pruner.layer == layer
    torch.testing.assert_close(lm.pruner.up.weight, want.up.weight)
    torch.testing.assert_close(lm.pruner.down.weight, want.down.weight)
    assert not any(n.startswith("pruner.") for n in lm.adapter_state())  # frozen: not an adapter weight
    for name, p in tuned_lm().adapter_state().items():  # the adapter's own tensors survived the attach
        torch.testing.assert_close(lm.adapter_state()[name], p)


def test_an_adapter_saved_again_keeps_its_pruner(tmp_path, random_pair):
    """Saving a loaded adapter (as training continued from it does) writes its pruner too."""
    path, again = tmp_path / "tiny.safetensors", tmp_path / "again.safetensors"
    tuned_lm().save_adapter(path)
    want = attach_pruner(path, 1)
    msa.load_adapter(random_pair.target, path).save_adapter(again)
    assert msa.read_adapter_meta(again)["pruner_layer"] == "1"
    pruner = msa.load_adapter(random_pair.target, again).pruner
    assert pruner is not None
    torch.testing.assert_close(pruner.up.weight, want.up.weight)


def test_pruning_in_the_two_pass_build_is_an_error(random_pair):
    with pytest.raises(specviz.SpecvizError, match="needs passes='fused'"):
        specviz.generate("streaming", random_pair, PREFIX, max_new_tokens=2, passes="two-pass", prune_threshold=0.01)


@pytest.mark.parametrize("layer", [0, FIRST_STREAM_LAYER + 1])
def test_a_pruning_layer_outside_the_layers_below_the_streams_is_refused(layer, tmp_path, random_pair):
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    attach_pruner(path, layer)
    with pytest.raises(specviz.SpecvizError, match="pruning layer"):
        specviz.generate("streaming", random_pair, PREFIX, max_new_tokens=4, adapter=str(path), prune_threshold=0.1)


@pytest.mark.parametrize("vocab", ["full", "even"])  # the streams' head over every token, or a frequent set
@pytest.mark.parametrize("layer", PRUNE_LAYERS)
def test_pruned_decoding_keeps_the_greedy_output(layer, vocab, tmp_path, random_pair, monkeypatch):
    """Pruning drops some nodes of some trees (partly, with acceptances among the rest); the output is
    the tuned model's; pruned nodes are never accepted; each record is one pass, whose kept rows are
    all the pass scores and streams."""
    path = pruning_adapter(tmp_path, layer)
    if vocab == "even":
        even = torch.arange(0, random_pair.vocab_size, 2)
        monkeypatch.setattr(streaming_method, "frequent_vocab", lambda size: even)
    kw = {**GREEDY, "adapter": str(path), "stream_vocab": "frequent" if vocab == "even" else "full"}
    ar = specviz.generate("streaming", random_pair, PREFIX, **{**kw, "speculation_length": 0}).summary.output_ids

    seen: list[tuple[int, list[int], int, int]] = []  # (rows, kept rows, logits rows, stream rows) of each pass
    fused_pass = StreamingLM.fused_tree_pass

    def counted(self, ids, positions, mask, append, rows, gamma=None, prune=None):
        logits, streams, kept = fused_pass(self, ids, positions, mask, append, rows, gamma, prune)
        seen.append((rows, kept, logits.shape[0], streams.shape[0]))
        return logits, streams, kept

    monkeypatch.setattr(StreamingLM, "fused_tree_pass", counted)
    run = specviz.generate("streaming", random_pair, PREFIX, prune_threshold=THRESHOLD, **kw)
    assert run.summary.output_ids == ar
    records = run.records
    assert run.summary.target_forwards == len(records) == len(seen)
    assert all(r.target_forwards == 1 for r in records)
    some = [r for r in records if pruned_nodes(r)]
    assert some, "nothing was pruned: raise THRESHOLD"
    partly = [r for r in some if len(pruned_nodes(r)) < r.speculation_length and r.accepted >= 1]
    assert partly, "no tree kept some nodes and had one accepted"
    assert any(r.speculation_length and not pruned_nodes(r) for r in records), "every tree was pruned"
    for r, (rows, kept, logit_rows, stream_rows) in zip(records, seen, strict=True):
        checked(r.to_dict()["extra"], r)
        assert rows == 1 + r.speculation_length
        shape, tree = r.extras(StreamingPassExtra), r.tree()
        gone = pruned_nodes(r) or []
        assert (shape.pruned is None) == (shape.prune_layer is None)
        if gone:
            assert shape.prune_layer == layer
            assert not set(gone) & set(tree.accepted_path)
            for node in gone:  # a pruned node's subtree went with it
                children = [i for i, p in enumerate(tree.tree_parents) if p == node]
                assert set(children) <= set(gone), node
        assert kept == [0] + [1 + i for i in range(r.speculation_length) if i not in gone]
        assert logit_rows == stream_rows == len(kept)  # pruned rows ran no layer above the pruner
    if vocab == "even":
        assert all(t % 2 == 0 for r in records for t in r.tree().tree_tokens)


def test_a_pruning_adapter_at_threshold_zero_prunes_nothing(tmp_path, random_pair):
    path = pruning_adapter(tmp_path, 1)
    kw = {**GREEDY, "adapter": str(path)}
    off = specviz.generate("streaming", random_pair, PREFIX, **kw)
    assert not any(pruned_nodes(r) is not None or r.extras(StreamingPassExtra).prune_layer for r in off.records)
    ar = specviz.generate("streaming", random_pair, PREFIX, **{**kw, "speculation_length": 0})
    assert off.summary.output_ids == ar.summary.output_ids


def test_an_adapter_without_a_pruner_ignores_the_threshold(tmp_path, random_pair):
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    kw = {**GREEDY, "adapter": str(path)}
    run = specviz.generate("streaming", random_pair, PREFIX, prune_threshold=0.5, **kw)
    assert not any(pruned_nodes(r) is not None or r.extras(StreamingPassExtra).prune_layer for r in run.records)
    assert sum(r.speculation_length for r in run.records) > 0
    plain = specviz.generate("streaming", random_pair, PREFIX, **kw)
    assert run.summary.output_ids == plain.summary.output_ids
    assert [r.tree().tree_tokens for r in run.records] == [r.tree().tree_tokens for r in plain.records]


@pytest.mark.parametrize("threshold", [-0.01, 0.51, 1.0])
def test_a_threshold_outside_0_to_half_is_an_error(threshold, random_pair):
    with pytest.raises(specviz.SpecvizError, match="prune_threshold"):
        specviz.generate("streaming", random_pair, PREFIX, max_new_tokens=2, prune_threshold=threshold)


# -- sampling stays exact --------------------------------------------------------------------------

SAMPLING_THRESHOLD = 0.002


@pytest.fixture(scope="module")
def sampling_adapter(reduced_pair, tmp_path_factory) -> Path:
    """The untrained adapter of the reduced pair's target (its tuned model is the target itself,
    whose exact distribution `exact_distribution` gives), with a random pruner before the streams."""
    path = tmp_path_factory.mktemp("pruning") / "untrained.safetensors"
    msa.untrained(reduced_pair.target).save_adapter(path)
    attach_pruner(path, FIRST_STREAM_LAYER)
    return path


def pruned_runs(pair, adapter: Path) -> list[list]:
    sampling = dict(max_new_tokens=BUDGET, temperature=CFG.temperature, top_k=CFG.top_k, **options("streaming"))
    sampling |= {"adapter": str(adapter), "prune_threshold": SAMPLING_THRESHOLD}
    return [list(specviz.run("streaming", pair, PROMPT, seed=seed, **sampling)) for seed in range(RUNS)]


@pytest.fixture(scope="module")
def sampling_exact(reduced_pair):
    return exact_distribution(reduced_pair)


def test_sampling_with_pruning_follows_the_target_distribution(reduced_pair, sampling_adapter, sampling_exact):
    runs = pruned_runs(reduced_pair, sampling_adapter)
    records = [r for rs in runs for r in rs]
    partly = [r for r in records if pruned_nodes(r) and len(pruned_nodes(r)) < r.speculation_length]
    assert len(partly) >= MIN_EVENTS, "too few trees partly pruned"
    assert sum(r.accepted >= 1 for r in partly) >= MIN_EVENTS, "too few acceptances in pruned trees"
    assert sum(r.accepted >= 2 for r in partly) >= MIN_EVENTS, "too few acceptances below the root in pruned trees"
    assert_follows_target(runs, sampling_exact, "streaming, pruned")


def test_the_check_catches_pruned_rows_read_as_verified(reduced_pair, sampling_adapter, sampling_exact, monkeypatch):
    """Negative control: if verification read the pruned nodes' (zero) rows as if they had been
    verified, the output would not follow the target."""
    right = StreamDrafter.verify

    def wrong(self, target, new_tokens, tree):
        logits, streams, _ = right(self, target, new_tokens, tree)
        return logits, streams, None

    monkeypatch.setattr(StreamDrafter, "verify", wrong)
    with pytest.raises(AssertionError, match=FAILS):
        assert_follows_target(pruned_runs(reduced_pair, sampling_adapter), sampling_exact, "streaming, pruned")


# -- the pieces: subtrees and their verdicts -------------------------------------------------------


def test_a_subtree_is_renumbered():
    tree = TokenTree(TREE, PARENTS, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [f"stream {i}" for i in range(6)], forwards=2)
    sub = tree.subtree([0, 2, 5])
    assert sub.tokens == [TREE[0], TREE[2], TREE[5]]
    assert sub.parents == [-1, 0, 1]
    assert sub.scores == [0.9, 0.7, 0.4] and sub.sources == ["stream 0", "stream 2", "stream 5"]
    assert sub.forwards == 2
    assert tree.subtree([1, 4]).parents == [-1, 0]
    assert len(tree.subtree([])) == 0
    assert tree.subtree(list(range(6))) == tree


def test_a_subtrees_verdict_in_the_whole_trees_numbering():
    v = TreeVerdict(path=(0, 1), next_token=7, p_nodes=(0.5, 0.4, 0.3), q_nodes=None)  # over nodes 0, 2, 5
    r = v.renumbered([0, 2, 5], 6)
    assert r.path == (0, 2) and r.next_token == 7 and r.accepted == 2
    assert r.p_nodes == (0.5, 0.0, 0.4, 0.0, 0.0, 0.3) and r.q_nodes is None
    q = TreeVerdict(path=(1,), next_token=3, p_nodes=(0.2, 0.6), q_nodes=(0.1, 0.9)).renumbered([1, 4], 6)
    assert (
        q.path == (4,) and q.q_nodes == (0.0, 0.1, 0.0, 0.0, 0.9, 0.0) and q.p_nodes == (0.0, 0.2, 0.0, 0.0, 0.6, 0.0)
    )
    empty = TreeVerdict(path=(), next_token=9, p_nodes=(), q_nodes=None).renumbered([], 6)
    assert empty.path == () and empty.p_nodes == (0.0,) * 6


def test_the_main_path_skips_nodes_never_verified():
    none = TreeVerdict(path=(), next_token=1, p_nodes=(0.0,) * 6, q_nodes=None)
    assert none.main_path(PARENTS) == [0, 2, 5]
    assert none.main_path(PARENTS, [1, 4]) == [1, 4]  # 0, the root's first child, was pruned
    assert none.main_path(PARENTS, [0, 3]) == [0, 3]  # 2, 0's first child, was pruned
    assert none.main_path(PARENTS, []) == []
    one = TreeVerdict(path=(0,), next_token=1, p_nodes=(0.5, 0, 0.2, 0.3, 0, 0), q_nodes=None)
    drafted, verdict = one.linear(TREE, PARENTS, [0, 3])
    assert drafted == [TREE[0], TREE[3]]
    assert verdict.accepted == 1 and verdict.p_drafted == (0.5, 0.3)
