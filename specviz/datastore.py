"""A suffix-array datastore over a tokenized corpus: SSSD's (and REST's) second source of drafts.

The corpus is one token array, documents joined by a separator id that no pattern contains. Its
suffix array lists every start position in lexicographic order of the suffix starting there, so the
suffixes that begin with a pattern form one contiguous range, found by binary search. SSSD then
takes at most ~100 continuations spread at regular intervals over that range (not the first ones,
which would all come from a few documents) and counts them into a tree.

Stored as numpy arrays in one compressed `.npz` (tokens as uint16 when the vocabulary fits).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from specviz.paths import ASSETS

DEFAULT_PATH = ASSETS / "sssd" / "datastore.npz"  # built from the default target's own text


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """Start positions sorted by the suffix that begins there (prefix doubling, O(n log^2 n)):
    a shorter suffix sorts before a longer one that it is a prefix of."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = np.unique(tokens, return_inverse=True)[1].astype(np.int64)  # dense ranks of first tokens
    k = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)  # rank of the suffix k further on; -1: past the end
        second[: n - k] = rank[k:]
        order = np.lexsort((second, rank))  # by (rank, second)
        first_s, second_s = rank[order], second[order]
        new_group = np.ones(n, dtype=np.int64)
        new_group[1:] = (first_s[1:] != first_s[:-1]) | (second_s[1:] != second_s[:-1])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new_group) - 1
        if rank.max() == n - 1 or k >= n:
            return order
        k *= 2


@dataclass(frozen=True)
class Datastore:
    tokens: np.ndarray  # [N] the corpus, documents separated by `separator`
    sa: np.ndarray  # [N] suffix array of `tokens`
    separator: int  # id ending each document; never part of a pattern or a continuation
    fingerprint: str  # identifies the tokenizer the corpus was encoded with
    info: dict  # plain facts: source, documents, tokens

    @classmethod
    def build(cls, documents: Iterable[Sequence[int]], fingerprint: str, info: dict | None = None) -> Datastore:
        docs = [list(d) for d in documents if len(d)]
        top = max((max(d) for d in docs), default=0)
        separator = 65535 if top < 65535 else top + 1  # uint16's largest value when the vocabulary fits
        flat = [t for d in docs for t in (*d, separator)]
        dtype = np.uint16 if separator <= 65535 else np.int32
        tokens = np.asarray(flat, dtype=dtype)
        sa = suffix_array(tokens).astype(np.uint32 if len(tokens) < 2**32 else np.int64)
        return cls(tokens, sa, separator, fingerprint, {**(info or {}), "documents": len(docs), "tokens": len(tokens)})

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"separator": self.separator, "fingerprint": self.fingerprint, "info": self.info})
        np.savez_compressed(path, tokens=self.tokens, sa=self.sa, meta=np.frombuffer(meta.encode(), dtype=np.uint8))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Datastore:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            return cls(z["tokens"], z["sa"], meta["separator"], meta["fingerprint"], meta["info"])

    def __len__(self) -> int:
        return len(self.tokens)

    def find(self, pattern: Sequence[int]) -> tuple[int, int]:
        """[lo, hi): the suffix-array range of suffixes that start with `pattern` (narrowed token by token)."""
        lo, hi, n = 0, len(self.sa), len(self.tokens)
        for j, token in enumerate(pattern):

            def at(i: int, j: int = j) -> int:  # token j of suffix sa[i]; -1 past the end (sorts first)
                s = int(self.sa[i]) + j
                return int(self.tokens[s]) if s < n else -1

            lo, hi = bisect_left(range(hi), token, lo=lo, key=at), bisect_right(range(hi), token, lo=lo, key=at)
            if lo >= hi:
                return lo, lo
        return lo, hi

    def continuations(self, pattern: Sequence[int], max_count: int, depth: int, spread: bool = True) -> list[list[int]]:
        """Up to `max_count` continuations (each up to `depth` tokens, cut at a document end) of the
        occurrences of `pattern`, sampled at regular intervals over its suffix-array range
        (`spread=False`: the first ones in suffix-array order, as REST takes them)."""
        lo, hi = self.find(pattern)
        if hi <= lo or depth <= 0:
            return []
        m = min(max_count, hi - lo)
        picks = lo + (np.arange(m) * (hi - lo)) // m if spread else lo + np.arange(m)
        starts = self.sa[picks].astype(np.int64) + len(pattern)  # [m]
        window = starts[:, None] + np.arange(depth)  # [m, depth]
        rows = np.where(window < len(self.tokens), self.tokens[np.minimum(window, len(self.tokens) - 1)], self.separator)
        out = []
        for row in rows.tolist():
            cut = row.index(self.separator) if self.separator in row else depth
            if cut:
                out.append(row[:cut])
        return out


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of a tokenizer's vocabulary: a datastore is only used with the tokenizer it was built with."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha1(json.dumps(vocab).encode()).hexdigest()[:16]


@lru_cache(maxsize=4)
def load_datastore(path: str) -> Datastore:
    """Load once per process (the app and the benchmark share it)."""
    return Datastore.load(path)
