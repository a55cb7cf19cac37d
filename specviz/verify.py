"""The one acceptance rule. p: target distribution, q: draft distribution (Leviathan et al. 2023,
Chen et al. 2023). No method re-implements any of this.

Greedy:   accept drafted tokens while they equal the target's argmax, then emit the target's argmax.
Sampling: accept x_i with probability min(1, p(x_i)/q(x_i)); at the first rejection emit a token
          from norm(max(0, p - q)); if every draft survives, emit a bonus token from p.
A drafter without a distribution (prompt lookup, datastores) proposes deterministically, which is a
one-hot q: x_i is accepted with probability p(x_i) and the residual is p without x_i. Both keep the
output distributed exactly as p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.sampling import SamplingConfig, probabilities, sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # n: drafted[:n] survive
    next_token: int  # the target's own token: correction after a rejection, or bonus after all accepted
    p_drafted: tuple[float, ...]  # p(x_i) for each drafted x_i
    q_drafted: tuple[float, ...] | None  # q(x_i) for each drafted x_i; None for a one-hot drafter


def verify(
    drafted: list[int],
    target_logits: torch.Tensor,  # [k+1, V]: row i scores the token after drafted[:i]
    q: torch.Tensor | None,  # [k, V] draft probabilities (already through `probabilities`), or None
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Verdict:
    k = len(drafted)
    if k == 0 and cfg.greedy:  # plain autoregressive step: no probabilities needed
        return Verdict(0, int(target_logits[0].argmax()), (), None if q is None else ())
    p = probabilities(target_logits, cfg)  # [k+1, V]
    x = torch.tensor(drafted, dtype=torch.long, device=p.device)  # [k]
    rows = torch.arange(k, device=p.device)
    px = p[rows, x]  # [k]
    qx = q[rows, x] if q is not None else None  # [k]
    if cfg.greedy:
        choice = target_logits.argmax(dim=-1)  # [k+1]
        n = _leading_true(choice[:k] == x)
        next_token = int(choice[n])
    else:
        r = torch.rand(k, generator=generator, device=p.device)  # one uniform per draft token
        # accept iff r < min(1, p/q), written without dividing so that q(x) = 0 is safe
        n = _leading_true(r * (qx if qx is not None else 1.0) < px)
        next_token = int(sample(p[n] if n == k else _residual(p[n], q, n, x), generator))
    return Verdict(
        accepted=n,
        next_token=next_token,
        p_drafted=tuple(px.tolist()),
        q_drafted=tuple(qx.tolist()) if qx is not None else None,
    )


def _leading_true(mask: torch.Tensor) -> int:
    """Length of the run of True at the start of a 1-D bool tensor."""
    return int(mask.long().cumprod(dim=0).sum())


def _residual(p_n: torch.Tensor, q: torch.Tensor | None, n: int, x: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) at the first rejected position n (q one-hot at x_n when q is None)."""
    if q is None:
        residual = p_n.clone()
        residual[x[n]] = 0.0
    else:
        residual = (p_n - q[n]).clamp_min(0.0)
    total = residual.sum()
    # total is 0 only when p == q, where a rejection cannot happen; keep p as a safe fallback
    return residual / total if total > 0 else p_n
