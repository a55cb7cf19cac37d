"""Distillation itself: the loss, the learning-rate schedule, validation, and training through the
shared loop (`specviz.train.loop`): seeded, checkpointed, resumable to the same weights."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specviz.train.draft.data import CorpusData, collate
from specviz.train.loop import Checkpoint, CsvLog, LoopConfig, run

if TYPE_CHECKING:
    from specviz.models.draft import ReducedVocabDraft

LOG_COLUMNS = ["step", "tokens", "seconds", "lr", "loss", "agree", "val_loss", "val_agree"]


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000  # optimiser steps
    batch_tokens: int = 4096  # tokens (prompt + answer, padded) per step
    max_len: int = 448  # sequences are cut to this many tokens
    lr: float = 1.5e-3  # peak learning rate (AdamW), after a linear warm-up, cosine decay to lr/10
    warmup: int = 100  # warm-up steps
    weight_decay: float = 0.01
    val_every: int = 250  # steps between validation passes
    val_answers: int = 160  # held-out answers per validation pass
    checkpoint_minutes: float = 5.0  # wall-clock minutes between checkpoints
    bf16: bool = True  # bfloat16 autocast on a CPU (about 1.7x faster there, measured)
    seed: int = 0
    phase_start: int = 0  # step where this learning-rate schedule starts (> 0: continued training)


def distillation_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the draft's head logits [N, K] to the sparse target (indices, weights) [N, k]:
    forward KL(p || q) up to p's entropy, for p restricted to the head."""
    log_q = torch.log_softmax(logits.float(), dim=-1)  # [N, K]
    return -(weights * log_q.gather(1, targets)).sum(-1)  # [N]


@torch.no_grad()
def validate(draft: ReducedVocabDraft, data: CorpusData, cfg: TrainConfig, pad: int) -> dict[str, float]:
    """Held-out greedy answers: the draft's argmax agreement with the target's tokens (greedy
    speculative decoding's acceptance, teacher-forced) and the loss to those tokens."""
    greedy = [e for e in data.val if e.greedy][: cfg.val_answers]
    if not greedy:
        return {"val_agree": float("nan"), "val_loss": float("nan")}
    index_of = draft.lm_head.index_of()
    draft.eval()
    hits = total = 0
    losses = []
    for i in range(0, len(greedy), 16):
        chunk = [replace(e, topk=None) for e in greedy[i : i + 16]]
        ids, pos, targets, weights = collate(chunk, index_of, pad)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = draft.reduced_logits(ids, pos)  # [N, K]
        losses.append(distillation_loss(logits, targets, weights))
        hits += int((logits.argmax(-1) == targets[:, 0]).sum())
        total += sum(len(e.ids) - e.answer_start for e in chunk)  # answers outside the head count as misses
    draft.train()
    return {"val_agree": hits / max(1, total), "val_loss": torch.cat(losses).mean().item()}


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to lr/10 at `cfg.steps`; both counted from `cfg.phase_start`."""
    s = step - cfg.phase_start
    if s < cfg.warmup:
        return cfg.lr * (s + 1) / cfg.warmup
    t = (s - cfg.warmup) / max(1, cfg.steps - cfg.phase_start - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train(
    draft: ReducedVocabDraft,
    data: CorpusData,
    cfg: TrainConfig,
    checkpoint: Path,
    log_path: Path,
    pad: int,
    progress: bool = True,
) -> dict:
    """Minimise the distillation loss; resumes from `checkpoint` when it exists. Returns final metrics."""
    decay = [p for n, p in draft.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in draft.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    state: dict[str, Any] = {"step": 0, "seconds": 0.0, "tokens": 0}
    store = Checkpoint(checkpoint)
    saved = store.load(weights_only=False)
    if saved:
        draft.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"[specviz] resuming from {checkpoint} at step {state['step']}", file=sys.stderr)
    phase = {k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_tokens", "seed")}
    if state["step"] < cfg.steps and (not state.get("phases") or state["phases"][-1] != phase):
        state["phases"] = [*state.get("phases", []), phase]  # the learning-rate schedules this draft saw
    index_of = draft.lm_head.index_of()
    epoch_cache: dict[int, list[list[int]]] = {}

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        epoch, k = position_in_epochs(step, data, cfg, epoch_cache)
        ids, pos, targets, weights = collate([data.train[i] for i in epoch_cache[epoch][k]], index_of, pad)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = draft.reduced_logits(ids, pos)  # [N, K]
        loss = distillation_loss(logits, targets, weights).mean()
        state["tokens"] += len(pos)
        return loss, {"loss": loss.item(), "agree": (logits.argmax(-1) == targets[:, 0]).float().mean().item()}

    def after_step(step: int, metrics: dict) -> dict:
        if step % cfg.val_every == 0 or step == cfg.steps:
            metrics.update(validate(draft, data, cfg, pad))
        return {
            "step": step,
            "tokens": state["tokens"],
            "seconds": round(state["seconds"], 1),
            "lr": f"{lr_at(step - 1, cfg):.2e}",
            **{k: f"{metrics.get(k, float('nan')):.4f}" for k in LOG_COLUMNS[4:]},
        }

    def save(step: int) -> None:
        store.save({"model": draft.state_dict(), "optimizer": opt.state_dict(), "state": dict(state)})

    log = CsvLog(log_path, LOG_COLUMNS, state["step"])
    draft.train()
    loop = LoopConfig(steps=cfg.steps, clip=1.0, save_minutes=cfg.checkpoint_minutes)
    metrics = run(
        loop,
        opt,
        list(draft.parameters()),
        loss_at,
        state,
        lr_at=lambda step: lr_at(step, cfg),
        after_step=after_step,
        log=log,
        save=save,
        progress="distilling" if progress else None,
        show=("loss", "agree"),
    )
    log.close()
    if "val_agree" not in metrics:
        metrics.update(validate(draft, data, cfg, pad))
    return {**metrics, **state}


def position_in_epochs(step: int, data: CorpusData, cfg: TrainConfig, cache: dict) -> tuple[int, int]:
    """(epoch, batch within it) of optimiser step `step`; epochs' batch lists are built once each."""
    epoch, k = 0, step
    while True:
        if epoch not in cache:
            cache.clear()
            cache[epoch] = data.epoch_batches(epoch, cfg.seed, cfg.batch_tokens)
        if k < len(cache[epoch]):
            return epoch, k
        k -= len(cache[epoch])
        epoch += 1
