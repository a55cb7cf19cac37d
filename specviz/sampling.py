"""Logits -> probabilities, with temperature, top-k and top-p applied the same way to p and q."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.errors import SpecvizError
from specviz.limits import check_temperature


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 means greedy decoding (argmax); else (>= MIN_TEMPERATURE) samples softmax(logits / T)
    top_k: int = 0  # keep only the k most likely tokens before sampling; 0 keeps all
    top_p: float = 1.0  # keep the smallest set of tokens whose mass reaches top_p; 1.0 keeps all

    def __post_init__(self) -> None:
        check_temperature(self.temperature)
        if self.top_k < 0:
            raise SpecvizError(f"top_k must be 0 (off) or a positive integer, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SpecvizError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probabilities(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The distribution a method samples from: [..., V] logits -> [..., V] float32 probabilities.

    Greedy decoding reports the plain softmax (temperature 1): it is what p(x) and q(x) mean
    in the records and the app, while acceptance itself uses the argmax.
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of strictly more likely tokens
        sorted_p = sorted_p.masked_fill(mass_before >= cfg.top_p, 0.0)  # the top token always stays
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of [..., V] probabilities -> [...] token ids."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
