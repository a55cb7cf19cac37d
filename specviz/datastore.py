"""A suffix-array datastore over a tokenized corpus: SSSD's (and REST's) second source of drafts.

The corpus is one token array, documents joined by a separator id that no pattern contains. Its
suffix array lists every start position in lexicographic order of the suffix starting there, so the
suffixes that begin with a pattern form one contiguous range, found by binary search. SSSD then
takes at most ~100 continuations spread at regular intervals over that range (not the first ones,
which would all come from a few documents) and counts them into a tree.

Stored as numpy arrays in one compressed `.npz` (tokens as uint16 when the vocabulary fits). A file
may leave the suffix array out (the shipped one does, a fifth of the size: `assets/sssd/README.md`):
it is then rebuilt from the tokens on first load, the same array bit for bit, and kept in the user
cache under the tokens' hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specviz.errors import SpecvizError
from specviz.paths import ASSETS, cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

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
        # (rank, rank of the suffix k further on + 1; 0 past the end) as one int64 (n² < 2⁶³ for n < 3e9)
        key = rank * (n + 1)
        key[: n - k] += rank[k:] + 1
        order = np.argsort(key)  # equal keys get equal ranks in any order; the last pass has none
        key_s = key[order]
        new_group = np.ones(n, dtype=np.int64)
        new_group[1:] = key_s[1:] != key_s[:-1]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new_group) - 1
        if rank.max() == n - 1 or k >= n:
            return order
        k *= 2


def compact_suffix_array(tokens: np.ndarray) -> np.ndarray:
    """`suffix_array` stored as small as it goes: uint32 positions below 2**32 tokens."""
    return suffix_array(tokens).astype(np.uint32 if len(tokens) < 2**32 else np.int64)


def cached_suffix_array(tokens: np.ndarray) -> np.ndarray:
    """The suffix array of `tokens` from the user cache, keyed by the tokens' hash; built and saved
    there when missing (seconds for the shipped one); without a writable cache, every load rebuilds it."""
    digest = hashlib.sha256(str(tokens.dtype).encode() + tokens.tobytes()).hexdigest()[:16]
    try:
        path = cache_dir() / "sssd" / f"suffix-array-{digest}.npy"
        path.parent.mkdir(exist_ok=True)
    except OSError:  # no cache folder: build it every time
        path = None
    if path is not None and path.is_file():
        try:
            sa = np.load(path)
            if sa.shape == tokens.shape:
                return sa
        except (OSError, ValueError, EOFError):  # unreadable or truncated: rebuild it
            pass
    sa = compact_suffix_array(tokens)
    if path is not None:
        partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
        try:
            np.save(partial, sa)
            os.replace(partial, path)  # atomic: a concurrent reader sees the whole file or none
        except OSError:
            partial.unlink(missing_ok=True)
    return sa


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
        sa = compact_suffix_array(tokens)
        return cls(tokens, sa, separator, fingerprint, {**(info or {}), "documents": len(docs), "tokens": len(tokens)})

    def save(self, path: str | Path, with_suffix_array: bool = True) -> Path:
        """`with_suffix_array=False`: the tokens alone (a fifth of the size; rebuilt on first load)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"separator": self.separator, "fingerprint": self.fingerprint, "info": self.info})
        arrays: dict[str, Any] = {"tokens": self.tokens, "meta": np.frombuffer(meta.encode(), dtype=np.uint8)}
        if with_suffix_array:
            arrays["sa"] = self.sa
        np.savez_compressed(path, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Datastore:
        """A datastore file, checked: anything else (a text file, a folder, an .npz of other arrays)
        is one SpecvizError, never a numpy traceback or an index error in the middle of a run."""
        try:
            z = np.load(path)  # never unpickles (allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else "no numpy data"
            raise _not_a_datastore(path, f"not a readable .npz archive: {why}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise _not_a_datastore(path, "one numpy array, not an .npz archive")
        with z:
            try:
                meta = json.loads(z["meta"].tobytes().decode())
                tokens = z["tokens"]
                sa = z["sa"] if "sa" in z.files else None
                separator, fingerprint, info = meta["separator"], meta["fingerprint"], meta["info"]
            except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError, zipfile.BadZipFile) as e:
                raise _not_a_datastore(path, f"no readable tokens and meta ({type(e).__name__})") from None
        if not (tokens.ndim == 1 and tokens.dtype.kind in "iu" and isinstance(separator, int)):
            raise _not_a_datastore(path, "its tokens are not one row of integer ids")
        if sa is None:
            sa = cached_suffix_array(tokens)
        elif not (
            sa.shape == tokens.shape and sa.dtype.kind in "iu" and (not len(sa) or 0 <= sa.min() <= sa.max() < len(sa))
        ):
            raise _not_a_datastore(path, "its suffix array does not index its tokens")
        if not (isinstance(fingerprint, str) and isinstance(info, dict)):
            raise _not_a_datastore(path, "its meta lacks the tokenizer's fingerprint or the info")
        return cls(tokens, sa, separator, fingerprint, info)

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
        rows = np.where(
            window < len(self.tokens), self.tokens[np.minimum(window, len(self.tokens) - 1)], self.separator
        )
        out = []
        for row in rows.tolist():
            cut = row.index(self.separator) if self.separator in row else depth
            if cut:
                out.append(row[:cut])
        return out


def _not_a_datastore(path: str | Path, why: str) -> SpecvizError:
    return SpecvizError(f"{path} is not a datastore ({why}): build one with `python -m specviz.train.datastore`")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short hash of a tokenizer's vocabulary: a datastore is only used with the tokenizer it was built with."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha1(json.dumps(vocab).encode()).hexdigest()[:16]


@lru_cache(maxsize=4)
def load_datastore(path: str) -> Datastore:
    """Load once per process (the app and the benchmark share it)."""
    return Datastore.load(path)
