"""SSSD's parts: the suffix-array datastore against brute force, the n-gram sources, the top-S tree,
the datastore CLI end to end, and the method drafting from a datastore with greedy parity."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specviz
from specviz.datastore import Datastore, suffix_array, tokenizer_fingerprint
from specviz.errors import SpecvizError
from specviz.methods.ngram_tree import InputIndex, count_tree, top_tree
from specviz.methods.sssd import decode_batch
from specviz.models.tiny import tiny_tokenizer
from specviz.train import datastore as datastore_cli

token_lists = st.lists(st.integers(0, 4), min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(tokens=token_lists)
def test_suffix_array_sorts_every_suffix(tokens):
    sa = suffix_array(np.asarray(tokens, dtype=np.int64)).tolist()
    assert sa == sorted(range(len(tokens)), key=lambda i: tokens[i:])


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=30), min_size=1, max_size=5),
    pattern=st.lists(st.integers(0, 4), min_size=1, max_size=4),
)
def test_find_returns_exactly_the_occurrences_of_a_pattern(docs, pattern):
    store = Datastore.build(docs, "test")
    flat = store.tokens.tolist()
    lo, hi = store.find(pattern)
    brute = [i for i in range(len(flat)) if flat[i : i + len(pattern)] == pattern]
    assert sorted(store.sa[lo:hi].tolist()) == brute


def test_continuations_spread_over_the_range_and_stop_at_document_ends():
    docs = [[7, k, k + 1] for k in range(10, 60, 2)]  # 25 documents: 7 followed by 10, 12, ..., 58
    store = Datastore.build(docs, "test")
    conts = store.continuations([7], max_count=5, depth=4)
    assert len(conts) == 5 and all(len(c) == 2 for c in conts)  # cut at each document's end
    firsts = sorted(c[0] for c in conts)
    assert firsts[0] == 10 and firsts[-1] >= 50  # regular intervals over the range, not the first five
    assert store.continuations([99], 5, 4) == []


def test_a_tokens_only_datastore_rebuilds_its_suffix_array_once_into_the_cache(tmp_path, monkeypatch):
    """Saved without its suffix array, a datastore loads the same array, built on first load and
    read back from the user cache afterwards; a damaged cache file is rebuilt."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    store = Datastore.build([rng.integers(0, 50, 300).tolist() for _ in range(4)], "fp", {"source": "test"})
    full, tokens_only = store.save(tmp_path / "full.npz"), store.save(tmp_path / "tokens.npz", with_suffix_array=False)
    assert tokens_only.stat().st_size < full.stat().st_size
    first = Datastore.load(tokens_only)
    assert np.array_equal(first.sa, store.sa) and first.sa.dtype == store.sa.dtype and first.info == store.info
    [cached] = (tmp_path / "cache" / "sssd").iterdir()

    def no_rebuild(tokens):
        raise AssertionError("the cached suffix array should have been read")

    monkeypatch.setattr("specviz.datastore.suffix_array", no_rebuild)
    assert np.array_equal(Datastore.load(tokens_only).sa, store.sa)
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    cached.write_bytes(cached.read_bytes()[:100])  # truncated
    assert np.array_equal(Datastore.load(tokens_only).sa, store.sa)
    assert np.array_equal(np.load(cached), store.sa)


def test_input_index_finds_what_followed_each_earlier_match():
    ids = [1, 2, 3, 9, 1, 2, 4, 5, 1, 2]
    index = InputIndex(max_ngram=3)
    index.extend(ids[:4])
    index.extend(ids)  # incremental: only the new ids are indexed
    assert index.continuations(2, depth=3, max_count=10) == [[3, 9, 1], [4, 5, 1]]
    assert index.continuations(1, depth=2, max_count=1) == [[4, 5]]  # the most recent match only
    assert index.continuations(3, depth=2, max_count=10) == []  # (5, 1, 2) never occurred before


def test_top_tree_keeps_parents_and_orders_siblings_by_score():
    counts = count_tree([[1, 2, 3], [1, 2, 4], [1, 5], [6]])
    assert counts[(1,)] == 3 and counts[(1, 2)] == 2 and counts[(6,)] == 1
    candidates = {path: (c / 4, "input") for path, c in counts.items()}
    candidates[(6, 7, 8)] = (0.9, "datastore")  # an orphan: its parents are not candidates
    tree = top_tree(candidates, size=4)
    assert tree.tokens == [1, 6, 2, 5] and tree.parents == [-1, -1, 0, 0]
    assert tree.scores == [0.75, 0.25, 0.5, 0.25]
    assert len(top_tree(candidates, size=100)) == 6


