"""Speculative Streaming's parallel tree-draft pruning layer (Bhendawade et al. 2024, section 3.2.3).

Partway up the verification pass, the main stream's hidden state M^l of every row goes through a
low-rank map o_theta and the target's own final norm and LM head: early-exit logits z~ = H(o_theta(M^l)).
softmax(z~) at a parent node, read at a child's token, estimates the parent -> child transition
probability; a child below the threshold is pruned with its subtree, and the rows left run the rest
of the layers (and carry the streams). Here o_theta(M) = M + U V M with V: H -> r, U: r -> H (r = 8,
U starts at zero, so an untrained pruner is the "logit lens" of layer l), and the head scores the
tokens the trees are drawn from (the streams' frequent-token set, or every token).

Pruning only drops candidates: the kept nodes are verified by the target's final logits as before,
so greedy output and the sampling distribution do not change (a pruned node is a node never drafted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

RANK = 8  # the paper's rank of o_theta


class TreePruner(nn.Module):
    """o_theta at layer `layer` (its input: the hidden states after `layer` decoder layers)."""

    def __init__(
        self,
        hidden: int,
        layer: int,
        rank: int = RANK,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.layer = layer
        self.down = nn.Linear(hidden, rank, bias=False, dtype=dtype, device=device)  # V
        self.up = nn.Linear(rank, hidden, bias=False, dtype=dtype, device=device)  # U
        nn.init.normal_(self.down.weight, std=1 / math.sqrt(hidden))
        nn.init.zeros_(self.up.weight)

    def early_logits(self, h: torch.Tensor, norm: nn.Module, head_rows: torch.Tensor) -> torch.Tensor:
        """z~ = H(o_theta(M^l)): h [.., H] -> [.., K] over the K tokens whose LM-head rows are `head_rows`."""
        return F.linear(norm(h + self.up(self.down(h))), head_rows)


def transition_probs(early: torch.Tensor, parent_rows: Sequence[int], child_columns: torch.Tensor) -> torch.Tensor:
    """p~(child | parent) for each tree node: early [R, K] (early-exit logits of the pass's candidate
    rows: row 0 the last committed token, row 1 + i node i), parent_rows [n] (the row of each node's
    parent), child_columns [n] (each node's token as a column of `early`) -> [n]."""
    probs = early.float().softmax(-1)
    return probs[torch.as_tensor(list(parent_rows), device=early.device), child_columns]


def pruned(parents: Sequence[int], probs: Sequence[float], threshold: float) -> list[bool]:
    """Which nodes go: those whose transition probability is below `threshold`, and their subtrees
    (parents come before their children)."""
    out: list[bool] = []
    for p, q in zip(parents, probs, strict=True):
        out.append(q < threshold or (p >= 0 and out[p]))
    return out
