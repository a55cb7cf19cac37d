"""Train the EAGLE head (EAGLE-1's loss) on the corpus; resumable, validated on held-out answers.

    python -m specviz.eagle.train --data ../shared/data --work runs/eagle --steps 20000 --save-every 200 [--resume]
    python -m specviz.eagle.train ... --features runs/eagle/features   # read f_t from chunks on disk
    python -m specviz.eagle.train --data ../shared/data --evaluate HEAD --val-sequences 40 --depths 5  # score a head

Loss (EAGLE-1, section 3.2): at every entry t whose next token is an answer token, smooth-L1
between f̂_{t+1} and the target's f_{t+1}, plus `token_weight` x the cross-entropy of the head's
token distribution against the target's (both over the K frequent tokens, the target's softmax
renormalised there). Features come from one teacher-forced target prefill per batch, on the fly
(default) or from `specviz.eagle.features` chunks. Validation: top-1 agreement of the head's token
with the target's (full vocabulary) by depth d = 1..D, where depth d feeds the head its own f̂ for
the d-1 entries before (as drafting does; `depth_agreement`), on `--val-sequences` held-out answers.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from specviz.eagle.features import Chunk, chunk_path, corpus_data, features_of, padded, read_chunk
from specviz.models import streaming as msa
from specviz.models.devices import input_embeddings, output_embeddings
from specviz.models.eagle import EagleHead, from_target, load_head, save_head
from specviz.models.kv import additive, new_cache
from specviz.train.draft.data import Example
from specviz.train.loop import Checkpoint, CsvLog, LoopConfig, run


@dataclass(frozen=True)
class TrainConfig:
    data: Path  # the folder of the training prompt files
    work: Path  # checkpoint and log (gitignored)
    out: Path  # the exported head (.safetensors)
    features: Path | None = None  # chunks of f_t on disk (None: computed on the fly, one target prefill per batch)
    steps: int = 2000  # optimiser steps in total (a resumed run continues up to this)
    batch_sequences: int = 8  # sequences per step
    lr: float = 3e-4  # AdamW, constant after `warmup` steps
    warmup: int = 50  # linear warm-up steps
    token_weight: float = 0.1  # w: token loss next to the feature loss (EAGLE-1 uses 0.1)
    save_every: int = 200  # checkpoint every this many steps
    val_every: int = 200  # validate every this many steps
    val_sequences: int = 64  # held-out sequences validated on
    depths: int = 4  # agreement measured at depths 1..depths
    limit: int | None = None  # only the first N training sequences
    # start from this exported head (weights only: a fresh optimiser), not the target's top layer
    init: Path | None = None
    seed: int = 0


def causal_mask(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return additive(torch.ones(n, n, dtype=torch.bool).tril(), dtype, device)[None, None]  # [1, 1, n, n]


def teacher_forced_loss(
    head: EagleHead,
    target: PreTrainedModel,
    ids: torch.Tensor,
    feats: torch.Tensor,
    scored: torch.Tensor,
    w: float = 0.1,
) -> dict:
    """EAGLE-1's loss over ids [B, T] with features [B, T, H]; `scored` [B, T]: positions whose f
    predicts a scored token. Entry t reads (f_t, x_{t+1}) and predicts f_{t+1}."""
    embeds = F.embedding(ids[:, 1:], input_embeddings(target))  # [B, T-1, H] e(x_{t+1})
    n = ids.shape[1] - 1
    positions = torch.arange(n, device=ids.device)[None].expand(ids.shape[0], n)  # [B, T-1]
    f_hat = head(embeds, feats[:, :-1], positions, causal_mask(n, feats.dtype, feats.device))  # [B, T-1, H]
    truth = feats[:, 1:]  # [B, T-1, H] f_{t+1}
    m = scored[:, 1:].float()  # [B, T-1]
    count = m.sum().clamp_min(1.0)
    feat_loss = (F.smooth_l1_loss(f_hat, truth, reduction="none").mean(-1) * m).sum() / count
    p = torch.softmax(head.logits(truth).float(), dim=-1)  # [B, T-1, K] the target's, renormalised on K
    log_q = torch.log_softmax(head.logits(f_hat).float(), dim=-1)
    token_loss = (-(p * log_q).sum(-1) * m).sum() / count
    return {"loss": feat_loss + w * token_loss, "feat_loss": feat_loss, "token_loss": token_loss, "f_hat": f_hat}


@torch.no_grad()
def chain_features(
    head: EagleHead, target: PreTrainedModel, ids: torch.Tensor, feats: torch.Tensor, depths: int
) -> list[torch.Tensor]:
    """f̂ of rounds 1..`depths`, each [B, T-1, H]: entry t of round d reads its own f̂ from round d-1
    (round 1: the target's f_t) and sees round 1's entries <= t-d+1 and round s's entry t-d+s: the
    head's cache when it drafts a chain from the true features up to t-d+1 (EAGLE-3's training-time
    test mask). Entry t of round d is defined for t >= d-1."""
    B, T = ids.shape
    n = T - 1
    embeds = F.embedding(ids[:, 1:], input_embeddings(target))  # [B, n, H] e(x_{t+1})
    positions = torch.arange(n, device=ids.device)[None].expand(B, n)
    cache, inputs, rounds = new_cache(head.config), feats[:, :-1], []
    t = torch.arange(n)
    for d in range(1, depths + 1):
        visible = torch.zeros(n, d * n, dtype=torch.bool)
        visible[:, :n] = torch.arange(n)[None] <= (t - d + 1)[:, None]  # round 1
        for s in range(2, d + 1):
            j = t - d + s
            ok = j >= 0
            visible[t[ok], (s - 1) * n + j[ok]] = True
        f_hat = head(embeds, inputs, positions, additive(visible, feats.dtype, feats.device)[None, None], cache)
        rounds.append(f_hat)
        inputs = torch.cat([torch.zeros_like(f_hat[:, :1]), f_hat[:, :-1]], dim=1)  # entry t reads f̂_t
    return rounds


@torch.no_grad()
def depth_agreement(
    head: EagleHead,
    target: PreTrainedModel,
    ids: torch.Tensor,
    scored: torch.Tensor,
    depths: int,
    feats: torch.Tensor | None = None,
) -> list[tuple[int, int]]:
    """(agreeing, counted) at depths 1..`depths`: the head's top token at entry t of round d
    (`chain_features`) against the target's greedy token after f_{t+1}, where f_{t+1} is scored."""
    feats = features_of(target, ids) if feats is None else feats  # [B, T, H]
    n = ids.shape[1] - 1
    want = (feats[:, 1:] @ output_embeddings(target).T).argmax(-1)  # [B, n] the target's token after f_{t+1}
    out = []
    for d, f_hat in enumerate(chain_features(head, target, ids, feats, depths), start=1):
        got = head.vocab_ids[head.logits(f_hat).argmax(-1)]  # [B, n]
        valid = scored[:, 1:] & (torch.arange(n) >= d - 1)[None].to(scored.device)
        out.append((int(((got == want) & valid).sum()), int(valid.sum())))
    return out


