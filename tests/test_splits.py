"""One owner for the data splits (`specviz.train.splits`): every trainer's train / held-out membership
through it equals the formula the shipped parts were trained with, on the shipped corpus and on the
prompt suites. The old formulas are written out here on purpose: they are what the cards' held-out
figures were measured on, and must not move."""

from __future__ import annotations

import json
import zlib

import pytest

from specviz.models.disco import load_disco
from specviz.paths import ASSETS
from specviz.train import corpus, splits
from specviz.train import streaming as train_streaming
from specviz.train.disco import SPLITS


def old_corpus_held_out(source: str, line: int) -> bool:  # corpus.py before the splits module
    return zlib.crc32(f"{source}:{line}".encode()) % 50 == 0


def old_streaming_held_out(prompt_index: int) -> bool:  # streaming.py: HELD_OUT = 20
    return prompt_index % 20 == 0


def old_disco_split(prompt_index: int) -> str:  # disco.py's split_of
    return ("train", "train", "train", "val", "test")[prompt_index % 5]


@pytest.fixture(scope="module")
def shipped():
    return corpus.load_shipped()


@pytest.fixture(scope="module")
def suite_lines() -> dict[str, int]:
    return {p.stem: sum(1 for _ in p.open()) for p in sorted((ASSETS / "prompts").glob("*.jsonl"))}


def test_the_schemes_name_their_splits_and_fractions_once():
    assert splits.CORPUS.modulus == 50 and splits.CORPUS.fraction("val") == 1 / 50
    assert splits.STREAMING.modulus == 20 and splits.STREAMING.fraction("train") == 19 / 20
    assert [splits.DISCO.fraction(s) for s in SPLITS] == [0.6, 0.2, 0.2]
    assert splits.DISCO.describe() == "prompt_index mod 5: 0-2 train, 3 validation, 4 test"  # the cards' "split"
    assert [splits.split_of(splits.every(3), k) for k in range(4)] == ["left out", "kept", "kept", "left out"]


def test_the_draft_and_corpus_split_of_every_shipped_answer_is_unchanged(shipped):
    assert len(shipped) == 20072
    held = [r for r in shipped if corpus.held_out(r["source"], r["line"])]
    assert [old_corpus_held_out(r["source"], r["line"]) for r in shipped] == [
        corpus.held_out(r["source"], r["line"]) for r in shipped
    ]
    assert len(held) == 372  # the corpus card's and the v2 draft card's "372 held out"
    for s in corpus.SOURCES:  # and every prompt the corpus may yet answer
        for line in range(*s.lines):
            assert corpus.held_out(s.name, line) == old_corpus_held_out(s.name, line)


def test_the_streaming_and_disco_splits_of_every_corpus_prompt_are_unchanged(shipped, tmp_path):
    indices = sorted({corpus.prompt_index(r["source"], r["line"]) for r in shipped})
    assert indices[0] < 100000 <= indices[-1] - 100000  # source rank * 100000 + line, as teacher-text writes them
    assert [splits.split_of(splits.DISCO, i) for i in indices] == [old_disco_split(i) for i in indices]
    teacher = tmp_path / "teacher_text.jsonl"  # what the streaming trainer reads, one record per corpus prompt
    teacher.write_text(
        "".join(json.dumps({"prompt_index": i, "prompt_ids": [i], "output_ids": [2]}) + "\n" for i in indices)
    )
    trained = {
        e.ids[0] for e in train_streaming.read_examples(teacher, 160, 96, train=True)
    }  # ids[0]: the prompt index
    held = {e.ids[0] for e in train_streaming.read_examples(teacher, 160, 96, train=False)}
    assert trained == {i for i in indices if not old_streaming_held_out(i)}
    assert held == {i for i in indices if old_streaming_held_out(i)}


def test_the_splits_of_the_prompt_suites_lines_are_unchanged(suite_lines):
    """DISCO's `--prompts` and `--heldout` number a file's prompts by line: the same membership as before."""
    assert set(suite_lines) >= {"humaneval", "gsm8k_test", "mt_bench_question"}
    for name, n in suite_lines.items():
        for i in range(n):
            assert splits.split_of(splits.DISCO, i) == old_disco_split(i), (name, i)
            assert splits.split_of(splits.DISCO_HELDOUT, i) == ("val" if i % 2 == 0 else "test")
            assert (splits.split_of(splits.STREAMING, i) == "val") == old_streaming_held_out(i)
            key = splits.corpus_key(name, i)
            assert (splits.split_of(splits.CORPUS, key) == "val") == old_corpus_held_out(name, i)


def test_the_shipped_classifier_used_the_corpus_held_out_split(shipped):
    """The default classifier's card lists its prompts per split: exactly the corpus's held-out prompts
    (the README's recipe: `teacher-text --split val`), each in the split `splits.DISCO` gives it."""
    card = load_disco(ASSETS / "disco" / "default.safetensors").card
    assert card["split"] == splits.DISCO.describe()
    by_split = card["split_prompt_indices"]
    held = {corpus.prompt_index(r["source"], r["line"]) for r in shipped if corpus.held_out(r["source"], r["line"])}
    assert set().union(*map(set, by_split.values())) == held
    assert all(splits.split_of(splits.DISCO, i) == s for s, indices in by_split.items() for i in indices)
