"""Distil a small draft model from a target: teacher sampling + forward KL to the full distribution.

    python -m specviz.train.draft --target default --prompts sharegpt_prompts.jsonl \
        --work runs/draft --out assets/drafts/my-draft --steps 600

Stage 1 samples the target on training prompts (`specviz.train.teacher`; its logits are kept).
Stage 2 trains a small Llama on the target's tokenizer to minimise KL(p || q) over the whole
vocabulary at every answer position (the OSD paper's best recipe: teacher sampling, forward KL).
Stage 3 writes a loadable draft folder: config.json, safetensors shards of at most 20 MB, and a
model card with the data, steps, time, c (draft / target cost per token) and validation metrics.
Training is seeded, checkpoints every few minutes and resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.train.teacher import TeacherConfig, generate_teacher_text, logits_rows, read_records


@dataclass(frozen=True)
class DraftShape:
    hidden: int = 256  # residual width; the tied embedding is [V, hidden] (most of the parameters)
    layers: int = 4  # decoder layers
    heads: int = 4  # attention heads (head_dim = hidden / heads)
    kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate: int = 512  # MLP width
    init: str = "pca"  # "pca": embedding = top principal components of the target's; "random"


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 600  # optimiser steps
    batch_size: int = 8  # sequences (prompt + answer) per step
    max_len: int = 448  # sequences are cut to this many tokens
    lr: float = 2e-3  # peak learning rate (AdamW), after a linear warm-up, cosine decay to lr/10
    warmup: int = 30  # warm-up steps
    weight_decay: float = 0.0
    val_every: int = 50  # steps between validation passes
    checkpoint_minutes: float = 5.0  # wall-clock minutes between checkpoints
    seed: int = 0
    phase_start: int = 0  # step where this learning-rate schedule starts (> 0: continued training)


VAL_MODULUS = 50  # records with prompt_index % 50 == 0 are held out for validation


def load_target_for_training(target: str, device: str = "cpu"):
    """(model, tokenizer, eos ids) of the target to distil from: 'default', 'tiny-random' or a hub id / folder."""
    from specviz.models import hub
    from specviz.models.pair import eos_ids

    dev = hub.resolve_device(device)
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    if target == "default":
        from specviz.models.default import load_target

        model, tokenizer = load_target(dev, dtype)
    elif target == "tiny-random":
        from specviz.models.tiny import TARGET_CONFIG, tiny_model, tiny_tokenizer

        model, tokenizer = tiny_model(seed=1, **TARGET_CONFIG).to(dev, dtype), tiny_tokenizer()
        return model, tokenizer, (0,)
    else:
        tokenizer = hub.load_tokenizer(target)
        model = hub.load_causal_lm(target, dev, dtype)
    return model, tokenizer, eos_ids(model, tokenizer)


# ---------------------------------------------------------------------------------------------
# The draft model


def draft_config(target_config, shape: DraftShape):
    """A Llama config for the draft: the target's vocabulary, special tokens and RoPE; the given shape."""
    from transformers import LlamaConfig

    t = target_config
    rope = getattr(t, "rope_parameters", None) or {"rope_type": "default", "rope_theta": getattr(t, "rope_theta", 10000.0)}
    return LlamaConfig(
        vocab_size=t.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=getattr(t, "max_position_embeddings", 2048),
        rope_parameters=dict(rope),
        rms_norm_eps=getattr(t, "rms_norm_eps", 1e-5),
        tie_word_embeddings=True,
        bos_token_id=getattr(t, "bos_token_id", None),
        eos_token_id=getattr(t, "eos_token_id", None),
        pad_token_id=getattr(t, "pad_token_id", None),
        initializer_range=0.02,
    )


def new_draft(target, shape: DraftShape, seed: int):
    """A fresh draft; with init="pca" its embedding is the target's projected on its top principal axes
    (so that tokens the target finds alike start alike)."""
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        draft = LlamaForCausalLM(draft_config(target.config, shape)).float()
    if shape.init == "pca":
        e = target.get_input_embeddings().weight.detach().float().cpu()  # [V, H_target]
        centred = e - e.mean(dim=0)
        k = min(shape.hidden, e.shape[1])
        _, _, v = torch.linalg.svd(centred, full_matrices=False)  # v: [H_target, H_target]
        proj = centred @ v[:k].T  # [V, k]
        emb = draft.get_input_embeddings().weight
        with torch.no_grad():
            emb.zero_()
            emb[:, :k] = proj / proj.norm(dim=1).mean()  # rows of norm ~1: initial logits h . e of std ~1
    elif shape.init != "random":
        raise SpecvizError(f"unknown --init '{shape.init}': use pca or random")
    return draft


