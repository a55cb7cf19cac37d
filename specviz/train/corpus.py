"""The teacher corpus: the target's own answers to ~20k training prompts (chat, math, code).

    python -m specviz.train.corpus generate --data ../shared/data --work runs/corpus   # hours; resumable
    python -m specviz.train.corpus pack --work runs/corpus                            # -> assets/corpus/
    python -m specviz.train.corpus status --work runs/corpus

Every training prompt of three sources (`SOURCES`) is answered greedily and at temperature 0.7
(two jobs per prompt). The jobs are shuffled once with a fixed seed and interleaved three greedy to
one sampled, so any prefix of the job list is a balanced sample of sources and temperatures: a run
stopped after N answers has a corpus of N answers.

Generation batches many prompts (one forward pass steps every row; finished rows leave the
batch) and keeps, per answer position, the target's top-k log-probabilities at temperature 1 as
they are computed. The work folder holds:
  answers.jsonl   {"source", "line", "temperature", "output_ids", "row"} per answer
  topk_ids.u16    [rows, k] uint16 token ids      row `row + i` is p(. | prompt, output[:i])
  topk_logp.f16   [rows, k] float16 log-probabilities (temperature 1, over the full vocabulary)
Only the answers' token ids are shipped (`pack`: compressed uint16 shards under assets/corpus/):
later sessions train on them without generating again (`specviz.train.draft` takes the answer tokens
as targets, and the top-k where a work folder still holds them). Prompts are referred to by source
and line, never shipped; `teacher-text` writes answers with their prompt ids for the other trainers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.paths import ASSETS
from specviz.train import splits

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PreTrainedModel, PreTrainedTokenizerBase

CORPUS = ASSETS / "corpus"


@dataclass(frozen=True)
class Source:
    name: str  # short name stored with each answer
    file: str  # JSONL file in the data folder
    field: str  # the field holding the user message
    lines: tuple[int, int]  # [start, end) lines used for training (the rest stays unseen)
    licence: str


SOURCES = (
    Source("sharegpt", "sharegpt_prompts.jsonl", "prompt", (0, 5500), "unclear (ShareGPT user prompts)"),
    Source("gsm8k", "gsm8k_train.jsonl", "question", (0, 7473), "MIT (GSM8K train split)"),
    Source("codealpaca", "codealpaca_prompts.jsonl", "prompt", (0, 6552), "CC BY-NC 4.0 (Code Alpaca): non-commercial"),
)
TEMPERATURES = (0.0, 0.7)  # every prompt is answered greedily and sampled
GREEDY_PER_SAMPLED = (
    3  # in the job order: three greedy answers, then one sampled (greedy decoding is what the bench measures)
)
SEED = 0


@dataclass(frozen=True)
class Job:
    source: str
    line: int
    temperature: float

    @property
    def key(self) -> tuple[str, int, float]:
        return self.source, self.line, self.temperature


def held_out(source: str, line: int) -> bool:
    """The validation split (`splits.CORPUS`): a fixed ~2 % of prompts, chosen by a hash of (source, line)."""
    return splits.split_of(splits.CORPUS, splits.corpus_key(source, line)) == "val"


def prompt_index(source: str, line: int) -> int:
    """A corpus prompt as one integer, as the teacher text names it: source rank * 100000 + line."""
    return next(i for i, s in enumerate(SOURCES) if s.name == source) * 100000 + line


def read_source(data: Path, source: Source) -> dict[int, str]:
    """line -> user message for the source's training lines."""
    path = data / source.file
    if not path.is_file():
        raise SpecvizError(f"training prompts not found: {path} (pass --data, the folder of {source.file})")
    out = {}
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if source.lines[0] <= i < source.lines[1] and line.strip():
                text = json.loads(line).get(source.field)
                if isinstance(text, str) and text.strip():
                    out[i] = text
    return out


