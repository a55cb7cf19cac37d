"""SSSD's candidate trees (sections 3.1-3.2): n-gram continuations from two sources, fused.

- Input source: the prompt and the method's own output, one sequence, indexed by every n-gram
  (n <= max_ngram) and updated with each committed token. For each match length p the
  continuations of the earlier occurrences of the last p tokens are counted into a tree.
- Datastore source: continuations of the last p tokens in a large corpus (`specviz.datastore`),
  backing off to shorter p until `min_continuations` are found, counts summed along tree edges.

A node's pseudo-probability is count(prefix + token) / count(root): the share of continuations
that run through it, i.e. an estimate of the chance that the whole path is accepted. Input-source
estimates are over-confident (a single earlier match gives 1.0), so they are scaled down and damped
by depth and by how much shorter than `max_ngram` the match is. The fused score of a node is the
larger of its two sources' scores, so scores never grow from parent to child and the top-S nodes
form a tree. No module here registers a method: `sssd.py` does.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from specviz.datastore import Datastore


@dataclass(frozen=True)
class FusionWeights:
    input_scale: float = 0.6  # alpha: input-source pseudo-probabilities are multiplied by this
    input_depth_decay: float = 0.9  # and by this per level below the first
    short_match_decay: float = 0.6  # and by this per token the match is shorter than max_ngram
    datastore_scale: float = 1.0  # datastore pseudo-probabilities are multiplied by this


@dataclass
class TokenTree:
    """Nodes in topological order (parents first, siblings by descending score)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: child of the last committed token
    scores: list[float] = field(default_factory=list)  # fused pseudo-probability of each node's path
    sources: list[str] = field(default_factory=list)  # "input" (prompt/self-output) or "datastore"
    forwards: int = 0  # draft-model passes spent growing it (0: no model, as n-grams; the record's draft_forwards)

    def __len__(self) -> int:
        return len(self.tokens)

    def subtree(self, nodes: list[int]) -> TokenTree:
        """The tree of these nodes only (increasing, each one's parent among them), renumbered."""
        index = {node: i for i, node in enumerate(nodes)}
        return TokenTree(
            [self.tokens[n] for n in nodes],
            [index[self.parents[n]] if self.parents[n] >= 0 else -1 for n in nodes],
            [self.scores[n] for n in nodes],
            [self.sources[n] for n in nodes],
            self.forwards,
        )


Path = tuple[int, ...]


def count_tree(continuations: Sequence[Sequence[int]]) -> dict[Path, int]:
    """How many continuations start with each path: a trie with counts on its nodes."""
    counts: dict[Path, int] = defaultdict(int)
    for c, k in Counter(map(tuple, continuations)).items():  # repeated continuations counted once each
        for d in range(1, len(c) + 1):
            counts[c[:d]] += k
    return counts


class InputIndex:
    """Every n-gram (n <= max_ngram) of the prompt + own output -> where the token after it sits."""

    def __init__(self, max_ngram: int) -> None:
        self.max_ngram = max_ngram
        self.ids: list[int] = []
        self.after: list[dict[Path, list[int]]] = [defaultdict(list) for _ in range(max_ngram + 1)]

    def extend(self, ids: Sequence[int]) -> None:
        """Index the committed ids beyond those already seen (ids must extend the earlier ones)."""
        for token in ids[len(self.ids) :]:
            self.ids.append(token)
            end = len(self.ids)
            for n in range(1, min(self.max_ngram, end) + 1):
                self.after[n][tuple(self.ids[end - n : end])].append(end)

    def continuations(self, n: int, depth: int, max_count: int) -> list[list[int]]:
        """What followed the most recent earlier occurrences of the last n tokens."""
        if n > len(self.ids):
            return []
        positions = self.after[n].get(tuple(self.ids[-n:]), [])
        recent = [p for p in positions[-max_count - 1 :] if p < len(self.ids)][-max_count:]
        return [self.ids[p : p + depth] for p in recent]


@dataclass(frozen=True)
class SourceConfig:
    max_ngram: int = 3  # longest suffix matched in the prompt/output
    input_matches: int = 20  # most recent matches used per match length
    datastore_ngram: int = 4  # longest suffix looked up in the datastore
    datastore_samples: int = 100  # continuations sampled over a datastore match range
    min_continuations: int = 20  # back off to shorter suffixes until this many are found


def scored_candidates(
    ids: Sequence[int],
    index: InputIndex | None,
    datastore: Datastore | None,
    depth: int,
    cfg: SourceConfig,
    w: FusionWeights,
) -> dict[Path, tuple[float, str]]:
    """Every candidate path after the committed `ids`, with its fused score and the source that
    gave it (`index`: the input source over `ids`, or None to leave it out)."""
    best: dict[Path, tuple[float, str]] = {}

    def offer(counts: dict[Path, int], total: int, scale: float, decay: float, source: str) -> None:
        for path, c in counts.items():
            s = scale * c / total * decay ** (len(path) - 1)
            if s > best.get(path, (0.0, ""))[0]:
                best[path] = (s, source)

    if index is not None and depth > 0:
        for n in range(1, cfg.max_ngram + 1):
            matched = [c for c in index.continuations(n, depth, cfg.input_matches) if c]
            if matched:
                scale = w.input_scale * w.short_match_decay ** (cfg.max_ngram - n)
                offer(count_tree(matched), len(matched), scale, w.input_depth_decay, "input")
    if datastore is not None and depth > 0:
        retrieved: list[list[int]] = []
        for n in range(min(cfg.datastore_ngram, len(ids)), 0, -1):
            retrieved += datastore.continuations(ids[-n:], cfg.datastore_samples, depth)
            if len(retrieved) >= cfg.min_continuations:
                break
        if retrieved:
            offer(count_tree(retrieved), len(retrieved), w.datastore_scale, 1.0, "datastore")
    return best


def first_match_candidates(
    ids: Sequence[int], datastore: Datastore, depth: int, max_ngram: int = 8, count: int = 100
) -> dict[Path, tuple[float, str]]:
    """REST-style baseline (He et al. 2024): the longest suffix of `ids` found in the datastore,
    its first `count` continuations in suffix-array order, scored by their share."""
    for n in range(min(max_ngram, len(ids)), 0, -1):
        conts = datastore.continuations(ids[-n:], count, depth, spread=False)
        if conts:
            return {path: (c / len(conts), "datastore") for path, c in count_tree(conts).items()}
    return {}


def top_tree(candidates: dict[Path, tuple[float, str]], size: int) -> TokenTree:
    """The `size` best-scoring paths whose parents are also chosen, as a flattened tree."""
    chosen: dict[Path, tuple[float, str]] = {}
    for path, value in sorted(candidates.items(), key=lambda kv: (-kv[1][0], len(kv[0]))):
        if len(chosen) >= size:
            break
        if len(path) == 1 or path[:-1] in chosen:
            chosen[path] = value
    tree, index_of = TokenTree(), {}
    for path, (score, source) in sorted(chosen.items(), key=lambda kv: (len(kv[0]), -kv[1][0])):
        index_of[path] = len(tree)
        tree.tokens.append(path[-1])
        tree.parents.append(index_of[path[:-1]] if len(path) > 1 else -1)
        tree.scores.append(score)
        tree.sources.append(source)
    return tree
