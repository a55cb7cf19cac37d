"""Distil the draft from the teacher corpus: a small Llama with a reduced-vocabulary head.

    python -m specviz.train.draft --target default --data ../shared/data --work runs/corpus \
        --out assets/drafts/smollm2-135m-draft --steps 3000

Data: the target's answers of the teacher corpus (`specviz.train.corpus`): the shipped token ids
(`assets/corpus/`) plus a generation work folder's answers, whose top-k log-probabilities are kept
there. Loss per answer position, forward KL to the target as far as the data tells it:
cross-entropy to p renormalised on the head's tokens among its stored top-k, or, where only the
answer is known, to the answer token (for greedy answers that is the target's argmax: sequence-level
distillation). Held-out prompts (`corpus.held_out`) give the validation: agreement of the draft's
argmax with the target's greedy answer token, the acceptance rate of greedy speculative decoding
on those answers.

The draft (`specviz.models.draft.ReducedVocabDraft`): the head scores the K most frequent answer
tokens of the training split, its input table is the target's embedding projected on its top
principal axes, the head starts from the same projection of those K tokens' embeddings.
Training is seeded, checkpoints every few minutes and resumes from its last checkpoint; `--init`
starts from a shipped draft instead (a later session continues a run without its optimiser state).
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

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.train import corpus as corpus_mod


@dataclass(frozen=True)
class DraftShape:
    hidden: int = 384  # residual width d
    layers: int = 6  # decoder layers
    heads: int = 6  # attention heads (head_dim = hidden / heads)
    kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate: int = 1024  # SwiGLU MLP width
    head_vocab: int = 8192  # K: tokens the head scores (the most frequent answer tokens)
    embed_rank: int = 128  # r: width of the factorised input table E [V, r]


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


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Example:
    ids: list[int]  # prompt (chat template applied) + answer
    answer_start: int  # index of the first answer token in `ids`
    greedy: bool
    topk: tuple[np.ndarray, np.ndarray] | None  # ([a, k] ids, [a, k] log-probabilities) of the target, if kept
    source: str = ""  # the prompt file it answers (corpus.SOURCES)


class CorpusData:
    """The corpus answers with their prompts, split by `corpus.held_out`, and batches of them."""

    def __init__(self, args, tokenizer, max_len: int):
        records = corpus_mod.all_answers(args.corpus, args.work)
        if not records:
            raise SpecvizError("no corpus answers: pass --corpus (the shipped folder) and/or --work (a generation work folder)")
        ids, logp = corpus_mod.WorkFolder(args.work, args.top_k).topk()  # rows of the work folder's answers
        prompts = {s.name: corpus_mod.read_source(args.data, s) for s in corpus_mod.SOURCES}
        self.train: list[Example] = []
        self.val: list[Example] = []
        for r in records:
            prompt = corpus_mod.encode_chat(tokenizer, prompts[r["source"]][r["line"]])
            keep = min(len(r["output_ids"]), max_len - len(prompt))
            if keep <= 0:
                continue
            row = None if args.answers_only else r.get("row")  # only a work folder's answers have top-k rows
            topk = (ids[row : row + keep], logp[row : row + keep]) if row is not None else None
            ex = Example(prompt + [int(x) for x in r["output_ids"][:keep]], len(prompt), r["temperature"] == 0, topk, r["source"])
            (self.val if corpus_mod.held_out(r["source"], r["line"]) else self.train).append(ex)
        if not self.val and len(self.train) > 1:  # too few prompts to hit the held-out hash: hold out a tenth
            greedy = [e for e in self.train if e.greedy]
            self.val = greedy[len(greedy) - max(1, len(self.train) // 10) :]
            self.train = [e for e in self.train if all(e is not v for v in self.val)]
        if not self.train:
            raise SpecvizError("every corpus answer is held out: generate more")
        self.answer_tokens = sum(len(e.ids) - e.answer_start for e in self.train)
        self.with_topk = sum(e.topk is not None for e in self.train)

    def token_counts(self, vocab: int) -> np.ndarray:
        """How often each token id appears in the training answers."""
        return np.bincount(np.concatenate([np.asarray(e.ids[e.answer_start :]) for e in self.train]), minlength=vocab)

    def epoch_batches(self, epoch: int, seed: int, batch_tokens: int) -> list[list[int]]:
        """Indices of training examples in batches of about `batch_tokens` padded tokens: shuffled,
        then sorted by length within pools of 64 batches (little padding), batches shuffled again."""
        rng = random.Random(seed * 1000 + epoch)
        order = list(range(len(self.train)))
        rng.shuffle(order)
        mean = max(1, sum(len(e.ids) for e in self.train) // len(self.train))
        pool = 64 * max(1, batch_tokens // mean)
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lambda i: len(self.train[i].ids))
            batch: list[int] = []
            for i in chunk:
                if batch and (len(batch) + 1) * len(self.train[i].ids) > batch_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(i)
            if batch:
                batches.append(batch)
        rng.shuffle(batches)
        return batches


def collate(examples: list[Example], index_of: torch.Tensor, pad: int):
    """ids [B, T] (right-padded), flat positions [N] whose next token is an answer token, and the
    target there as (head indices [N, k], weights [N, k]): p renormalised on the head's tokens among
    the stored top-k, or the answer token alone (weight 1). Positions whose target has no head token
    are left out (the head cannot learn them)."""
    width = max(len(e.ids) for e in examples) - 1
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    positions, targets, weights = [], [], []
    k = max((e.topk[0].shape[1] for e in examples if e.topk is not None), default=1)
    for b, e in enumerate(examples):
        seq = torch.tensor(e.ids)
        ids[b, : len(seq) - 1] = seq[:-1]
        answer = seq[e.answer_start :]  # [a]
        pos = torch.arange(e.answer_start - 1, len(seq) - 1) + b * width  # row predicting answer[i]
        if e.topk is not None:
            tid = index_of[torch.from_numpy(e.topk[0].astype(np.int64))]  # [a, k] head index or -1
            p = torch.from_numpy(e.topk[1].astype(np.float32)).exp() * (tid >= 0)  # [a, k]
        else:
            tid = torch.full((len(answer), k), -1, dtype=torch.long)
            tid[:, 0] = index_of[answer]
            p = (tid >= 0).float()
        mass = p.sum(-1)  # [a]
        ok = mass > 0
        positions.append(pos[ok])
        targets.append(tid.clamp(min=0)[ok])
        weights.append(p[ok] / mass[ok, None])
    return ids, torch.cat(positions), torch.cat(targets), torch.cat(weights)


def distillation_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the draft's head logits [N, K] to the sparse target (indices, weights) [N, k]:
    forward KL(p || q) up to p's entropy, for p restricted to the head."""
    log_q = torch.log_softmax(logits.float(), dim=-1)  # [N, K]
    return -(weights * log_q.gather(1, targets)).sum(-1)  # [N]


