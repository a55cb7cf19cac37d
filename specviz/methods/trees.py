"""Tree drafting behind one interface, as `drafting.Drafter` is for chains.

A `TreeDrafter` proposes a `TokenTree` to follow the committed ids; `tree_step` verifies the whole
tree in one target forward (4D ancestor mask), commits the accepted path with the tree acceptance
rule (`verify_tree`; a deterministic draft is a one-hot q, so sampling stays exact) and keeps only
that path's keys and values. SSSD's n-gram trees and Speculative Streaming's stream trees are
tree drafters; a new tree method is a drafter and a loop of `tree_step`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.decoding import Decoding
from specviz.extras import Extra, Parent, TokenId, TreeExtra
from specviz.methods.ngram_tree import TokenTree
from specviz.models.kv import CachedLM
from specviz.records import IterationRecord
from specviz.verify import TreeVerdict, verify_tree


@dataclass(frozen=True)
class TreeContext:
    ids: list[int]  # the committed tokens (prompt + output so far)
    depth: int  # the most drafted tokens a path may hold (the output budget left, minus the target's own token)

    @classmethod
    def of(cls, dec: Decoding) -> TreeContext:
        return cls(dec.ids, dec.remaining - 1)


class TreeDrafter(Protocol):
    @property
    def hidden_layer(self) -> int | None:
        """The decoder layer whose input hidden states the drafter reads back after verification (None: none)."""

    def propose(self, context: TreeContext, budget: int) -> TokenTree:
        """A tree of at most `budget` nodes (and `context.depth` levels) to follow `context.ids`."""

    def kept(self, path: list[int], hidden: torch.Tensor | None) -> None:
        """After verification: the accepted nodes (tree indices, root first) and, when `hidden_layer`
        is set, the hidden states entering that layer for the pass's rows: [1 + n, H], the last
        committed token and the tree; [m + n, H], every new committed token too, when `tree_step`
        was asked for `all_rows`; what `tree_step`'s `verify` returned when it was given one."""


def tree_extra(
    tree: TokenTree, path: tuple[int, ...], drafted_nodes: list[int], batch_size: int | None = None
) -> TreeExtra:
    """The record's tree fields: the whole tree (for the tree plot) and each drafted token's source."""
    return TreeExtra(
        tree_tokens=tuple(TokenId(t) for t in tree.tokens),
        tree_parents=tuple(Parent(p) for p in tree.parents),
        tree_scores=tuple(round(s, 4) for s in tree.scores),
        tree_sources=tuple(tree.sources),
        accepted_path=tuple(path),
        sources=tuple(tree.sources[i] for i in drafted_nodes),
        batch_size=batch_size,
    )


def commit_tree(
    dec: Decoding,
    tree: TokenTree,
    logits: torch.Tensor,
    t_start: float,
    t_drafted: float,
    batch_size: int | None = None,
    kept: list[int] | None = None,
    extra: Sequence[Extra] = (),
) -> tuple[IterationRecord, TreeVerdict]:
    """Verify a draft tree (no draft distribution: one-hot q) against the target's tree logits and
    commit the accepted path; returns the record and the verdict (its `path` says which nodes to keep).
    The record's draft passes are the tree's `forwards`. `batch_size`: the sequences verified in the
    same forward (SSSD's static batch), for the record. `kept`: the nodes verified (None: all); the
    others were pruned before verification, so only the subtree of these competes (their rows of
    `logits` are not read), and the verdict's nodes are the whole tree's. `extra`: the record's other
    fields (`specviz.extras`) beside the tree's."""
    if kept is not None:
        sub = tree.subtree(kept)
        tv = verify_tree(
            sub.tokens, sub.parents, logits[[0, *(1 + i for i in kept)]], None, dec.sampling, dec.generator
        )
        tv = tv.renumbered(kept, len(tree))
    else:
        tv = verify_tree(tree.tokens, tree.parents, logits, None, dec.sampling, dec.generator)
    drafted, verdict = tv.linear(tree.tokens, tree.parents, kept)
    record = dec.commit(
        drafted=drafted,
        verdict=verdict,
        speculation_length=len(tree),
        t_start=t_start,
        t_drafted=t_drafted,
        draft_forwards=tree.forwards,
        extra=(tree_extra(tree, tv.path, tv.main_path(tree.parents, kept), batch_size), *extra),
    )
    return record, tv


class TreeVerify(Protocol):
    def __call__(
        self, target: CachedLM, new_tokens: list[int], tree: TokenTree
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[int] | None]:
        """The target's forward over the new committed tokens and the tree: logits [1 + n, V] as
        `CachedLM.forward_tree` returns them, what the drafter's `kept` reads (or None), and the
        nodes the pass verified (None: all; the others were pruned, their rows are not read)."""


def tree_step(
    dec: Decoding,
    target: CachedLM,
    drafter: TreeDrafter,
    budget: int,
    all_rows: bool = False,
    verify: TreeVerify | None = None,
    extra: Callable[[], Sequence[Extra]] | None = None,
) -> IterationRecord:
    """Draft a tree, verify it in one target forward, keep the accepted path in the cache. `all_rows`:
    hand the drafter the hidden states of every new committed token, not only the last one's.
    `verify`: a forward of the drafter's own instead (speculative streaming's pass that also drafts).
    `extra`: the record's fields the drafter knows once the pass ran (the streaming pass's shape)."""
    t_start = dec.now()
    tree = drafter.propose(TreeContext.of(dec), budget)
    t_drafted = dec.now()
    position, new = len(dec.ids), dec.ids[len(target) :]
    kept = None
    if verify is not None:
        logits, hidden, kept = verify(target, new, tree)
    elif drafter.hidden_layer is None:
        logits, hidden = target.forward_tree(new, tree.tokens, tree.parents), None
    else:
        logits, hidden = target.forward_tree_hidden(new, tree.tokens, tree.parents, drafter.hidden_layer, all_rows)
    record, tv = commit_tree(dec, tree, logits, t_start, t_drafted, kept=kept, extra=extra() if extra else ())
    path = list(tv.path[: record.accepted])
    target.keep_path(position, path)
    drafter.kept(path, hidden)
    return record


def greedy_path(tokens: Sequence[int], parents: Sequence[int], continuation: Sequence[int]) -> list[int]:
    """The nodes greedy verification keeps when the target's next tokens are `continuation` (a replay
    without the target): from the root, the child whose token is the target's, while there is one."""
    path: list[int] = []
    node: int | None = -1  # the root
    for want in continuation:
        node = next((i for i, p in enumerate(parents) if p == node and tokens[i] == want), None)
        if node is None:
            break
        path.append(node)
    return path
