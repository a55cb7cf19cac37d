"""OSD's buffers (Algorithm 1): R collects, during one request, the positions to learn from and the
target's distributions there; Q keeps the finished requests until the next draft update.

Target distributions are stored as fp16 log-probabilities, either in full ([N, V]: 2V bytes a
position, 98 KB for SmolLM2's 49,152 tokens) or as the top-k (6k bytes a position: 384 B at k = 64)
with the remaining mass spread evenly over the other tokens when the loss needs the whole p.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from specviz.metrics import tested
from specviz.models.devices import HOST
from specviz.records import IterationRecord

POSITIONS = ("wrong", "all")


@dataclass(frozen=True)
class TargetDistributions:
    """p at N positions: full fp16 log-probs [N, V], or the top-k (values [N, k] fp16, indices [N, k] int32)."""

    log_p: torch.Tensor  # [N, V] or [N, k] fp16 log-probabilities
    indices: torch.Tensor | None  # [N, k] token ids of the top-k; None: log_p is the full distribution
    vocab: int  # V

    @classmethod
    def from_logits(cls, logits: torch.Tensor, top_k: int) -> TargetDistributions:
        log_p = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
        vocab = log_p.shape[-1]
        if not top_k or top_k >= vocab:
            return cls(log_p.half(), None, vocab)
        values, indices = torch.topk(log_p, top_k, dim=-1)  # [N, k]
        return cls(values.half(), indices.int(), vocab)

    def __len__(self) -> int:
        return self.log_p.shape[0]

    @property
    def nbytes(self) -> int:
        return self.log_p.nbytes + (self.indices.nbytes if self.indices is not None else 0)

    def full(self) -> torch.Tensor:
        """[N, V] float32 log-probabilities; with top-k, the tail mass 1 - sum(top-k) is spread evenly."""
        if self.indices is None:
            return self.log_p.float()
        values = self.log_p.float()  # [N, k]
        k = values.shape[-1]
        tail = (1.0 - values.exp().sum(dim=-1, keepdim=True)).clamp_min(1e-8)  # [N, 1]
        out = (tail / (self.vocab - k)).log().expand(-1, self.vocab).clone()  # [N, V]
        out.scatter_(-1, self.indices.long(), values)
        return torch.log_softmax(out, dim=-1)  # renormalise the fp16 rounding away

    def to(self, device: torch.device) -> TargetDistributions:
        indices = None if self.indices is None else self.indices.to(device)
        return TargetDistributions(self.log_p.to(device), indices, self.vocab)

    @staticmethod
    def cat(parts: list[TargetDistributions]) -> TargetDistributions:
        tops = [p.indices for p in parts if p.indices is not None]
        if tops and len(tops) < len(parts):
            raise ValueError("cannot concatenate full distributions with top-k ones")
        indices = torch.cat(tops) if tops else None
        return TargetDistributions(torch.cat([p.log_p for p in parts]), indices, parts[0].vocab)


@dataclass(frozen=True)
class Sample:
    """One served request as training data: its whole token sequence and the recorded positions."""

    ids: tuple[int, ...]  # prompt + generated tokens
    positions: tuple[int, ...]  # indices j into ids where p(. | ids[:j]) was recorded
    target: TargetDistributions  # p at those positions, in the same order

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def nbytes(self) -> int:
        return self.target.nbytes + 8 * (len(self.ids) + len(self.positions))


class RequestBuffer:
    """R: the positions of one request worth learning from, filled by the speculative loop (an `Updater`).

    positions "wrong": where the draft's token was rejected (the paper's choice: the target's token
    and distribution there are what the draft got wrong); "all": every position the target verified.
    """

    def __init__(self, positions: str = "wrong", top_k: int = 64) -> None:
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        self.which, self.top_k = positions, top_k
        self.positions: list[int] = []
        self.parts: list[TargetDistributions] = []
        self.drafted = self.accepted = 0  # this request's totals, for the simulator

    @torch.no_grad()
    def observe(self, record: IterationRecord, target_logits: torch.Tensor) -> None:
        self.drafted += len(record.drafted)
        self.accepted += record.accepted
        committed = len(record.emitted)  # rows beyond the emitted tokens scored text that was never committed
        if self.which == "all":
            rows = list(range(committed))
        else:
            rows = [record.accepted] if tested(record) > record.accepted else []  # the refused draft's position
        if rows:
            self.positions += [record.position + i for i in rows]
            # p's top-k made where the logits are; the request's rows come to the host once, in `finish`
            self.parts.append(TargetDistributions.from_logits(target_logits[rows].detach(), self.top_k))

    def finish(self, ids: list[int]) -> Sample | None:
        """The request as a training sample (None when nothing was recorded)."""
        if not self.positions:
            return None
        return Sample(tuple(ids), tuple(self.positions), TargetDistributions.cat(self.parts).to(HOST))


class ReplayBuffer:
    """Q: finished requests waiting for the next update, at most `cap` recorded positions (oldest evicted)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.samples: deque[Sample] = deque()
        self.positions = 0  # recorded positions held
        self.evicted = 0  # samples dropped for the cap so far

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.positions += len(sample)
        while self.positions > self.cap and len(self.samples) > 1:
            self.positions -= len(self.samples.popleft())
            self.evicted += 1

    def take(self) -> list[Sample]:
        """Everything held, and the buffer emptied (the paper clears Q after each update)."""
        out = list(self.samples)
        self.samples.clear()
        self.positions = 0
        return out

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.samples)
