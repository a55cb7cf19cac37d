"""The one acceptance rule. p: target distribution, q: draft distribution (Leviathan et al. 2023,
Chen et al. 2023). No method re-implements any of this.

Greedy:   accept drafted tokens while they equal the target's argmax, then emit the target's argmax.
Sampling: accept x_i with probability min(1, p(x_i)/q(x_i)); at the first rejection emit a token
          from norm(max(0, p - q)); if every draft survives, emit a bonus token from p.
A drafter without a distribution (prompt lookup, datastores) proposes deterministically, which is a
one-hot q: x_i is accepted with probability p(x_i) and the residual is p without x_i. Both keep the
output distributed exactly as p.

Trees (SSSD, SpecInfer): `verify_tree` walks a token tree from the root. Greedy: follow the child
equal to the target's argmax. Sampling: try the children in order with recursive rejection
(SpecInfer's multi-step speculative sampling): child c is accepted with probability
min(1, p(x_c)/q_c(x_c)); after a rejection p becomes norm(max(0, p - q_c)) for the next sibling;
when every child is rejected the target's token is drawn from what is left of p. With one-hot q
(deterministic drafters) this is exactly "sample x ~ p and follow the child equal to x" (SSSD 4.2).
Lossless for one-hot q with distinct siblings, or for siblings drawn independently from q.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from specviz.models.devices import HOST, host_values, to_device
from specviz.sampling import SamplingConfig, probabilities, sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # n: drafted[:n] survive
    next_token: int | None  # the target's own token: correction after a rejection, or bonus after all
    #                         accepted; None when all were accepted and no row scored the token after them
    p_drafted: tuple[float, ...] | None  # p(x_i) for each drafted x_i; None: not reported (an outside engine)
    q_drafted: tuple[float, ...] | None  # q(x_i) for each drafted x_i; None for a one-hot drafter
    uniforms: tuple[float, ...] | None = None  # sampling: the u_i each x_i was tested with (u_i < p/q accepts)


def verify(
    drafted: list[int],
    target_logits: torch.Tensor,  # [k+1, V] (or [k, V]: no bonus row): row i scores the token after drafted[:i]
    q: torch.Tensor | None,  # [k, V] draft probabilities (already through `probabilities`), or None
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Verdict:
    k = len(drafted)
    if k == 0 and cfg.greedy:  # plain autoregressive step: no probabilities needed
        return Verdict(0, int(target_logits[0].argmax()), (), None if q is None else ())
    p = probabilities(target_logits, cfg)  # [k+1, V] (or [k, V])
    x = to_device(torch.tensor(drafted, dtype=torch.long, device=HOST), p.device)  # [k]
    rows = torch.arange(k, device=p.device)
    px = p[rows, x]  # [k]
    qx = q[rows, x] if q is not None else None  # [k]
    bonus_row = p.shape[0] > k
    uniforms: tuple[float, ...] | None = None  # sampling only
    if cfg.greedy:
        choice = target_logits.argmax(dim=-1)  # [k+1]
        choice_h, px_h, qx_h = _read(choice, px, qx)  # the iteration's one host sync
        n = _leading_true(int(c) == t for c, t in zip(choice_h[:k], drafted, strict=True))
        next_token = int(choice_h[n]) if n < k or bonus_row else None
    else:
        r = torch.rand(k, generator=generator, device=p.device)  # one uniform per draft token
        # accept iff r < min(1, p/q), written without dividing so that q(x) = 0 is safe
        accept = r * (qx if qx is not None else 1.0) < px  # [k]
        accept_h, r_h, px_h, qx_h = _read(accept, r, px, qx)
        n = _leading_true(accept_h)
        uniforms = tuple(r_h)
        if n < k:
            next_token = int(sample(_residual(p[n], q, n, drafted), generator))
        else:
            next_token = int(sample(p[n], generator)) if bonus_row else None
    return Verdict(
        accepted=n,
        next_token=next_token,
        p_drafted=tuple(px_h),
        q_drafted=tuple(qx_h) if qx is not None else None,
        uniforms=uniforms,
    )


def _read(*tensors: torch.Tensor | None) -> list[list[float]]:
    """The values of the given tensors (an absent tensor reads as []), all in one transfer to the host."""
    values = iter(host_values(*(t for t in tensors if t is not None)))
    return [[] if t is None else next(values) for t in tensors]


def _leading_true(flags: Iterable[object]) -> int:
    """Length of the run of true values at the start of `flags`."""
    n = 0
    for flag in flags:
        if not flag:
            break
        n += 1
    return n


def residual(p_n: torch.Tensor, q_n: torch.Tensor | None, x_n: int) -> torch.Tensor:
    """norm(max(0, p - q)): where the target's token comes from after x_n is rejected at a position
    with distributions p_n, q_n ([V] each; q_n None: a deterministic drafter, one-hot at x_n). The
    step-through shows the same distribution. No host sync."""
    excess = _excess(p_n, q_n, x_n)
    total = excess.sum()
    # total is 0 only when p == q, where a rejection cannot happen; keep p as a safe fallback (on the device: no sync)
    return torch.where(total > 0, excess / total, p_n)


def _residual(p_n: torch.Tensor, q: torch.Tensor | None, n: int, drafted: list[int]) -> torch.Tensor:
    """The residual at the first rejected position n of a chain ([k, V] q, or None)."""
    return residual(p_n, q[n] if q is not None else None, drafted[n])


def _excess(p: torch.Tensor, q_x: torch.Tensor | None, x: int) -> torch.Tensor:
    """max(0, p - q), unnormalised; q None: one-hot at x, so p without x."""
    if q_x is None:
        excess = p.clone()
        excess[x] = 0.0
        return excess
    return (p - q_x).clamp_min(0.0)


@dataclass(frozen=True)
class TreeVerdict:
    path: tuple[int, ...]  # accepted nodes (indices into the tree), root first
    next_token: int  # the target's own token after the accepted path
    p_nodes: tuple[float, ...]  # p(x_i) of every node under the target at its parent
    q_nodes: tuple[float, ...] | None  # q(x_i) of every node; None for a one-hot drafter

    @property
    def accepted(self) -> int:
        return len(self.path)

    def main_path(self, parents: list[int], verified: list[int] | None = None) -> list[int]:
        """The accepted path, then the first child of each node below it: the tree's line that a
        record shows as `drafted` (accepted prefix, then the rejected continuation). `verified`: the
        nodes verification saw (None: all); a pruned node is no one's first child."""
        seen = set(range(len(parents)) if verified is None else verified)
        nodes, node = list(self.path), self.path[-1] if self.path else -1
        while (child := next((i for i, p in enumerate(parents) if p == node and i in seen), None)) is not None:
            nodes.append(child)
            node = child
        return nodes

    def renumbered(self, verified: list[int], n: int) -> TreeVerdict:
        """This verdict of a subtree (the nodes `verified` of an n-node tree, in order) in the whole
        tree's numbering; a node verification never saw scores p = 0 (and q = 0)."""
        p, q = [0.0] * n, None if self.q_nodes is None else [0.0] * n
        for i, node in enumerate(verified):
            p[node] = self.p_nodes[i]
            if q is not None and self.q_nodes is not None:
                q[node] = self.q_nodes[i]
        return TreeVerdict(
            tuple(verified[i] for i in self.path), self.next_token, tuple(p), None if q is None else tuple(q)
        )

    def linear(
        self, tokens: list[int], parents: list[int], verified: list[int] | None = None
    ) -> tuple[list[int], Verdict]:
        """The tree verdict as a linear draft and `Verdict` (for `Decoding.commit`)."""
        nodes = self.main_path(parents, verified)
        q = tuple(self.q_nodes[i] for i in nodes) if self.q_nodes is not None else None
        return [tokens[i] for i in nodes], Verdict(
            self.accepted, self.next_token, tuple(self.p_nodes[i] for i in nodes), q
        )