def scored_positions(examples: list[Example], width: int) -> torch.Tensor:
    """[B, width] True where f_t predicts an answer token: answer_start - 1 <= t < len - 1."""
    scored = torch.zeros(len(examples), width, dtype=torch.bool)
    for b, e in enumerate(examples):
        scored[b, e.answer_start - 1 : len(e.ids) - 1] = True
    return scored


class Features:
    """f_t of a batch: from chunks on disk (`work`) or by one target prefill."""

    def __init__(self, target: PreTrainedModel, folder: Path | None) -> None:
        self.target, self.folder = target, folder
        self.loaded: dict[int, Chunk] = {}
        self.chunk = len(self._chunk(0).sequences) if folder is not None else 0  # sequences per chunk

    def of(self, indices: list[int], examples: list[Example], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.folder is None:
            return features_of(self.target, ids, mask).float()
        feats = torch.zeros(*ids.shape, self.target.config.hidden_size)
        for b, i in enumerate(indices):
            c = self._chunk(i // self.chunk)
            feats[b, : len(examples[i].ids)] = c.of(i % self.chunk)
        return feats

    def _chunk(self, index: int) -> Chunk:
        if index not in self.loaded:
            assert self.folder is not None
            c = read_chunk(chunk_path(self.folder, "train", index))
            if c is None:
                raise FileNotFoundError(
                    f"no feature chunk {index} in {self.folder}: run python -m specviz.eagle.features"
                )
            self.loaded = {index: c}
        return self.loaded[index]


def batch_of(step: int, n: int, cfg: TrainConfig) -> list[int]:
    """The training sequences of step `step`: a seeded shuffle per epoch, cut in batches (a function of the step)."""
    per_epoch = max(1, n // cfg.batch_sequences)
    epoch, k = divmod(step, per_epoch)
    order = list(range(n))
    random.Random(cfg.seed * 1000 + epoch).shuffle(order)
    return order[k * cfg.batch_sequences : (k + 1) * cfg.batch_sequences]


def validate(head: EagleHead, target: PreTrainedModel, val: list[Example], cfg: TrainConfig, pad: int) -> dict:
    """Held-out loss and top-1 agreement by depth (one sequence at a time: no padding inside rounds)."""
    head.eval()
    agree = [[0, 0] for _ in range(cfg.depths)]
    losses = []
    for e in val[: cfg.val_sequences]:
        ids = torch.tensor([e.ids])
        scored = scored_positions([e], ids.shape[1])
        feats = features_of(target, ids).float()
        with torch.no_grad():
            losses.append(float(teacher_forced_loss(head, target, ids, feats, scored, cfg.token_weight)["loss"]))
        for d, (a, c) in enumerate(depth_agreement(head, target, ids, scored, cfg.depths, feats)):
            agree[d][0] += a
            agree[d][1] += c
    head.train()
    row = {"val_loss": sum(losses) / max(1, len(losses))}
    row.update({f"top1_d{d + 1}": a / max(1, c) for d, (a, c) in enumerate(agree)})
    return row


def train(cfg: TrainConfig, resume: bool = False) -> dict:
    """Train (or resume) to cfg.steps; export the head to cfg.out; returns the last validation row."""
    from specviz.models.default import load_target

    torch.manual_seed(cfg.seed)
    target, tokenizer = load_target(torch.device("cpu"), torch.float32)
    target.requires_grad_(False)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    data = corpus_data(cfg.data, tokenizer)
    examples = data.train[: cfg.limit] if cfg.limit else data.train
    head = (load_head(target, cfg.init) if cfg.init else from_target(target)).float().train()
    params: list[torch.Tensor] = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    cfg.work.mkdir(parents=True, exist_ok=True)
    ckpt = Checkpoint(cfg.work / "eagle.pt")
    saved = ckpt.load() if resume else None
    state: dict = {"step": 0, "seconds": 0.0}
    if cfg.init and saved is None:  # continue the step count (and with it the batch order) of the exported head
        state["step"] = int(msa.read_adapter_meta(cfg.init).get("steps", 0))
    if saved is not None:
        head.load_state_dict(saved["head"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
    features = Features(target, cfg.features)
    columns = ["step", "seconds", "loss", "feat_loss", "token_loss", "val_loss"]
    columns += [f"top1_d{d + 1}" for d in range(cfg.depths)]
    log = CsvLog(cfg.work / "log.csv", columns, int(state["step"]))
    last: dict = {}

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        indices = batch_of(step, len(examples), cfg)
        batch = [examples[i] for i in indices]
        ids, mask = padded(batch, pad)
        feats = features.of(indices, examples, ids, mask)
        out = teacher_forced_loss(head, target, ids, feats, scored_positions(batch, ids.shape[1]), cfg.token_weight)
        return out["loss"], {k: float(out[k].detach()) for k in ("loss", "feat_loss", "token_loss")}

    def after_step(step: int, stats: dict) -> dict:
        row = {"step": step, "seconds": round(state["seconds"], 1), **stats}
        if step % cfg.val_every == 0 or step == cfg.steps:
            row.update(validate(head, target, data.val, cfg, pad))
            last.update(row)
        return row

    def save(step: int) -> None:
        ckpt.save({"head": head.state_dict(), "opt": opt.state_dict(), "state": dict(state), "config": str(cfg)})

    def lr_at(step: int) -> float:
        return cfg.lr * min(1.0, (step + 1) / cfg.warmup)

    if state["step"] == 0:  # the initial head's figures, for the log's first row
        log.write({"step": 0, "seconds": 0.0, **validate(head, target, data.val, cfg, pad)})
    loop = LoopConfig(steps=cfg.steps, clip=1.0, save_every=cfg.save_every)
    run(loop, opt, params, loss_at, state, lr_at=lr_at, after_step=after_step, log=log, save=save, progress="eagle")
    log.close()
    meta = {"steps": str(state["step"]), "config": json.dumps(asdict(cfg), default=str), "validation": json.dumps(last)}
    save_head(head, target, cfg.out, meta)
    return last


def evaluate(cfg: TrainConfig, head_path: Path) -> dict:
    """An exported head's held-out loss and top-1 agreement by depth on `cfg.val_sequences` held-out answers."""
    from specviz.models.default import load_target

    target, tokenizer = load_target(torch.device("cpu"), torch.float32)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    data = corpus_data(cfg.data, tokenizer)
    head = load_head(target, head_path).float()
    return {
        "head": str(head_path),
        "sequences": min(cfg.val_sequences, len(data.val)),
        **validate(head, target, data.val, cfg, pad),
    }


def main(argv: list[str] | None = None) -> int:
    d = TrainConfig(data=Path(), work=Path(), out=Path())
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="the folder of the training prompt files")
    p.add_argument("--work", type=Path, default=Path("runs/eagle"), help="checkpoint and log (gitignored)")
    p.add_argument("--out", type=Path, default=Path("runs/eagle/head.safetensors"), help="the exported head")
    p.add_argument("--features", type=Path, default=None, help="feature chunks on disk (default: on the fly)")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-sequences", type=int, default=d.batch_sequences)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup", type=int, default=d.warmup)
    p.add_argument("--save-every", type=int, default=d.save_every)
    p.add_argument("--val-every", type=int, default=d.val_every)
    p.add_argument("--val-sequences", type=int, default=d.val_sequences)
    p.add_argument("--depths", type=int, default=d.depths)
    p.add_argument("--limit", type=int, default=None, help="only the first N training sequences")
    p.add_argument("--resume", action="store_true", help="continue from the work folder's checkpoint")
    p.add_argument(
        "--init", type=Path, default=None, help="start from an exported head (a committed one: runs/ is gone)"
    )
    p.add_argument(
        "--evaluate",
        type=Path,
        default=None,
        help="only evaluate this exported head on --val-sequences held-out answers",
    )
    a = p.parse_args(argv)
    cfg = TrainConfig(
        data=a.data,
        work=a.work,
        out=a.out,
        features=a.features,
        steps=a.steps,
        batch_sequences=a.batch_sequences,
        lr=a.lr,
        warmup=a.warmup,
        save_every=a.save_every,
        val_every=a.val_every,
        val_sequences=a.val_sequences,
        depths=a.depths,
        limit=a.limit,
        init=a.init,
    )
    started = time.monotonic()
    print(json.dumps(evaluate(cfg, a.evaluate) if a.evaluate else train(cfg, resume=a.resume)))
    print(f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
