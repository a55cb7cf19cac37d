"""Speculative streaming in one pass per iteration: the pass that verifies a tree also runs every node's
streams, and the accepted node's streams are exactly the ones the two-pass build computes afterwards at
that node (same keys and values at every layer); the main stream is the target's own; one target
forward per iteration."""

from __future__ import annotations

import pytest
import torch

import specviz
from specviz.methods import streaming as streaming_method
from specviz.methods.streaming import stream_tree, streaming_model
from specviz.models.kv import CachedLM
from specviz.models.streaming import StreamingLM, fused_mask
from tests.test_streaming_model import tuned_lm

PREFIX = [5, 17, 300, 42, 42, 7, 99, 12]
TREE = [401, 3, 77, 9, 250, 61]  # two children of the root, grandchildren under both, one level deeper
PARENTS = [-1, -1, 0, 0, 1, 2]


def two_pass_streams(lm: StreamingLM, path: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The two-pass build at the node that ends `path`: verify the tree, keep the path, then the
    streams' own pass over the top layers from the cache. Returns the tree logits and the streams' logits."""
    cache = CachedLM(lm.tuned)
    cache.forward(PREFIX[:-1])
    logits, hidden = cache.forward_tree_hidden(PREFIX[-1:], TREE, PARENTS, lm.first_stream_layer)
    cache.keep_path(len(PREFIX), path)
    node = hidden[1 + path[-1]] if path else hidden[0]
    return logits, lm.stream_logits(node, len(cache) - 1, cache.layer_kv)


def fused(
    lm: StreamingLM, tree: list[int] = TREE, gamma: int | None = None
) -> tuple[CachedLM, torch.Tensor, torch.Tensor]:
    """The fused pass over PREFIX and `tree` (shaped as PARENTS) with `gamma` streams (None: the adapter's):
    the cache, tree logits and every row's streams."""
    cache = CachedLM(lm.tuned)
    cache.forward(PREFIX[:-1])
    logits, streams, kept = cache.forward_tree_by(
        PREFIX[-1:],
        tree,
        PARENTS,
        lambda ids, positions, mask, append: lm.fused_tree_pass(ids, positions, mask, append, 1 + len(tree), gamma),
    )
    assert kept == list(range(1 + len(tree)))  # no pruning asked: every row kept
    return cache, logits, streams


def path_to(node: int) -> list[int]:
    path = []
    while node >= 0:
        path.insert(0, node)
        node = PARENTS[node]
    return path


@pytest.mark.parametrize("lora_main", [True, False])
def test_every_nodes_streams_equal_the_two_pass_streams_at_that_node(lora_main):
    lm = tuned_lm(lora_main=lora_main)
    _, logits, streams = fused(lm)
    assert streams.shape == (1 + len(TREE), lm.cfg.gamma, lm.tuned.config.hidden_size)
    for node in [-1, *range(len(TREE))]:  # -1: nothing accepted, the last committed token's streams
        want_main, want_streams = two_pass_streams(lm, path_to(node))
        torch.testing.assert_close(logits, want_main, rtol=1e-5, atol=1e-5)  # the main stream is the target's
        got = lm.stream_head(streams[1 + node])
        torch.testing.assert_close(got, want_streams, rtol=1e-4, atol=1e-4)
        a, b = stream_tree(got.softmax(-1), 2, 6), stream_tree(want_streams.softmax(-1), 2, 6)
        assert (a.tokens, a.parents) == (b.tokens, b.parents)  # the same next-tree candidates


def test_the_cache_keeps_the_accepted_paths_main_stream_only():
    lm = tuned_lm()
    cache, _, _ = fused(lm)
    assert len(cache) == cache.cache_length() == len(PREFIX) + len(TREE)  # the streams added nothing
    path = path_to(4)
    cache.keep_path(len(PREFIX), path)
    plain = CachedLM(lm.tuned)
    plain.forward(PREFIX + [TREE[i] for i in path])
    assert cache.tokens == plain.tokens
    for layer in range(lm.tuned.config.num_hidden_layers):
        for got, want in zip(cache.layer_kv(layer), plain.layer_kv(layer), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_streams_see_their_own_node_only():
    """The mask: a node's streams see its main row's columns and their own earlier streams; changing
    another node's token changes nothing of this node's streams."""
    lm = tuned_lm()
    _, _, streams = fused(lm)
    other = TREE.copy()
    other[1] = 123  # node 1 is no ancestor of node 2 (parent 0) nor of node 0
    _, _, again = fused(lm, other)
    for node in (-1, 0, 2, 3, 5):  # no node on these paths changed
        torch.testing.assert_close(again[1 + node], streams[1 + node], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(again[1 + 1], streams[1 + 1], atol=1e-4)
    mask = fused_mask(torch.zeros(3, 5), rows=2, gamma=2)  # 3 main rows over 5 columns, the last 2 streamed
    seen = mask == 0
    assert seen.shape == (3 + 4, 5 + 4)
    assert not seen[:3, 5:].any()  # the main stream never sees a stream
    assert seen[3:, 5:].tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [False, False, True, False],
        [False, False, True, True],
    ]


def test_one_target_forward_per_iteration(random_pair, monkeypatch):
    """Each record is one forward of the target and no other pass of it runs: no Hugging Face forward
    of the tuned model, no streams' pass of their own."""
    lm = streaming_model(random_pair.target, "untrained")
    calls = {"fused": 0, "hf": 0, "streams": 0}
    fused_pass, hf_forward = lm.fused_tree_pass, lm.tuned.forward

    def count(name, fn):
        def wrap(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrap

    monkeypatch.setattr(lm, "fused_tree_pass", count("fused", fused_pass))
    monkeypatch.setattr(lm.tuned, "forward", count("hf", hf_forward))
    monkeypatch.setattr(lm, "stream_logits", count("streams", lm.stream_logits))
    run = specviz.generate("streaming", random_pair, PREFIX, max_new_tokens=24, adapter="untrained", tree_width=2)
    assert run.summary.target_forwards == len(run.records) == calls["fused"]
    assert all(r.target_forwards == 1 and r.draft_forwards == 0 for r in run.records)
    assert calls["hf"] == calls["streams"] == 0
    assert sum(r.speculation_length for r in run.records) > 0  # trees were drafted and verified
    # speculation_length 0 (the tuned model alone, the baseline of Table 1) runs no streams at all
    calls.update(fused=0, hf=0)
    alone = specviz.generate(
        "streaming", random_pair, PREFIX, max_new_tokens=24, adapter="untrained", speculation_length=0
    )
    assert calls["fused"] == 0 and calls["hf"] == alone.summary.target_forwards == 24
    assert alone.summary.output_ids == run.summary.output_ids


def test_fused_and_two_pass_decode_alike(random_pair, tmp_path):
    """Both layouts reproduce the tuned model and draft the same trees."""
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    runs = {
        passes: specviz.generate(
            "streaming",
            random_pair,
            PREFIX,
            max_new_tokens=30,
            adapter=str(path),
            tree_width=2,
            tree_nodes=6,
            speculation_length=3,
            passes=passes,
        )
        for passes in ("fused", "two-pass")
    }
    a, b = runs["fused"], runs["two-pass"]
    assert a.summary.output_ids == b.summary.output_ids
    assert [r.tree().tree_tokens for r in a.records] == [r.tree().tree_tokens for r in b.records]
    with pytest.raises(specviz.SpecvizError, match="passes must be one of fused, two-pass"):
        specviz.generate("streaming", random_pair, "x", max_new_tokens=2, passes="three")


def test_the_frequent_head_is_the_full_head_at_those_tokens():
    lm = tuned_lm()
    _, _, streams = fused(lm)
    ids = torch.tensor([3, 9, 77, 250, 401, 500])
    torch.testing.assert_close(
        lm.stream_head(streams, lm.head_rows(ids)), lm.stream_head(streams)[..., ids], rtol=1e-5, atol=1e-5
    )
    probs = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]])  # over the tokens 40, 41, 42
    tree = stream_tree(probs, width=2, max_nodes=4, token_ids=torch.tensor([40, 41, 42]))
    # level 1: 41 (0.6), 42 (0.3); under 41: 40 (0.30), 42 (0.18); under 42: 40 (0.15), 42 (0.09)
    assert tree.tokens == [41, 42, 40, 42] and tree.parents == [-1, -1, 0, 0]


def test_a_frequent_head_drafts_only_frequent_tokens_and_keeps_the_output(random_pair, tmp_path, monkeypatch):
    """With a frequent-token set of the even ids, every drafted node is even, the output is still the
    tuned model's; the full head drafts odd ids too (so the restriction did something)."""
    path = tmp_path / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    even = torch.arange(0, random_pair.vocab_size, 2)
    monkeypatch.setattr(streaming_method, "frequent_vocab", lambda vocab: even)
    kw = {"max_new_tokens": 30, "adapter": str(path), "tree_width": 2, "tree_nodes": 6, "speculation_length": 3}
    ar = specviz.generate("streaming", random_pair, PREFIX, **{**kw, "speculation_length": 0}).summary.output_ids
    drafted = {}
    for vocab in ("frequent", "full"):
        run = specviz.generate("streaming", random_pair, PREFIX, stream_vocab=vocab, **kw)
        assert run.summary.output_ids == ar, vocab
        drafted[vocab] = {t for r in run.records for t in r.tree().tree_tokens}
    assert drafted["frequent"] and all(t % 2 == 0 for t in drafted["frequent"])
    assert any(t % 2 for t in drafted["full"])


def test_a_target_spread_over_devices_is_a_clear_error(random_pair, monkeypatch):
    lm = streaming_model(random_pair.target, "untrained")
    monkeypatch.setattr(lm.tuned, "hf_device_map", {"model.layers.0": 0, "model.layers.1": 1}, raising=False)
    with pytest.raises(specviz.SpecvizError, match="spread over several"):
        specviz.generate("streaming", random_pair, PREFIX, max_new_tokens=4, adapter="untrained")


def test_fewer_streams_are_the_first_streams_of_all():
    """A pass of gamma streams computes the adapter's first gamma streams, unchanged (stream j sees
    streams 1..j only), and the same main stream."""
    lm = tuned_lm()
    _, logits, streams = fused(lm)
    for gamma in (0, 1, lm.cfg.gamma - 1):
        _, got_logits, got = fused(lm, gamma=gamma)
        assert got.shape == (1 + len(TREE), gamma, lm.tuned.config.hidden_size)
        torch.testing.assert_close(got_logits, logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, streams[:, :gamma], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="0 to 3 streams"):
        lm.fused_tree_pass(
            torch.tensor([[1]]), torch.tensor([0]), torch.zeros(1, 1, 1, 1), lambda i, k, v: (k, v), 1, 4
        )


def test_a_pass_runs_the_streams_in_use_and_none_the_next_tree_cannot_use(tmp_path, random_pair, monkeypatch):
    """With an adapter of gamma 3 and speculation_length 2, each pass runs 2 stream rows per candidate
    node (the last committed token and each tree node), not 3; near the end of the budget only those
    the next tree can still use (none in the last pass); the output is still the tuned model's."""
    path = tmp_path / "tiny.safetensors"
    lm = tuned_lm()
    assert lm.cfg.gamma == 3
    lm.save_adapter(path)
    seen: list[tuple[int, int]] = []  # (candidate nodes, stream rows) of each pass
    fused_pass = StreamingLM.fused_tree_pass

    def counted(self, ids, positions, mask, append, rows, gamma=None, prune=None):
        logits, streams, kept = fused_pass(self, ids, positions, mask, append, rows, gamma, prune)
        seen.append((rows, streams.shape[0] * streams.shape[1]))  # [rows, gamma, H]
        return logits, streams, kept

    monkeypatch.setattr(StreamingLM, "fused_tree_pass", counted)
    kw = {"max_new_tokens": 30, "adapter": str(path), "tree_width": 2, "tree_nodes": 6}
    run = specviz.generate("streaming", random_pair, PREFIX, speculation_length=2, **kw)
    prompt = run.records[0].position
    assert len(seen) == len(run.records)
    for r, (nodes, stream_rows) in zip(run.records, seen, strict=True):
        assert nodes == 1 + r.speculation_length
        remaining = 30 - (r.position - prompt)  # output budget left before this pass
        assert stream_rows == nodes * min(2, max(0, remaining - 2))
    assert seen[0][1] == 2 and seen[-1][1] == 0  # γ in use per node in the first pass, none in the last
    assert sum(r.speculation_length for r in run.records) > 0
    ar = specviz.generate("streaming", random_pair, PREFIX, speculation_length=0, **kw)
    assert run.summary.output_ids == ar.summary.output_ids  # greedy parity with γ in use < the adapter's