# ---------------------------------------------------------------------------------------------
# The draft


def new_draft(target, shape: DraftShape, vocab_ids: torch.Tensor, seed: int):
    """A fresh draft whose input table is the target's embedding on its top `embed_rank` principal
    axes and whose head starts as the same projection (to width d) of its K tokens' embeddings."""
    from specviz.models.draft import ReducedVocabDraft, reduced_config

    config = reduced_config(target.config, **asdict(shape))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        draft = ReducedVocabDraft(config, vocab_ids).float()
    e = target.get_input_embeddings().weight.detach().float().cpu()  # [V, H_target]
    centred = e - e.mean(dim=0)
    _, _, axes = torch.linalg.svd(centred, full_matrices=False)  # axes: [H_target, H_target]
    with torch.no_grad():
        r = min(shape.embed_rank, axes.shape[0])
        table = centred @ axes[:r].T  # [V, r]
        draft.model.embed_tokens.table.weight.zero_()[:, :r] = table / table.norm(dim=1).mean()
        d = min(shape.hidden, axes.shape[0])
        head = centred[vocab_ids] @ axes[:d].T  # [K, d]
        draft.lm_head.proj.weight.zero_()[:, :d] = head / head.norm(dim=1).mean()
    return draft


def subclone_draft(target, layers: list[int], vocab_ids: torch.Tensor, embed_rank: int):
    """A draft cut from the target itself (weight subcloning): the target's width, heads and MLP,
    its decoder layers `layers` and final norm copied, its head's rows for the K tokens, and its
    input embedding as the best rank-r factorisation (truncated SVD)."""
    from specviz.models.draft import ReducedVocabDraft, reduced_config

    t = target.config
    config = reduced_config(t, hidden=t.hidden_size, layers=len(layers), heads=t.num_attention_heads,
                            kv_heads=t.num_key_value_heads, intermediate=t.intermediate_size,
                            head_vocab=len(vocab_ids), embed_rank=embed_rank)
    draft = ReducedVocabDraft(config, vocab_ids).float()
    state = target.state_dict()
    copied = {f"model.layers.{i}.{k.split('.', 3)[3]}": v for i, src in enumerate(layers)
              for k, v in state.items() if k.startswith(f"model.layers.{src}.")}
    e = target.get_input_embeddings().weight.detach().float().cpu()  # [V, d]
    u, s, vh = torch.linalg.svd(e, full_matrices=False)
    copied |= {
        "model.norm.weight": state["model.norm.weight"],
        "lm_head.proj.weight": target.get_output_embeddings().weight.detach()[vocab_ids],
        "model.embed_tokens.table.weight": u[:, :embed_rank] * s[:embed_rank],  # [V, r]
        "model.embed_tokens.up.weight": vh[:embed_rank].T,  # [d, r]
    }
    missing, unexpected = draft.load_state_dict(copied, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.vocab_ids"]:
        raise SpecvizError(f"the target's weights do not fit a subcloned draft: {missing[:3]} {unexpected[:3]}")
    return draft


def choose_vocab(data: CorpusData, vocab: int, k: int, eos: tuple[int, ...]) -> torch.Tensor:
    """The K most frequent answer tokens of the training split (EOS always among them), sorted."""
    counts = data.token_counts(vocab)
    counts[list(eos)] = counts.max() + 1
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[: min(k, vocab)])).long()


