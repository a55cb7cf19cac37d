"""Distillation losses between the target distribution p and the draft distribution q (OSD section 4.2).

All take log-probabilities over the same vocabulary and return the mean over positions; they are
written in log space (log_softmax, logsumexp) so that tiny probabilities neither underflow nor NaN.

    forward KL  KL(p || q) = sum_x p(x) (log p(x) - log q(x))      mass-covering
    reverse KL  KL(q || p) = sum_x q(x) (log q(x) - log p(x))      mode-seeking
    JSD[beta]   beta KL(p || m) + (1 - beta) KL(q || m),  m = beta p + (1 - beta) q   (GKD's form)
"""

from __future__ import annotations

import math

import torch

LOSSES = ("fkl", "rkl", "jsd")


def kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) per row of [..., V] log-probabilities, with 0 log 0 = 0 where a(x) = 0."""
    a = log_a.exp()
    terms = a * (log_a - log_b)  # [..., V]
    return torch.where(a > 0, terms, torch.zeros_like(terms)).sum(dim=-1)  # [...]


def jsd(log_p: torch.Tensor, log_q: torch.Tensor, beta: float) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence per row; beta = 0.5 is the symmetric JSD."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"JSD beta must be in (0, 1), got {beta}")
    # log m = log(beta p + (1 - beta) q), computed without leaving log space
    log_m = torch.logsumexp(torch.stack([log_p + math.log(beta), log_q + math.log(1 - beta)]), dim=0)
    return beta * kl(log_p, log_m) + (1 - beta) * kl(log_q, log_m)


def distillation_loss(
    target_log_p: torch.Tensor,  # [N, V] target log-probabilities (temperature 1)
    draft_logits: torch.Tensor,  # [N, V] draft logits
    loss: str = "fkl",
    temperature: float = 1.0,
    beta: float = 0.5,
) -> torch.Tensor:
    """Mean divergence between p and q over N positions, both softened by `temperature`."""
    log_p = torch.log_softmax(target_log_p.float() / temperature, dim=-1)  # softmax(logits / T) in log space
    log_q = torch.log_softmax(draft_logits.float() / temperature, dim=-1)
    if loss == "fkl":
        per_position = kl(log_p, log_q)
    elif loss == "rkl":
        per_position = kl(log_q, log_p)
    elif loss == "jsd":
        per_position = jsd(log_p, log_q, beta)
    else:
        raise ValueError(f"unknown distillation loss '{loss}' (one of {', '.join(LOSSES)})")
    return per_position.mean()