def draft_logits(draft, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Draft logits only where the loss needs them: [N, V] for flat indices `positions` of [B, T]."""
    hidden = draft.model(input_ids=ids, use_cache=False).last_hidden_state  # [B, T, H]
    picked = hidden.reshape(-1, hidden.shape[-1])[positions]  # [N, H]
    return draft.lm_head(picked)  # [N, V]


# ---------------------------------------------------------------------------------------------
# Data: teacher records + their stored logits


class TeacherData:
    """Teacher records split into train / validation, and batches of (ids, answer positions, p logits)."""

    def __init__(self, work: Path, vocab: int, max_len: int):
        records = [r for r in read_records(work / "teacher_text.jsonl") if r["output_ids"]]
        if not records:
            raise SpecvizError(f"no teacher text in {work}: run stage 1 (omit --skip-teacher)")
        self.logits = logits_rows(work / "teacher_logits.f16", vocab) if records[0].get("logits_row") is not None else None
        if self.logits is None:
            raise SpecvizError("these teacher records carry no logits; generate them with logits stored")
        self.max_len = max_len
        self.val = [r for r in records if r["prompt_index"] % VAL_MODULUS == 0]
        self.train = [r for r in records if r["prompt_index"] % VAL_MODULUS != 0]
        if not self.val and len(self.train) > 1:  # little data: hold out the last tenth instead
            cut = len(self.train) - max(1, len(self.train) // 10)
            self.train, self.val = self.train[:cut], self.train[cut:]
        if not self.train:
            raise SpecvizError("every teacher record is in the validation split: generate more teacher text")
        self.tokens = sum(len(r["output_ids"]) for r in self.train)

    def order(self, epoch: int, seed: int) -> list[int]:
        idx = list(range(len(self.train)))
        random.Random(seed * 1000 + epoch).shuffle(idx)
        return idx

    def batch(self, records: list[dict[str, Any]]):
        """ids [B, T] (right-padded), flat positions [N] whose next token is an answer token, p logits [N, V]."""
        seqs, positions, rows = [], [], []
        for r in records:
            prompt, out = r["prompt_ids"], r["output_ids"]
            keep = min(len(out), self.max_len - len(prompt))
            if keep <= 0:
                continue
            seqs.append(prompt + out[:keep])
            rows.append(np.asarray(self.logits[r["logits_row"] : r["logits_row"] + keep]))
        width = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        for b, (s, r) in enumerate(zip(seqs, rows)):
            ids[b, : len(s)] = torch.tensor(s)
            start = len(s) - len(r) - 1  # position whose next token is the first answer token
            positions.append(torch.arange(start, start + len(r)) + b * width)
        p_logits = torch.from_numpy(np.concatenate(rows)).float()  # [N, V]
        return ids, torch.cat(positions), p_logits


def kl_terms(q_logits: torch.Tensor, p_logits: torch.Tensor):
    """Forward KL(p || q) per position over the full vocabulary, and whether argmax q == argmax p."""
    log_p = torch.log_softmax(p_logits, dim=-1)  # [N, V]
    log_q = torch.log_softmax(q_logits, dim=-1)  # [N, V]
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)  # [N]
    top1 = q_logits.argmax(-1) == p_logits.argmax(-1)  # greedy agreement: the greedy acceptance proxy
    return kl, top1


@torch.no_grad()
def validate(draft, data: TeacherData, limit: int = 40) -> dict[str, float]:
    draft.eval()
    kls, tops = [], []
    for i in range(0, min(limit, len(data.val)), 8):
        ids, pos, p = data.batch(data.val[i : min(i + 8, limit)])
        kl, top1 = kl_terms(draft_logits(draft, ids, pos), p)
        kls.append(kl)
        tops.append(top1.float())
    draft.train()
    if not kls:
        return {"val_kl": float("nan"), "val_top1": float("nan")}
    return {"val_kl": torch.cat(kls).mean().item(), "val_top1": torch.cat(tops).mean().item()}


# ---------------------------------------------------------------------------------------------
# Training loop


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to lr/10 at `cfg.steps`; both counted from `cfg.phase_start`."""
    s = step - cfg.phase_start
    if s < cfg.warmup:
        return cfg.lr * (s + 1) / cfg.warmup
    t = (s - cfg.warmup) / max(1, cfg.steps - cfg.phase_start - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train(draft, data: TeacherData, cfg: TrainConfig, checkpoint: Path, log_path: Path, progress: bool = True) -> dict[str, Any]:
    """Minimise forward KL(p || q); resumes from `checkpoint` when it exists. Returns final metrics."""
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    state = {"step": 0, "seconds": 0.0, "tokens": 0}
    if checkpoint.is_file():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        draft.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"[specviz] resuming from {checkpoint} at step {state['step']}", file=sys.stderr)
    phase = {k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_size", "seed")}
    if state["step"] < cfg.steps and (not state.get("phases") or state["phases"][-1] != phase):
        state["phases"] = [*state.get("phases", []), phase]  # the learning-rate schedules this draft saw
    new_log = not log_path.is_file() or state["step"] == 0
    log_f = log_path.open("w" if new_log else "a", newline="")
    log = csv.writer(log_f)
    if new_log:
        log.writerow(["step", "tokens", "seconds", "lr", "kl", "top1", "val_kl", "val_top1"])
    per_epoch = max(1, len(data.train) // cfg.batch_size)
    draft.train()
    last_save, started = time.monotonic(), time.monotonic() - state["seconds"]
    bar = tqdm(total=cfg.steps, initial=state["step"], desc="distilling", unit="step", disable=not progress)
    metrics: dict[str, float] = {}
    while state["step"] < cfg.steps:
        step = state["step"]
        epoch, k = divmod(step, per_epoch)
        order = data.order(epoch, cfg.seed)
        records = [data.train[i] for i in order[k * cfg.batch_size : (k + 1) * cfg.batch_size]]
        ids, pos, p_logits = data.batch(records)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        kl, top1 = kl_terms(draft_logits(draft, ids, pos), p_logits)
        loss = kl.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += len(pos)
        state["seconds"] = time.monotonic() - started
        metrics = {"kl": loss.item(), "top1": top1.float().mean().item()}
        if state["step"] % cfg.val_every == 0 or state["step"] == cfg.steps:
            metrics.update(validate(draft, data))
        log.writerow([state["step"], state["tokens"], round(state["seconds"], 1), f"{lr_at(step, cfg):.2e}"]
                     + [f"{metrics.get(k, float('nan')):.4f}" for k in ("kl", "top1", "val_kl", "val_top1")])
        log_f.flush()
        bar.set_postfix(kl=f"{metrics['kl']:.3f}", top1=f"{metrics['top1']:.3f}")
        bar.update()
        if time.monotonic() - last_save > 60 * cfg.checkpoint_minutes or state["step"] == cfg.steps:
            save_checkpoint(checkpoint, draft, opt, state)
            last_save = time.monotonic()
    bar.close()
    log_f.close()
    if "val_kl" not in metrics:
        metrics.update(validate(draft, data))
    return {**metrics, **state}


def save_checkpoint(path: Path, draft, opt, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": draft.state_dict(), "optimizer": opt.state_dict(), "state": dict(state)}, tmp)
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# Export


def measure_c(target, draft, context: int = 128, repeats: int = 15) -> dict[str, float]:
    """c = draft forward time / target forward time for one new token over a `context`-token cache
    (median over `repeats`, this machine, current thread settings)."""
    from specviz.models.kv import CachedLM

    def one_token_ms(model) -> float:
        lm = CachedLM(model)
        lm.forward(list(range(1, context + 1)))
        times = []
        for i in range(repeats):
            t = time.perf_counter()
            lm.forward([5 + i])
            times.append(1000 * (time.perf_counter() - t))
        return sorted(times)[len(times) // 2]

    target_ms, draft_ms = one_token_ms(target), one_token_ms(draft)
    return {"target_ms": target_ms, "draft_ms": draft_ms, "c": draft_ms / target_ms}


def export_draft(draft, tokenizer, out: Path, card: str, save_tokenizer: bool = True) -> None:
    """config.json + float16 safetensors files of at most 20 MB (`specviz.models.shards`) + MODEL_CARD.md
    (+ the tokenizer, so that the folder also pairs with its target by path)."""
    from specviz.models.shards import save_shards

    out.mkdir(parents=True, exist_ok=True)
    config = draft.config.to_dict() | {"dtype": "float16"}
    type(draft.config).from_dict(config).save_pretrained(out)
    state = {k: v for k, v in draft.state_dict().items() if not (k == "lm_head.weight" and draft.config.tie_word_embeddings)}
    save_shards(state, out)
    if save_tokenizer:
        tokenizer.save_pretrained(out)
    (out / "MODEL_CARD.md").write_text(card)
    too_big = [p.name for p in out.iterdir() if p.stat().st_size > 20 * 1000 * 1000]
    if too_big:
        raise SpecvizError(f"files over 20 MB in {out}: {too_big}")


def schedule_lines(result: dict, cfg: TrainConfig) -> list[str]:
    phases = result.get("phases") or [{k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_size", "seed")}]
    lines = []
    if phases[0]["phase_start"] > 0:
        lines.append(f"- steps 0-{phases[0]['phase_start']}: an earlier schedule (peak lr {TrainConfig.lr}; see the CSV log)")
    for ph in phases:
        end = min(ph["steps"], result["step"])
        cut = f", stopped at step {end}" if end < ph["steps"] else ""
        lines.append(f"- steps {ph['phase_start']}-{end}: {ph['batch_size']} sequences per step, AdamW lr {ph['lr']} "
                     f"(warm-up {ph['warmup']}, cosine to lr/10 at step {ph['steps']}{cut}), seed {ph['seed']}")
    return lines


def model_card(args, shape: DraftShape, cfg: TrainConfig, data: TeacherData, result: dict, cost: dict, params: int) -> str:
    records = len(data.train) + len(data.val)
    by_t = Counter(r.get("temperature", args.temperature) for r in data.train + data.val)
    kinds = ", ".join(f"{n} {'greedy' if t == 0 else f'at temperature {t}'}" for t, n in sorted(by_t.items(), reverse=True))
    lines = [
        f"# Draft for {args.target}",
        "",
        "Distilled by `python -m specviz.train.draft` (teacher sampling + forward KL to the target's full",
        "next-token distribution, as in Online Speculative Decoding). Use it as the draft of speculative",
        "decoding with the same target; it shares the target's tokenizer.",
        "",
        "## Shape",
        f"- Llama, {shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads ({shape.kv_heads} key/value), "
        f"MLP {shape.intermediate}, tied embedding ({shape.init} init), {params / 1e6:.1f}M parameters, stored float16",
        "",
        "## Data",
        f"- prompts: `{Path(args.prompts).name if args.prompts else 'the prompts file'}` lines {args.lines} "
        f"(training prompts only; no benchmark suite); answers with prompt_index % {VAL_MODULUS} == 0 held out",
        f"- teacher text: {records} answers of the target ({kinds}; "
        f"at most {args.max_new_tokens} new tokens, chat template); {len(data.train)} for training "
        f"({data.tokens} answer tokens), {len(data.val)} held out for validation",
        "",
        "## Training",
        f"- {result['step']} steps, {result['tokens']} answer positions seen "
        f"(about {result['tokens'] / max(1, data.tokens):.1f} epochs of the training answers)",
        *schedule_lines(result, cfg),
        f"- wall time {result['seconds'] / 60:.1f} min on {args.device} ({torch.get_num_threads()} thread(s)); every step's lr, "
        f"loss, agreement and validation are in `train-{args.out.name}.csv` of the training work folder",
        f"- held-out forward KL(p || q) {result['val_kl']:.3f} nats; greedy agreement argmax q == argmax p "
        f"{result['val_top1']:.3f} ({len(data.val)} held-out target answers; "
        "greedy decoding's acceptance is measured by `python -m specviz.bench draft_quality`)",
        "",
        "## Cost",
        f"- one token over a 128-token cache: target {cost['target_ms']:.1f} ms, draft {cost['draft_ms']:.1f} ms "
        f"-> c = {cost['c']:.3f} (measured at export on the training machine)",
        "",
    ]
    return "\n".join(lines)


def teacher_config(args, seed: int) -> TeacherConfig:
    """Stage 1's settings from the command line."""
    if args.prompts is None:
        raise SpecvizError("--prompts is needed to generate teacher text (or pass --teacher-prompts 0)")
    start, end = (int(x) for x in args.lines.split(":"))
    return TeacherConfig(
        prompts=args.prompts,
        out=args.work,
        train_lines=(start, end),
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        batch_size=args.gen_batch_size,
        max_prompts=args.teacher_prompts,
        store_logits=not args.no_logits,
        seed=seed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Distil a draft model from a target (teacher sampling + forward KL).")
    parser.add_argument("--target", default="default", help="'default' (SmolLM2-135M-Instruct), 'tiny-random', or a hub id / folder")
    parser.add_argument("--prompts", type=Path, help="JSONL of training prompts (a 'prompt' field per line)")
    parser.add_argument("--lines", default="0:5500", help="line range START:END of --prompts used for training")
    parser.add_argument("--work", type=Path, default=Path("runs/draft"), help="teacher text, logits, checkpoint and log")
    parser.add_argument("--out", type=Path, required=True, help="folder for the trained draft")
    parser.add_argument("--teacher-prompts", type=int, default=1500, help="answers to sample in stage 1 (0: use what --work has)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--gen-batch-size", type=int, default=16)
    parser.add_argument("--teacher-only", action="store_true", help="stop after stage 1 (teacher text for other uses)")
    parser.add_argument("--no-logits", action="store_true",
                        help="with --teacher-only: keep the answers only, not the logits (V float16 per token), e.g. for a datastore")
    for f, default in asdict(DraftShape()).items():
        parser.add_argument(f"--{f.replace('_', '-')}", type=type(default), default=default)
    for f, default in asdict(TrainConfig()).items():
        parser.add_argument(f"--{f.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-tokenizer", action="store_true", help="do not copy the tokenizer into --out")
    parser.add_argument("--export-only", action="store_true", help="write --out from the checkpoint in --work as it is (no training)")
    parser.add_argument("--more-steps", type=int, default=0,
                        help="continue from the checkpoint for this many steps with a new schedule (--lr, cosine, no warm-up)")
    args = parser.parse_args(argv)
    if args.no_logits and not args.teacher_only:
        raise SpecvizError("--no-logits needs --teacher-only: distillation trains on the stored logits")
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = DraftShape(**{f: getattr(args, f) for f in asdict(DraftShape())})
    cfg = TrainConfig(**{f: getattr(args, f) for f in asdict(TrainConfig())})
    torch.manual_seed(cfg.seed)
    progress = not args.no_progress

    checkpoint = args.work / f"checkpoint-{args.out.name}.pt"
    if args.export_only or args.more_steps:
        if not checkpoint.is_file():
            raise SpecvizError(f"no checkpoint {checkpoint} to export or continue")
        done = torch.load(checkpoint, map_location="cpu", weights_only=False)["state"]["step"]
        if args.export_only:
            cfg = replace(cfg, steps=done)
        else:
            cfg = replace(cfg, phase_start=done, steps=done + args.more_steps, warmup=0)
        args.teacher_prompts = 0

    target, tokenizer, eos = load_target_for_training(args.target, args.device)
    if args.teacher_prompts > 0:
        print("[specviz] stage 1/3: sampling teacher text from the target", file=sys.stderr)
        generate_teacher_text(teacher_config(args, cfg.seed), target, tokenizer, eos, progress=progress)
    if args.teacher_only:
        return 0
    data = TeacherData(args.work, target.config.vocab_size, cfg.max_len)
    print(f"[specviz] stage 2/3: distilling on {len(data.train)} answers ({data.tokens} tokens)", file=sys.stderr)
    draft = new_draft(target, shape, cfg.seed).to(args.device)
    result = train(draft, data, cfg, checkpoint, args.work / f"train-{args.out.name}.csv", progress=progress)
    print("[specviz] stage 3/3: measuring c and writing the draft", file=sys.stderr)
    draft.eval()
    cost = measure_c(target, draft)
    params = sum(p.numel() for p in draft.parameters())
    export_draft(draft, tokenizer, args.out, model_card(args, shape, cfg, data, result, cost, params), not args.no_tokenizer)
    (args.out / "training.json").write_text(
        json.dumps({"shape": asdict(shape), "train": asdict(cfg), "result": result, "cost": cost}, indent=1)
    )
    print(
        f"[specviz] wrote {args.out}: held-out KL {result['val_kl']:.3f}, greedy agreement {result['val_top1']:.3f}, c {cost['c']:.3f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