def verify_tree(
    tokens: list[int],  # the n tree nodes' tokens, parents before children, siblings in trial order
    parents: list[int],  # parent of each node; -1: a child of the last committed token (the root)
    target_logits: torch.Tensor,  # [n+1, V]: row 0 scores the root's children, row 1+i node i's
    q: torch.Tensor | None,  # [n, V]: q[i] the distribution node i was drawn from; None: one-hot
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> TreeVerdict:
    n = len(tokens)
    p = probabilities(target_logits, cfg)  # [n+1, V]
    rows_x = to_device(
        torch.tensor([[1 + parent for parent in parents], tokens], dtype=torch.long, device=HOST), p.device
    )
    rows, x = rows_x[0], rows_x[1]  # [n] each: node i's parent row, its token
    qx = q[torch.arange(n, device=p.device), x] if q is not None else None  # [n]
    choices = target_logits.argmax(dim=-1) if cfg.greedy else None  # [n+1]: the target's token after each row
    px_h, qx_h, choice_h = _read(p[rows, x], qx, choices)  # one host sync for the whole tree
    p_nodes, q_nodes = tuple(px_h), None if q is None else tuple(qx_h)
    children: list[list[int]] = [[] for _ in range(n + 1)]  # by row: row 0 is the root
    for i, parent in enumerate(parents):
        children[1 + parent].append(i)
    path: list[int] = []
    row = 0
    while True:
        if cfg.greedy:
            choice = int(choice_h[row])
            child = next((c for c in children[row] if tokens[c] == choice), None)
            next_token = choice
        else:
            child, residual = _try_children(p[row], children[row], tokens, q, generator)
            next_token = int(sample(residual, generator)) if child is None else -1
        if child is None:
            return TreeVerdict(tuple(path), next_token, p_nodes, q_nodes)
        path.append(child)
        row = 1 + child


def _try_children(
    p: torch.Tensor, children: list[int], tokens: list[int], q: torch.Tensor | None, generator: torch.Generator | None
) -> tuple[int | None, torch.Tensor]:
    """Recursive rejection over siblings: the accepted child, or None and the residual of p. One host
    sync per sibling tried (the test and the residual's mass are read together)."""
    for c in children:
        x = tokens[c]
        q_c = q[c] if q is not None else None
        r = torch.rand(1, generator=generator, device=p.device)
        accept = r * (q_c[x] if q_c is not None else 1.0) < p[x]  # [1]
        excess = _excess(p, q_c, x)
        total = excess.sum()
        accepted, mass = _read(accept, total)
        if (
            accepted[0] or mass[0] <= 0
        ):  # a mass of 0: p was (numerically) equal to q_c, where a rejection cannot happen
            return c, p
        p = excess / total  # the residual, normalised by the mass just read
    return None, p