def coverage(data: CorpusData, vocab_ids: torch.Tensor, vocab: int) -> float:
    """Share of the held-out answer tokens that the head can propose."""
    inside = np.zeros(vocab, bool)
    inside[vocab_ids.numpy()] = True
    toks = np.concatenate([np.asarray(e.ids[e.answer_start :]) for e in data.val]) if data.val else np.zeros(0, int)
    return float(inside[toks].mean()) if len(toks) else float("nan")


# ---------------------------------------------------------------------------------------------
# Training


@torch.no_grad()
def validate(draft, data: CorpusData, cfg: TrainConfig, pad: int) -> dict[str, float]:
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


def train(draft, data: CorpusData, cfg: TrainConfig, checkpoint: Path, log_path: Path, pad: int, progress: bool = True) -> dict:
    """Minimise the distillation loss; resumes from `checkpoint` when it exists. Returns final metrics."""
    from tqdm.auto import tqdm

    decay = [p for n, p in draft.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in draft.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    state = {"step": 0, "seconds": 0.0, "tokens": 0}
    if checkpoint.is_file():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        draft.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"[specviz] resuming from {checkpoint} at step {state['step']}", file=sys.stderr)
    phase = {k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_tokens", "seed")}
    if state["step"] < cfg.steps and (not state.get("phases") or state["phases"][-1] != phase):
        state["phases"] = [*state.get("phases", []), phase]  # the learning-rate schedules this draft saw
    new_log = not log_path.is_file() or state["step"] == 0
    log_f = log_path.open("w" if new_log else "a", newline="")
    log = csv.writer(log_f)
    if new_log:
        log.writerow(["step", "tokens", "seconds", "lr", "loss", "agree", "val_loss", "val_agree"])
    index_of = draft.lm_head.index_of()
    epoch_cache: dict[int, list[list[int]]] = {}
    draft.train()
    last_save, started = time.monotonic(), time.monotonic() - state["seconds"]
    bar = tqdm(total=cfg.steps, initial=state["step"], desc="distilling", unit="step", disable=not progress)
    metrics: dict[str, float] = {}
    while state["step"] < cfg.steps:
        step = state["step"]
        epoch, k = position_in_epochs(step, data, cfg, epoch_cache)
        batch = [data.train[i] for i in epoch_cache[epoch][k]]
        ids, pos, targets, weights = collate(batch, index_of, pad)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = draft.reduced_logits(ids, pos)  # [N, K]
        loss = distillation_loss(logits, targets, weights).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += len(pos)
        state["seconds"] = time.monotonic() - started
        metrics = {"loss": loss.item(), "agree": (logits.argmax(-1) == targets[:, 0]).float().mean().item()}
        if state["step"] % cfg.val_every == 0 or state["step"] == cfg.steps:
            metrics.update(validate(draft, data, cfg, pad))
        log.writerow([state["step"], state["tokens"], round(state["seconds"], 1), f"{lr_at(step, cfg):.2e}"]
                     + [f"{metrics.get(k, float('nan')):.4f}" for k in ("loss", "agree", "val_loss", "val_agree")])
        log_f.flush()
        bar.set_postfix(loss=f"{metrics['loss']:.3f}", agree=f"{metrics['agree']:.3f}")
        bar.update()
        if time.monotonic() - last_save > 60 * cfg.checkpoint_minutes or state["step"] == cfg.steps:
            save_checkpoint(checkpoint, draft, opt, state)
            last_save = time.monotonic()
    bar.close()
    log_f.close()
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


def save_checkpoint(path: Path, draft, opt, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": draft.state_dict(), "optimizer": opt.state_dict(), "state": dict(state)}, tmp)
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# Export


def measure_c(target, draft, context: int = 128, repeats: int = 30) -> dict[str, float]:
    """c = draft time / target time for one new token over a `context`-token cache (median over
    `repeats`, this machine, current thread settings; the draft through its lean decoding pass)."""
    from specviz.models.cpu import prepack_linears
    from specviz.models.kv import CachedLM

    prepack_linears(target)

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
    """config.json + safetensors files of at most 20 MB (`specviz.models.shards`: matrices as int8 rows with
    scales, which CPU decoding uses anyway; the rest float16) + MODEL_CARD.md (+ the tokenizer, so
    that the folder also pairs with its target by path)."""
    from specviz.models.shards import save_shards

    out.mkdir(parents=True, exist_ok=True)
    config = draft.config.to_dict() | {"dtype": "float16"}
    type(draft.config).from_dict(config).save_pretrained(out)
    save_shards(draft.state_dict(), out, int8=True)
    if save_tokenizer:
        tokenizer.save_pretrained(out)
    (out / "MODEL_CARD.md").write_text(card)
    too_big = [p.name for p in out.iterdir() if p.stat().st_size > 20 * 1000 * 1000]
    if too_big:
        raise SpecvizError(f"files over 20 MB in {out}: {too_big}")


def schedule_lines(result: dict, cfg: TrainConfig) -> list[str]:
    phases = result.get("phases") or [{k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_tokens", "seed")}]
    lines = []
    if phases[0]["phase_start"] > 0:
        lines.append(f"- steps 0-{phases[0]['phase_start']}: an earlier run (see the CSV log)")
    for ph in phases:
        end = min(ph["steps"], result["step"])
        cut = f", stopped at step {end}" if end < ph["steps"] else ""
        lines.append(f"- steps {ph['phase_start']}-{end}: about {ph['batch_tokens']} tokens per step, AdamW lr {ph['lr']} "
                     f"(warm-up {ph['warmup']}, cosine to lr/10 at step {ph['steps']}{cut}), seed {ph['seed']}")
    return lines


def model_card(args, shape: DraftShape, cfg: TrainConfig, data: CorpusData, result: dict, cost: dict, params: int, cover: float) -> str:
    kinds = Counter("greedy" if e.greedy else "sampled at T = 0.7" for e in data.train)
    lines = [
        f"# Draft for {args.target}",
        "",
        "Distilled by `python -m specviz.train.draft` from the teacher corpus (`assets/corpus/`): the target's",
        "own answers to training prompts. Use it as the draft of speculative decoding with the same target;",
        "it shares the target's tokenizer. Its class is `specviz.models.draft.ReducedVocabDraft`.",
        "",
        "## Shape",
        f"- Llama, {shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads ({shape.kv_heads} key/value), "
        f"MLP {shape.intermediate}, {params / 1e6:.1f}M parameters, matrices stored as int8 with a scale per row",
        f"- head over the {shape.head_vocab} most frequent answer tokens of the training split (q = 0 for every other "
        f"token; they cover {cover:.1%} of the held-out answer tokens); input table [V, {shape.embed_rank}] lifted to "
        f"width {shape.hidden}",
        "- decoding on a CPU runs int8 weights with bfloat16 activations (`ReducedVocabDraft.step`)",
        "",
        "## Data",
        f"- {len(data.train)} answers for training ({data.answer_tokens} answer tokens; "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f"), {len(data.val)} held out (`corpus.held_out`)",
        f"- {data.with_topk} training answers with the target's top-k log-probabilities (soft targets), the rest "
        "with the answer token only",
        "",
        "## Training",
        f"- {result['step']} steps, {result['tokens']} answer positions seen "
        f"(about {result['tokens'] / max(1, data.answer_tokens):.1f} epochs of the training answers)",
        *schedule_lines(result, cfg),
        f"- wall time {result['seconds'] / 60:.1f} min on {args.device} ({torch.get_num_threads()} thread(s)); every step's lr, "
        f"loss, agreement and validation are in `train-{args.out.name}.csv` of the work folder",
        f"- held-out agreement argmax q == the target's greedy token: {result['val_agree']:.3f} "
        f"({min(cfg.val_answers, sum(e.greedy for e in data.val))} held-out greedy answers; "
        "`python -m specviz.bench draft_quality` measures the acceptance itself)",
        "",
        "## Cost",
        f"- one token over a 128-token cache: target {cost['target_ms']:.1f} ms, draft {cost['draft_ms']:.2f} ms "
        f"-> c = {cost['c']:.3f} (measured at export on the training machine)",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Distil a reduced-vocabulary draft from the teacher corpus.")
    parser.add_argument("--target", default="default", help="'default' (SmolLM2-135M-Instruct), 'tiny-random', or a hub id / folder")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the corpus's prompt files")
    parser.add_argument("--corpus", type=Path, default=corpus_mod.CORPUS, help="shipped corpus folder ('' for none)")
    parser.add_argument("--work", type=Path, default=Path("runs/corpus"), help="generation work folder (answers with top-k), checkpoint and log")
    parser.add_argument("--top-k", type=int, default=corpus_mod.GenerationConfig.top_k, help="top-k width of the work folder's files")
    parser.add_argument("--answers-only", action="store_true", help="train on the answer tokens alone, even where top-k is kept")
    parser.add_argument("--out", type=Path, required=True, help="folder for the trained draft")
    parser.add_argument("--init", type=Path, help="start from this draft folder's weights (same shape) instead of the target")
    parser.add_argument("--init-layers", default="",
                        help="cut the draft from the target: copy these of its layers (e.g. 0,1,28,29); its width, heads and MLP")
    for f, default in [*asdict(DraftShape()).items(), *asdict(TrainConfig()).items()]:
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(default, bool) else type(default)
        parser.add_argument(f"--{f.replace('_', '-')}", type=kind, default=default)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-tokenizer", action="store_true", help="do not copy the tokenizer into --out")
    parser.add_argument("--export-only", action="store_true", help="write --out from the checkpoint in --work as it is (no training)")
    parser.add_argument("--more-steps", type=int, default=0,
                        help="continue from the checkpoint for this many steps with a new schedule (--lr, cosine, no warm-up)")
    args = parser.parse_args(argv)
    if args.corpus is not None and str(args.corpus) in ("", "."):
        args.corpus = None
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = DraftShape(**{f: getattr(args, f) for f in asdict(DraftShape())})
    cfg = TrainConfig(**{f: getattr(args, f) for f in asdict(TrainConfig())})
    torch.manual_seed(cfg.seed)
    args.work.mkdir(parents=True, exist_ok=True)

    checkpoint = args.work / f"checkpoint-{args.out.name}.pt"
    if args.export_only or args.more_steps:
        if not checkpoint.is_file():
            raise SpecvizError(f"no checkpoint {checkpoint} to export or continue")
        done = torch.load(checkpoint, map_location="cpu", weights_only=False)["state"]["step"]
        cfg = replace(cfg, steps=done) if args.export_only else replace(cfg, phase_start=done, steps=done + args.more_steps, warmup=0)

    from specviz.models.pair import load_target

    target, tokenizer, eos = load_target(args.target, args.device)
    vocab = target.config.vocab_size
    data = CorpusData(args, tokenizer, cfg.max_len)
    print(f"[specviz] distilling on {len(data.train)} answers ({data.answer_tokens} answer tokens, "
          f"{data.with_topk} with top-k), {len(data.val)} held out", file=sys.stderr)
    if args.init is not None:
        from specviz.models.default import load_draft

        draft = load_draft(args.init, torch.device(args.device), torch.float32).train()
        shape = replace(shape, head_vocab=draft.config.head_vocab)
    elif args.init_layers:
        layers = [int(x) for x in args.init_layers.split(",")]
        draft = subclone_draft(target, layers, choose_vocab(data, vocab, shape.head_vocab, eos), shape.embed_rank).to(args.device)
        t = target.config
        shape = replace(shape, hidden=t.hidden_size, layers=len(layers), heads=t.num_attention_heads,
                        kv_heads=t.num_key_value_heads, intermediate=t.intermediate_size)
    else:
        draft = new_draft(target, shape, choose_vocab(data, vocab, shape.head_vocab, eos), cfg.seed).to(args.device)
    cover = coverage(data, draft.lm_head.vocab_ids.cpu(), vocab)
    result = train(draft, data, cfg, checkpoint, args.work / f"train-{args.out.name}.csv", eos[0], progress=not args.no_progress)
    draft.eval()
    cost = measure_c(target, draft)
    params = sum(p.numel() for p in draft.parameters())
    export_draft(draft, tokenizer, args.out, model_card(args, shape, cfg, data, result, cost, params, cover), not args.no_tokenizer)
    (args.out / "training.json").write_text(
        json.dumps({"shape": asdict(shape), "train": asdict(cfg), "result": result, "cost": cost, "coverage": cover}, indent=1)
    )
    print(f"[specviz] wrote {args.out}: held-out agreement {result['val_agree']:.3f}, coverage {cover:.3f}, c {cost['c']:.3f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
