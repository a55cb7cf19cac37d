"""Teacher text for distillation: the target samples answers to training prompts (OSD's "teacher
sampling"), and its full next-token logits at every answer position are kept, so that training
needs no second teacher forward pass.

Output, appended to (and resumed from) a work folder:
  teacher_text.jsonl   one record per prompt: {"prompt_index", "prompt", "prompt_ids", "output_ids",
                       "text", "logits_row", "temperature"}; prompt_ids include the chat template,
                       output_ids the target's answer (with its EOS when it stopped by itself)
  teacher_logits.f16   float16 rows [V] of the target's raw logits: row logits_row + i is the
                       distribution p(. | prompt, output[:i]) that output[i] was drawn from
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specviz.errors import SpecvizError


@dataclass(frozen=True)
class TeacherConfig:
    prompts: Path  # JSONL of training prompts with a "prompt" field (never benchmark suites)
    out: Path  # work folder for teacher_text.jsonl and teacher_logits.f16
    train_lines: tuple[int, int] = (0, 5500)  # [start, end) line range of `prompts` used for training
    max_prompt_tokens: int = 256  # longer prompts (after the chat template) are skipped
    max_new_tokens: int = 160  # answer length cap
    temperature: float = 0.7  # sampling temperature of the teacher text (logits are stored at T=1)
    batch_size: int = 16
    max_prompts: int | None = None  # stop after this many records in total
    store_logits: bool = True  # keep the target's full logits (V float16 per answer token)
    seed: int = 0


def read_prompts(path: Path, lines: tuple[int, int]) -> list[tuple[int, str]]:
    """(line index, prompt text) for lines in [start, end) of a JSONL file with "prompt" fields."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if lines[0] <= i < lines[1] and line.strip():
                rec = json.loads(line)
                text = rec.get("prompt") or rec.get("text") or rec.get("question")
                if text and text.strip():
                    out.append((i, text))
    if not out:
        raise SpecvizError(f"no prompts found in {path} (lines {lines[0]}..{lines[1]}; each needs a 'prompt' field)")
    return out


def encode_chat(tokenizer, prompt: str) -> list[int]:
    """Prompt ids as the target sees an instruction: through its chat template when it has one."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def read_records(path: Path) -> list[dict[str, Any]]:
    """Complete records of a teacher_text.jsonl (a torn last line from a crash is ignored)."""
    records = []
    if path.is_file():
        for line in path.open():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def logits_rows(path: Path, vocab: int) -> np.ndarray:
    """The teacher logits file as a read-only [rows, V] float16 memmap."""
    rows = path.stat().st_size // (2 * vocab)
    return np.memmap(path, dtype=np.float16, mode="r", shape=(rows, vocab))


def generate_teacher_text(cfg: TeacherConfig, model, tokenizer, eos_ids: tuple[int, ...], progress: bool = True) -> Path:
    """Sample the target on the training prompts, appending to cfg.out; resumes where it stopped."""
    from tqdm.auto import tqdm

    cfg.out.mkdir(parents=True, exist_ok=True)
    text_path, logits_path = cfg.out / "teacher_text.jsonl", cfg.out / "teacher_logits.f16"
    done = read_records(text_path)
    vocab = model.get_output_embeddings().weight.shape[0]
    next_row = max((r["logits_row"] + len(r["output_ids"]) for r in done if r.get("logits_row") is not None), default=0)
    if cfg.store_logits:  # drop rows written after the last complete record (a crash mid-batch)
        with open(logits_path, "ab") as f:
            f.truncate(next_row * vocab * 2)
    seen = {r["prompt_index"] for r in done}
    prompts = read_prompts(cfg.prompts, cfg.train_lines)
    random.Random(cfg.seed).shuffle(prompts)  # any prefix of the output is a random sample of the pool
    todo = [(i, p) for i, p in prompts if i not in seen]
    if cfg.max_prompts is not None:
        todo = todo[: max(0, cfg.max_prompts - len(done))]
    bar = tqdm(total=len(todo), desc="teacher text", unit="prompt", disable=not progress)
    with open(text_path, "a") as text_f, open(logits_path, "ab") as logits_f:
        for batch in _batches(todo, tokenizer, cfg):
            outputs, logits = _sample_batch(model, [ids for _, _, ids in batch], cfg, eos_ids, seed=cfg.seed + batch[0][0])
            for (index, prompt, ids), out, lg in zip(batch, outputs, logits):
                row = None
                if cfg.store_logits:
                    logits_f.write(lg.to(torch.float16).numpy().tobytes())  # [n, V]
                    row, next_row = next_row, next_row + len(out)
                rec = {
                    "prompt_index": index,
                    "prompt": prompt,
                    "prompt_ids": ids,
                    "output_ids": out,
                    "text": tokenizer.decode(out, skip_special_tokens=True),
                    "logits_row": row,
                    "temperature": cfg.temperature,
                }
                text_f.write(json.dumps(rec) + "\n")
            logits_f.flush()
            os.fsync(logits_f.fileno())
            text_f.flush()
            bar.update(len(batch))
    bar.close()
    return text_path


def _batches(todo, tokenizer, cfg: TeacherConfig) -> Iterator[list[tuple[int, str, list[int]]]]:
    """Batches of similar prompt length (less left padding), in pools of 8 batches."""
    pool_size = 8 * cfg.batch_size
    for start in range(0, len(todo), pool_size):
        pool = [(i, p, encode_chat(tokenizer, p)) for i, p in todo[start : start + pool_size]]
        pool = sorted((x for x in pool if len(x[2]) <= cfg.max_prompt_tokens), key=lambda x: len(x[2]))
        for b in range(0, len(pool), cfg.batch_size):
            yield pool[b : b + cfg.batch_size]


@torch.inference_mode()
def _sample_batch(model, prompts: list[list[int]], cfg: TeacherConfig, eos_ids, seed: int):
    """Answers (lists of ids, cut after the first EOS) and their logits [n_i, V] (float32, CPU)."""
    pad = eos_ids[0]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # [B, T] left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        do_sample=cfg.temperature > 0,
        temperature=cfg.temperature if cfg.temperature > 0 else None,
        top_k=None,
        top_p=None,
        max_new_tokens=cfg.max_new_tokens,
        eos_token_id=list(eos_ids),
        pad_token_id=pad,
        output_logits=cfg.store_logits,
        return_dict_in_generate=True,
    )
    new = out.sequences[:, width:].cpu()  # [B, n]
    steps = torch.stack(out.logits, dim=1).float().cpu() if cfg.store_logits else None  # [B, n, V] raw logits
    answers, logits = [], []
    for b in range(len(prompts)):
        seq = new[b].tolist()
        n = next((i + 1 for i, t in enumerate(seq) if t in eos_ids), len(seq))
        answers.append(seq[:n])
        logits.append(steps[b, :n] if steps is not None else None)
    return answers, logits
