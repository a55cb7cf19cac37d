"""Every data split of the trainers, in one place: which split an item belongs to, by a stable key.

A scheme names its splits and their shares of `modulus` buckets; an item's bucket is its key mod
the modulus (a text key through crc32, an integer key as it is). Nothing random and nothing that
depends on the order or the number of items: an answer stays in its split as the corpus grows.

The shipped parts were trained and evaluated on exactly these memberships (their cards quote
held-out figures on them): changing a scheme invalidates those figures. `tests/test_splits.py`
checks every scheme against the formulas the shipped parts were trained with.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    key: str  # what an item's key is, as the cards name it
    parts: tuple[tuple[str, int], ...]  # (split, buckets), in bucket order from bucket 0

    @property
    def modulus(self) -> int:
        return sum(n for _, n in self.parts)

    def fraction(self, split: str) -> float:
        """The share of keys in `split` (of a large set of keys)."""
        return sum(n for name, n in self.parts if name == split) / self.modulus

    def describe(self) -> str:
        """The rule in words, for cards: 'prompt_index mod 5: 0-2 train, 3 validation, 4 test'."""
        words, start = [], 0
        for name, n in self.parts:
            span = str(start) if n == 1 else f"{start}-{start + n - 1}"
            words.append(f"{span} {'validation' if name == 'val' else name}")
            start += n
        return f"{self.key} mod {self.modulus}: " + ", ".join(words)


# The teacher corpus (`train.corpus`): a prompt is held out when crc32("source:line") % 50 == 0, both of
# its answers. The draft validates on "val"; the DISCO classifier trains, tunes and tests on it.
CORPUS = Scheme('crc32("source:line")', (("val", 1), ("train", 49)))
# The streaming adapter (`train.streaming`): teacher records with prompt_index % 20 == 0 are for evaluation only.
STREAMING = Scheme("prompt_index", (("val", 1), ("train", 19)))
# DISCO's classifier (`train.disco`): prompt_index mod 5 -> 0-2 train, 3 validation (tau, SL_max), 4 test.
DISCO = Scheme("prompt_index", (("train", 3), ("val", 1), ("test", 1)))
# DISCO with `--heldout`: that file's prompts split into validation (even prompt_index) and test (odd).
DISCO_HELDOUT = Scheme("prompt_index", (("val", 1), ("test", 1)))


def every(n: int) -> Scheme:
    """One key in n 'left out' (key % n == 0), the rest 'kept': DISCO's `--exclude-mod N`."""
    if n < 1:
        raise ValueError(f"one key in {n}: n must be at least 1")
    return Scheme("prompt_index", (("left out", 1), ("kept", n - 1)))


def split_of(scheme: Scheme, key: str | int) -> str:
    """The split of the item with this key: a text key is hashed with crc32, an integer is its own bucket."""
    bucket = (zlib.crc32(key.encode()) if isinstance(key, str) else key) % scheme.modulus
    for name, n in scheme.parts:
        if bucket < n:
            return name
        bucket -= n
    raise AssertionError("unreachable: the parts cover every bucket")


def corpus_key(source: str, line: int) -> str:
    """The key of a corpus prompt (both of its answers share it): 'source:line'."""
    return f"{source}:{line}"