def test_option_errors_are_clear(self_pair):
    with pytest.raises(SpecvizError, match="sources"):
        specviz.run("sssd", self_pair, "x", sources="model")
    with pytest.raises(SpecvizError, match="no datastore"):
        next(specviz.run("sssd", self_pair, "x", datastore="/nonexistent.npz"))


def test_datastore_cli_end_to_end_and_drafting_from_it(tmp_path, perturbed_pair):
    """Build a datastore from the target's own text with the CLI, then decode another prompt
    drafting from the datastore alone: greedy parity holds and datastore drafts get accepted."""
    pair = perturbed_pair
    teacher = tmp_path / "teacher.jsonl"
    with teacher.open("w") as f:
        for i, prompt in enumerate(["The cat sat on", "Once upon a time", "def add(a, b):"]):
            ids = pair.tokenizer.encode(prompt)
            out = specviz.generate("autoregressive", pair, ids, max_new_tokens=60).summary.output_ids
            f.write(json.dumps({"prompt_index": i, "prompt_ids": ids, "output_ids": list(out)}) + "\n")
    (tmp_path / "exclude.json").write_text("[2]")
    out = tmp_path / "ds.npz"
    args = [
        "--teacher",
        str(teacher),
        "--tokenizer",
        "tiny",
        "--out",
        str(out),
        "--exclude-prompt-indices",
        str(tmp_path / "exclude.json"),
    ]
    assert datastore_cli.main(args) == 0
    store = Datastore.load(out)
    assert store.info["documents"] == 2 and len(store) == 2 * 61
    assert store.fingerprint == tokenizer_fingerprint(tiny_tokenizer())

    prompt = "Once upon a"  # shares its start with a document the datastore holds
    ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=40).summary.output_ids
    got = specviz.generate("sssd", pair, prompt, max_new_tokens=40, sources="datastore", datastore=str(out))
    assert got.summary.output_ids == ref
    used = [r for r in got.records if r.accepted and "datastore" in r.tree().sources[: r.accepted]]
    assert used, "drafts from the datastore should be accepted"
    assert all(set(r.tree().sources) <= {"datastore"} for r in got.records)


@pytest.mark.parametrize("kind", ["self", "perturbed"])
def test_batched_greedy_output_equals_each_sequence_alone(kind, tiny_pairs):
    """B = 4 prompts of different lengths decoded together (one row stops early at an EOS):
    each row's output equals its own autoregressive decoding, for trees and for batched AR."""
    pair = tiny_pairs[kind]
    prompts = [pair.tokenizer.encode(p) for p in ["def fibonacci(n):", "Janet's ducks lay 16 eggs per day.", "x"]] + [
        [5, 17, 300, 42, 42, 42, 7]
    ]
    free = specviz.generate("autoregressive", pair, prompts[1], max_new_tokens=30).summary.output_ids
    pair = dataclasses.replace(pair, eos_token_ids=(free[5],))  # row 1 stops early
    refs = [specviz.generate("autoregressive", pair, p, max_new_tokens=30).summary.output_ids for p in prompts]
    assert len(refs[1]) < 30
    for tree_size in (0, 6):
        records = decode_batch(pair, prompts, tree_size, max_new_tokens=30)
        assert [tuple(t for r in rs for t in r.emitted) for rs in records] == refs
        assert records[0][0].tree().batch_size == 4
    assert any(r.accepted for rs in records for r in rs)


def test_shipped_datastore_is_within_budget_and_a_valid_suffix_array():
    """The default target's datastore: ≤ 15 MB, built from its own answers, suffixes sorted."""
    from specviz.datastore import DEFAULT_PATH

    assert DEFAULT_PATH.stat().st_size <= 15_000_000
    store = Datastore.load(DEFAULT_PATH)
    assert len(store) == len(store.sa) == store.info["tokens"] > 0
    assert store.info["with_prompts"] is False and all("teacher" in s for s in store.info["sources"])
    assert sorted(store.sa.tolist()) == list(range(len(store)))
    tokens = store.tokens.astype(np.int64)
    rng = np.random.default_rng(0)
    for i in rng.integers(0, len(store) - 1, 200):  # neighbours in the suffix array are in order
        a, b = int(store.sa[i]), int(store.sa[i + 1])
        assert tokens[a : a + 16].tolist() <= tokens[b : b + 16].tolist()