def encode_chat(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """Prompt ids as the target sees an instruction: through its chat template when it has one."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def read_records(path: Path) -> list[dict]:
    """Complete records of a JSONL file (a torn last line from a crash is ignored)."""
    records = []
    if path.is_file():
        for line in path.open():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def job_order(prompts: dict[str, dict[int, str]]) -> list[Job]:
    """All jobs, in the fixed order generation follows: a shuffled greedy list and a shuffled
    sampled list, interleaved `GREEDY_PER_SAMPLED` to one (so every prefix mixes sources and
    temperatures, and all greedy answers come before the last sampled ones)."""
    rng = random.Random(SEED)
    keys = [(s, line) for s in sorted(prompts) for line in sorted(prompts[s])]
    greedy, sampled = ([Job(s, line, t) for s, line in rng.sample(keys, len(keys))] for t in TEMPERATURES)
    n = GREEDY_PER_SAMPLED
    order = [job for i in range(len(sampled)) for job in (*greedy[n * i : n * i + n], sampled[i])]
    return order


# ---------------------------------------------------------------------------------------------
# Generation


@dataclass(frozen=True)
class GenerationConfig:
    batch_size: int = 32  # rows per forward pass at the start of a batch (finished rows leave)
    max_new_tokens: int = 128  # answer length cap (the benchmark's answer length)
    max_prompt_tokens: int = 320  # longer prompts (after the chat template) are skipped
    top_k: int = 32  # log-probabilities kept per answer position
    pool: int = 8  # batches per pool; a pool is sorted by prompt length (less padding)


class WorkFolder:
    """The append-only files of a generation run; a crash mid-batch is cut back on open."""

    def __init__(self, work: Path, top_k: int, writable: bool = False) -> None:
        """writable: the generator's own handle (cuts rows no record vouches for); readers never write,
        so a trainer can read a folder while generation appends to it."""
        self.text, self.ids, self.logp = work / "answers.jsonl", work / "topk_ids.u16", work / "topk_logp.f16"
        self.k = top_k
        self.records = read_records(self.text)
        self.rows = max((r["row"] + len(r["output_ids"]) for r in self.records), default=0)
        if writable:
            work.mkdir(parents=True, exist_ok=True)
            for path in (self.ids, self.logp):
                with open(path, "ab") as f:
                    f.truncate(self.rows * top_k * 2)

    def append(self, jobs: list[Job], outputs: list[list[int]], topk: list[tuple[np.ndarray, np.ndarray]]) -> None:
        with open(self.ids, "ab") as fi, open(self.logp, "ab") as fl, open(self.text, "a") as ft:
            lines = []
            for job, out, (ids, logp) in zip(jobs, outputs, topk, strict=True):
                fi.write(ids.astype(np.uint16).tobytes())
                fl.write(logp.astype(np.float16).tobytes())
                rec = {
                    "source": job.source,
                    "line": job.line,
                    "temperature": job.temperature,
                    "output_ids": out,
                    "row": self.rows,
                }
                self.rows += len(out)
                self.records.append(rec)
                lines.append(json.dumps(rec))
            for f in (fi, fl):
                f.flush()
                os.fsync(f.fileno())
            ft.write("".join(line + "\n" for line in lines))  # records last: they vouch for the rows
            ft.flush()
            os.fsync(ft.fileno())

    def topk(self) -> tuple[np.ndarray, np.ndarray]:
        """([rows, k] uint16 ids, [rows, k] float16 log-probabilities) as read-only memmaps."""
        if self.rows == 0:
            return np.zeros((0, self.k), np.uint16), np.zeros((0, self.k), np.float16)
        shape = (self.rows, self.k)
        return (
            np.memmap(self.ids, dtype=np.uint16, mode="r", shape=shape),
            np.memmap(self.logp, dtype=np.float16, mode="r", shape=shape),
        )


def batches(
    jobs: list[Job], prompt_ids: Callable[[Job], list[int]], cfg: GenerationConfig
) -> Iterator[list[tuple[Job, list[int]]]]:
    """Batches of one temperature and similar prompt length, in pools of `cfg.pool` batches."""
    size = cfg.pool * cfg.batch_size
    for start in range(0, len(jobs), size):
        for t in TEMPERATURES:
            pool = [(j, prompt_ids(j)) for j in jobs[start : start + size] if j.temperature == t]
            pool.sort(key=lambda x: len(x[1]))
            for b in range(0, len(pool), cfg.batch_size):
                yield pool[b : b + cfg.batch_size]


@torch.inference_mode()
def answer_batch(
    model: PreTrainedModel,
    prompts: list[list[int]],
    temperature: float,
    eos_ids: tuple[int, ...],
    cfg: GenerationConfig,
    generator: torch.Generator,
) -> tuple[list[list[int]], list[tuple[np.ndarray, np.ndarray]]]:
    """Answers (cut after the first EOS) and their top-k log-probabilities per position.

    Left-padded prefill, then one forward pass per step over the rows still running; a row that
    emits an EOS or reaches the cap leaves the batch (its cache rows are dropped)."""
    from specviz.models.kv import new_cache

    # ids and mask: [B, T]. (transformers types get_input_embeddings() as an nn.Module, whose `.weight.device`
    # mypy reads as `device | Tensor | Module`: the ignores below.)
    dev = model.get_input_embeddings().weight.device
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[eos_ids[0]] * (width - len(p)) + p for p in prompts], device=dev)  # type: ignore[arg-type]
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)  # type: ignore[arg-type]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
    cache = new_cache(model.config)
    eos = torch.tensor(eos_ids, device=dev)  # type: ignore[arg-type]
    live = list(range(len(prompts)))  # batch row -> prompt index
    outputs: list[list[int]] = [[] for _ in prompts]
    top_ids: list[list[torch.Tensor]] = [[] for _ in prompts]
    top_logp: list[list[torch.Tensor]] = [[] for _ in prompts]
    for _ in range(cfg.max_new_tokens):
        logits = (
            model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            .logits[:, -1]
            .float()
        )  # [b, V]
        logp = torch.log_softmax(logits, dim=-1)  # [b, V] p at temperature 1
        vals, idx = logp.topk(cfg.top_k, dim=-1)  # [b, k]
        if temperature > 0:
            nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)[:, 0]
        else:
            nxt = logits.argmax(-1)  # [b]
        for r, i in enumerate(live):
            outputs[i].append(int(nxt[r]))
            top_ids[i].append(idx[r].cpu())
            top_logp[i].append(vals[r].cpu())
        done = torch.isin(nxt, eos) | (len(outputs[live[0]]) >= cfg.max_new_tokens)
        keep = (~done).nonzero()[:, 0]
        if len(keep) == 0:
            break
        if len(keep) < len(live):
            cache.batch_select_indices(keep)
            live = [live[r] for r in keep.tolist()]
            mask, positions, nxt = mask[keep], positions[keep], nxt[keep]
        ids = nxt[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
    topk = [(torch.stack(a).numpy(), torch.stack(b).numpy()) for a, b in zip(top_ids, top_logp, strict=True)]
    return outputs, topk


def load_generator(args: argparse.Namespace) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, tuple[int, ...]]:
    """(model, tokenizer, eos ids) of the target in the dtype generation runs it in."""
    from specviz.models.pair import load_target

    model, tokenizer, eos = load_target(args.target, args.device)
    if args.dtype == "bfloat16":  # 1.5x faster generation on a CPU with AVX-512 bf16 (benchmarks/corpus/)
        return model.to(torch.bfloat16), tokenizer, eos  # type: ignore[arg-type]  # see devices.moved
    from specviz.models.cpu import prepack_linears

    prepack_linears(model)
    return model, tokenizer, eos


def speed(args: argparse.Namespace) -> int:
    """Tokens/s of greedy generation at each batch size, on the same first greedy jobs (so that a
    batch size can be picked on this machine)."""
    model, tokenizer, eos = load_generator(args)
    prompts = {s.name: read_source(args.data, s) for s in SOURCES}
    jobs = [j for j in job_order(prompts) if j.temperature == 0]
    ids = [
        p for p in (encode_chat(tokenizer, prompts[j.source][j.line]) for j in jobs) if len(p) <= args.max_prompt_tokens
    ]
    ids = sorted(ids[: args.prompts], key=len)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens)
    answer_batch(model, ids[:2], 0.0, eos, replace(cfg, max_new_tokens=4), torch.Generator())  # warm-up
    rows = []
    for size in (int(b) for b in args.batch_sizes.split(",")):
        t0, tokens = time.perf_counter(), 0
        for b in range(0, len(ids), size):
            outputs, _ = answer_batch(model, ids[b : b + size], 0.0, eos, cfg, torch.Generator())
            tokens += sum(len(o) for o in outputs)
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "batch_size": size,
                "dtype": args.dtype,
                "threads": torch.get_num_threads(),
                "prompts": len(ids),
                "tokens": tokens,
                "seconds": round(seconds, 2),
                "tokens_per_s": round(tokens / seconds, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return 0


def generate(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    cfg = GenerationConfig(args.batch_size, args.max_new_tokens, args.max_prompt_tokens, args.top_k)
    prompts = {s.name: read_source(args.data, s) for s in SOURCES}
    jobs = job_order(prompts)
    work = WorkFolder(args.work, cfg.top_k, writable=True)
    shipped = args.corpus if args.corpus is not None else (CORPUS if args.target == "default" else None)
    done = {Job(r["source"], r["line"], r["temperature"]).key for r in work.records} | (
        shipped_keys(shipped) if shipped else set()
    )
    skipped = (
        set(json.loads((args.work / "skipped.json").read_text())) if (args.work / "skipped.json").is_file() else set()
    )
    todo = [j for j in jobs if j.key not in done and f"{j.source}:{j.line}" not in skipped][: args.limit]
    if not todo:
        print("[specviz] every job of the corpus is done", file=sys.stderr)
        return 0
    model, tokenizer, eos = load_generator(args)

    def prompt_ids(job: Job) -> list[int]:
        return encode_chat(tokenizer, prompts[job.source][job.line])

    deadline = time.monotonic() + 3600 * args.hours if args.hours else None
    bar = tqdm(total=len(todo), desc="corpus", unit="answer", disable=args.no_progress)
    tokens, started = 0, time.monotonic()
    for batch in batches(todo, prompt_ids, cfg):
        long = [j for j, p in batch if len(p) > cfg.max_prompt_tokens]
        if long:
            skipped |= {f"{j.source}:{j.line}" for j in long}
            (args.work / "skipped.json").write_text(json.dumps(sorted(skipped)))
        fitting = [(j, p) for j, p in batch if len(p) <= cfg.max_prompt_tokens]
        if fitting:
            gen = torch.Generator().manual_seed(SEED + len(work.records))
            outputs, topk = answer_batch(model, [p for _, p in fitting], fitting[0][0].temperature, eos, cfg, gen)
            work.append([j for j, _ in fitting], outputs, topk)
            tokens += sum(len(o) for o in outputs)
        bar.update(len(fitting) + len(long))
        bar.set_postfix(tok_s=f"{tokens / (time.monotonic() - started):.0f}")
        if deadline and time.monotonic() > deadline:
            break
    bar.close()
    print(
        f"[specviz] {len(work.records)} answers in {args.work}; {tokens} tokens this run at "
        f"{tokens / (time.monotonic() - started):.1f} tokens/s",
        file=sys.stderr,
    )
    return 0


# ---------------------------------------------------------------------------------------------
# The shipped asset: compressed uint16 shards of answers


def shard_paths(folder: Path = CORPUS) -> list[Path]:
    return sorted(folder.glob("answers-*.npz"))


def load_shipped(folder: Path = CORPUS) -> list[dict]:
    """Every shipped answer: {"source", "line", "temperature", "output_ids"} (ids as a uint16 array)."""
    out = []
    for path in shard_paths(folder):
        with np.load(path) as z:  # z[name] decompresses anew on every access: read each array once
            shard = {name: z[name] for name in z.files}
        names, tokens, offsets = [str(s) for s in shard["source_names"]], shard["tokens"], shard["offsets"]
        columns = (shard["source"], shard["line"], shard["temperature"], offsets[:-1], offsets[1:])
        for s, line, t, a, b in zip(*columns, strict=True):  # one of each per answer
            out.append(
                {"source": names[s], "line": int(line), "temperature": float(t) / 100, "output_ids": tokens[a:b]}
            )
    return out


def shipped_keys(folder: Path = CORPUS) -> set[tuple[str, int, float]]:
    return {(r["source"], r["line"], r["temperature"]) for r in load_shipped(folder)}


def write_shard(records: list[dict], path: Path) -> None:
    names = [s.name for s in SOURCES]
    tokens = np.concatenate([np.asarray(r["output_ids"], dtype=np.uint16) for r in records])
    offsets = np.cumsum([0] + [len(r["output_ids"]) for r in records]).astype(np.int64)
    np.savez_compressed(
        path,
        tokens=tokens,  # every answer's ids, concatenated
        offsets=offsets,  # answer i is tokens[offsets[i]:offsets[i+1]]
        source=np.array([names.index(r["source"]) for r in records], dtype=np.uint8),
        source_names=np.array(names),
        line=np.array([r["line"] for r in records], dtype=np.int32),
        temperature=np.array([round(100 * r["temperature"]) for r in records], dtype=np.uint8),  # in hundredths
    )


def pack(args: argparse.Namespace) -> int:
    """Append the work folder's answers that are not shipped yet as a new shard, and rewrite the card."""
    args.out.mkdir(parents=True, exist_ok=True)
    shipped = shipped_keys(args.out)
    new = [
        r
        for r in read_records(args.work / "answers.jsonl")
        if (r["source"], r["line"], r["temperature"]) not in shipped
    ]
    if new:
        path = args.out / f"answers-{len(shard_paths(args.out)) + 1:03d}.npz"
        write_shard(new, path)
        print(f"[specviz] wrote {len(new)} answers to {path} ({path.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    (args.out / "README.md").write_text(card(load_shipped(args.out), args))
    return 0


def summary(records: list[dict]) -> dict:
    by = Counter((r["source"], "greedy" if r["temperature"] == 0 else f"T={r['temperature']}") for r in records)
    val = sum(held_out(r["source"], r["line"]) for r in records)
    tokens = sum(len(r["output_ids"]) for r in records)
    return {"answers": len(records), "tokens": tokens, "held_out": val, "by": by}


def card(records: list[dict], args: argparse.Namespace) -> str:
    s = summary(records)
    rows = "\n".join(
        f"| {src.name} | `{src.file}` lines {src.lines[0]}..{src.lines[1] - 1} | {src.licence} | "
        f"{s['by'][(src.name, 'greedy')]} | {s['by'][(src.name, 'T=0.7')]} |"
        for src in SOURCES
    )
    size = sum(p.stat().st_size for p in shard_paths(args.out)) / 1e6
    return f"""# Teacher corpus: SmolLM2-135M-Instruct's own answers

The answers of the default target to training prompts, as token ids: what the default draft, the
DISCO classifier, the SSSD datastore and the streaming adapter learn from. Built by
`python -m specviz.train.corpus` (see its docstring); the prompts are not shipped, only their
source and line, so the prompt files (`../shared/data/` in this project's workplace) are needed to
put a prompt back in front of its answer.

- {s["answers"]} answers, {s["tokens"]} answer tokens ({s["tokens"] / max(1, s["answers"]):.0f} per answer), in
  {len(shard_paths(args.out))} file(s) `answers-*.npz` ({size:.2f} MB): uint16 `tokens` with `offsets`, and per
  answer `source`, `line` and `temperature` (hundredths)
- each prompt is put through the target's chat template as a single user turn; answers stop at the
  target's EOS or after {GenerationConfig.max_new_tokens} new tokens; prompts over
  {GenerationConfig.max_prompt_tokens} tokens are skipped
- the target in bfloat16 on a 2-core CPU (`--dtype` default: 1.5x the float32 speed there), greedy (temperature 0)
  or sampled at temperature 0.7 (no top-k/top-p)
- split: a prompt is held out for validation when crc32("source:line") % {splits.CORPUS.modulus} == 0 (both of its
  answers): {s["held_out"]} answers; never train on them. The benchmark suites (HumanEval, GSM8K test,
  MT-Bench, MBPP, Spec-Bench) are never used: GSM8K answers come from its train split only

| source | prompts | licence | greedy answers | T = 0.7 answers |
|---|---|---|---|---|
{rows}

Anything trained on this corpus learned from Code Alpaca answers, whose licence is non-commercial.

Command: `python -m specviz.train.corpus generate --data DATA --work runs/corpus` (resumable; it skips
every answer already shipped here), then `python -m specviz.train.corpus pack --work runs/corpus`:
each run adds a shard. The job list holds {2 * sum(s.lines[1] - s.lines[0] for s in SOURCES)} answers (every prompt
greedy and sampled, in a fixed mixed order); generation speed and the choice of batch size and dtype
are in `benchmarks/corpus/`.
"""


def all_answers(corpus: Path | None, work: Path | None) -> list[dict]:
    """The shipped answers and a work folder's, once each (the work folder's copy wins)."""
    merged = {(r["source"], r["line"], r["temperature"]): r for r in (load_shipped(corpus) if corpus else [])}
    for r in read_records(work / "answers.jsonl") if work else []:
        merged[(r["source"], r["line"], r["temperature"])] = r
    return [merged[k] for k in sorted(merged)]


def teacher_text(args: argparse.Namespace) -> int:
    """Write the corpus as the JSONL the DISCO, datastore and streaming trainers read: one record per
    answer with prompt_index (source rank * 100000 + line), prompt_ids, output_ids, held_out."""
    from specviz.models.pair import load_target

    _, tokenizer, _ = load_target(args.target)
    prompts = {s.name: read_source(args.data, s) for s in SOURCES}
    args.to.parent.mkdir(parents=True, exist_ok=True)
    with args.to.open("w") as f:
        for r in all_answers(args.out, args.work):
            held = held_out(r["source"], r["line"])
            if args.split != "all" and held != (args.split == "val"):
                continue
            if args.temperature is not None and r["temperature"] != args.temperature:
                continue
            f.write(
                json.dumps(
                    {
                        "prompt_index": prompt_index(r["source"], r["line"]),
                        "source": r["source"],
                        "line": r["line"],
                        "temperature": r["temperature"],
                        "held_out": held,
                        "prompt_ids": encode_chat(tokenizer, prompts[r["source"]][r["line"]]),
                        "output_ids": [int(t) for t in r["output_ids"]],
                    }
                )
                + "\n"
            )
    print(f"[specviz] wrote {args.to}", file=sys.stderr)
    return 0


def status(args: argparse.Namespace) -> int:
    local = read_records(args.work / "answers.jsonl")
    together = summary(all_answers(args.out, args.work))
    print(
        json.dumps(
            {
                "shipped": len(load_shipped(args.out)),
                "local": len(local),
                "answers": together["answers"],
                "tokens": together["tokens"],
                "held_out": together["held_out"],
            }
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the teacher corpus: the target's answers to training prompts.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="answer the training prompts (resumable)")
    sp = sub.add_parser("speed", help="measure generation tokens/s at several batch sizes")
    sp.add_argument("--batch-sizes", default="16,32,64")
    sp.add_argument("--prompts", type=int, default=64, help="greedy jobs to answer at every batch size")
    sp.add_argument("--max-new-tokens", type=int, default=96)
    sp.add_argument("--max-prompt-tokens", type=int, default=GenerationConfig.max_prompt_tokens)
    for p in (g, sp):
        p.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the training prompt files")
        p.add_argument("--target", default="default")
        p.add_argument("--device", default="cpu")
        p.add_argument("--threads", type=int, default=None)
        p.add_argument(
            "--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="the target's weights and arithmetic"
        )
    g.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="shipped answers to skip (default: assets/corpus for the default target, none for others)",
    )
    g.add_argument("--limit", type=int, default=None, help="answer at most this many more jobs")
    g.add_argument("--hours", type=float, default=None, help="stop after the batch running at this many hours")
    g.add_argument("--no-progress", action="store_true")
    for f, default in GenerationConfig.__dataclass_fields__.items():
        if f != "pool":
            g.add_argument(f"--{f.replace('_', '-')}", type=int, default=default.default)
    for name, helptext in (
        ("pack", "ship the work folder's new answers as a compressed shard"),
        ("status", "counts"),
        (
            "teacher-text",
            "write the answers with their prompts as JSONL for the DISCO, datastore and streaming trainers",
        ),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--out", type=Path, default=CORPUS, help="the shipped corpus folder")
    t = sub.choices["teacher-text"]
    t.add_argument("--to", type=Path, default=Path("runs/corpus/teacher_text.jsonl"))
    t.add_argument("--temperature", type=float, help="only the answers made at this temperature (0: the greedy ones)")
    t.add_argument(
        "--split", choices=("train", "val", "all"), default="train", help="the draft's training or held-out prompts"
    )
    t.add_argument("--data", type=Path, default=Path("../shared/data"))
    t.add_argument("--target", default="default")
    for name, p in sub.choices.items():
        if name != "speed":
            p.add_argument("--work", type=Path, default=Path("runs/corpus"), help="the generation work folder")
    args = parser.parse_args(argv)
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    return {"generate": generate, "speed": speed, "pack": pack, "status": status, "teacher-text": teacher_text}[
        args.command
    ](args)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
