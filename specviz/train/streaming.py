"""Train a speculative-streaming adapter (Bhendawade et al. 2024, section 3.2): LoRA on the top N_s
layers plus the stream parameters (f_eta, P_j), everything else frozen.

    python -m specviz.train.streaming --target default --data runs/draft/teacher_text.jsonl \
        --out runs/streaming --steps 2000 --ship assets/streaming/smollm2-135m-instruct.safetensors

Loss (the paper's L_ss):  alpha_0 * CE(main stream at t, y_{t+1})  +  sum_j alpha_j * CE(stream j at t, y_{t+1+j}),
on target-generated text (teacher_text.jsonl: prompt_ids + the target's own answer), answer
positions only. When the teacher's logits file sits beside the text (`teacher_logits.f16`), the
targets are the target's own distributions p(. | prefix) instead of the sampled tokens (soft labels:
the tuned main stream is distilled towards the original, the streams learn the target's expected
future); `--hard` uses the tokens.

Resumable: `--out` holds checkpoint.pt (adapter, optimizer, step) and log.csv; run the same command
again to continue; `--init ADAPTER` starts a new `--out` from an adapter (the shipped one) and counts
steps on from its own. Held-out records (prompt_index % 20 == 0, `specviz.train.splits.STREAMING`) are never
trained on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from transformers import PreTrainedModel

from specviz.models.streaming import StreamingConfig, StreamingLM, load_adapter
from specviz.train import splits
from specviz.train.loop import Checkpoint, CsvLog, LoopConfig, run


@dataclass
class TrainConfig:
    target: str = "default"  # default | tiny-random | a hub id or local directory
    data: Path = Path(
        "runs/draft/teacher_text.jsonl"
    )  # JSONL with prompt_ids, output_ids, as `python -m specviz.train.draft` writes it
    out: Path = Path("runs/streaming")  # checkpoint.pt + log.csv (+ adapter.safetensors)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    steps: int = 1000  # optimizer steps in total (a resumed run continues up to this)
    lr: float = 1e-3
    warmup: int = 50  # steps of linear learning-rate warm-up
    max_len: int = 160  # tokens per training sequence (prompt + answer, cut)
    max_prompt: int = 96  # records with longer prompts are skipped
    max_examples: int = 0  # train on the first this many examples only (0: all, re-read every epoch as the file grows)
    alpha0: float = 1.0  # weight of the main stream's next-token loss
    alpha_streams: float = 1.0  # weight of each stream's loss (alpha_j, all equal)
    hard: bool = False  # train on the sampled tokens even when teacher logits are available
    positions: int = 0  # run the streams at (and score) this many random answer positions (0: all); cuts the cost
    save_every: int = 50  # checkpoint every this many steps
    init: Path | None = None  # start from this adapter's weights (and count steps on from its own) when
    #                           `out` holds no checkpoint yet: training continued from a shipped adapter
    seed: int = 0
    device: str = "cpu"


def load_target(name: str, device: str) -> PreTrainedModel:
    """The float32 target the adapter is trained on ('default', 'tiny-random', a hub id or folder)."""
    from specviz.models.pair import load_target as load

    return load(name, device, torch.float32)[0]


@dataclass(frozen=True)
class Example:
    ids: list[int]  # prompt + answer, cut to max_len
    prompt_len: int  # answer tokens start here
    logits_row: int | None  # row of the answer's first token in teacher_logits.f16


def read_examples(path: Path, max_len: int, max_prompt: int, train: bool = True) -> list[Example]:
    """Training (or held-out) examples from teacher text; the file may still be growing."""
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line being written right now
                continue
            held = splits.split_of(splits.STREAMING, r.get("prompt_index", 1)) == "val"
            if held == train or len(r["prompt_ids"]) > max_prompt or not r["output_ids"]:
                continue
            ids = (r["prompt_ids"] + r["output_ids"])[:max_len]
            out.append(Example(ids, len(r["prompt_ids"]), r.get("logits_row")))
    return out


class TeacherLogits:
    """The teacher's float16 logits rows [V], memory-mapped (None when the file is absent)."""

    def __init__(self, path: Path, vocab: int) -> None:
        self.vocab = vocab
        self.rows = np.memmap(path, dtype=np.float16, mode="r").reshape(-1, vocab) if path.is_file() else None

    def probs(self, start: int, rows: torch.Tensor) -> torch.Tensor:
        """p = softmax of rows start + rows (relative row indices [n]) -> [n, V]."""
        if self.rows is None:
            raise ValueError("no teacher logits to read: the file is absent (check `covers` first)")
        picked = self.rows[start + rows.numpy()]  # [n, V] float16
        return torch.from_numpy(np.asarray(picked, dtype=np.float32)).softmax(-1)

    def covers(self, start: int, n: int) -> bool:
        return self.rows is not None and start + n <= self.rows.shape[0]


def scored_streams(lm: StreamingLM) -> range:
    """The streams the loss scores: 0 (the main stream) only when the LoRA tunes it, then 1..gamma."""
    return range(0 if lm.cfg.lora_main else 1, lm.cfg.gamma + 1)


def ss_loss(
    lm: StreamingLM, ex: Example, teacher: TeacherLogits | None, cfg: TrainConfig, bottom: dict | None = None
) -> tuple[torch.Tensor | float, dict]:
    """L_ss on one example (0.0: no position to score), and per-stream losses and top-1 agreement for
    the log. `bottom` caches the frozen bottom layers' output per example (they never change during
    training)."""
    ids = torch.tensor([ex.ids], device=lm.stream_embed.device)
    key = (ex.logits_row, tuple(ex.ids))
    h = bottom.get(key) if bottom is not None else None
    if h is None:
        h = lm.bottom(ids)
        if bottom is not None:
            bottom[key] = h
    T, P = len(ex.ids), ex.prompt_len
    answer = torch.arange(P - 1, T - 1)  # positions t whose next token y_{t+1} is an answer token
    nodes = answer[:-1]  # positions with at least one stream target (y_{t+2} in the sequence)
    if 0 < cfg.positions < len(nodes):
        nodes = nodes[torch.randperm(len(nodes))[: cfg.positions]].sort().values
    main, streams = lm(ids, h, nodes)  # [1, T, H], [1, K, gamma, H]
    soft = not cfg.hard and ex.logits_row is not None and teacher is not None and teacher.covers(ex.logits_row, T - P)
    stats: dict[str, float] = {}
    total: torch.Tensor | float = 0.0
    for j in scored_streams(lm):  # j = 0: main stream (y_{t+1}); j >= 1: stream j (y_{t+1+j})
        if j == 0:
            t = answer if not 0 < cfg.positions < len(answer) else answer[torch.randperm(len(answer))[: cfg.positions]]
            hidden = main[0, t]
        else:
            keep = nodes + 1 + j < T
            t, hidden = nodes[keep], streams[0, keep, j - 1]
        if len(t) == 0:
            continue
        logits = lm.logits(hidden)  # [n, V]
        tokens = ids[0, t + 1 + j]
        if soft:
            assert teacher is not None and ex.logits_row is not None  # checked in `soft`
            p = teacher.probs(ex.logits_row, t + 1 + j - P).to(logits.device)  # p(. | prefix up to y_{t+1+j})
            loss = -(p * logits.log_softmax(-1)).sum(-1).mean()
            want = p.argmax(-1)
        else:
            loss = F.cross_entropy(logits, tokens)
            want = tokens
        weight = cfg.alpha0 if j == 0 else cfg.alpha_streams
        total = total + weight * loss
        stats[f"loss{j}"] = float(loss.detach())
        stats[f"top1_{j}"] = float((logits.argmax(-1) == want).float().mean())
        stats[f"top3_{j}"] = float((logits.topk(3, dim=-1).indices == want.unsqueeze(-1)).any(-1).float().mean())
        stats[f"n{j}"] = len(t)
    return total, stats


@torch.no_grad()
def evaluate(lm: StreamingLM, examples: list[Example], teacher: TeacherLogits | None, cfg: TrainConfig) -> dict:
    """Per-stream loss, top-1 and top-3 agreement with the target's most likely token (soft targets)
    or the sampled token (hard), over every answer position of `examples` (held-out text)."""
    cfg = replace(cfg, positions=0)
    streams = scored_streams(lm)
    sums: dict[str, float] = {}
    for ex in examples:
        _, stats = ss_loss(lm, ex, teacher, cfg)
        for j in streams:
            n = stats.get(f"n{j}", 0)
            sums[f"n{j}"] = sums.get(f"n{j}", 0) + n
            for k in ("loss", "top1_", "top3_"):
                sums[f"{k}{j}"] = sums.get(f"{k}{j}", 0.0) + n * stats.get(f"{k}{j}", 0.0)
    out: dict[str, Any] = {"examples": len(examples)}
    for j in streams:
        n = sums[f"n{j}"]
        out[f"stream{j}" if j else "main"] = {
            "positions": int(n),
            **{k.rstrip("_"): sums[f"{k}{j}"] / max(1, n) for k in ("loss", "top1_", "top3_")},
        }
    return out


def train(cfg: TrainConfig, progress: bool = True) -> Path:
    torch.manual_seed(cfg.seed)
    cfg.out.mkdir(parents=True, exist_ok=True)
    base = load_target(cfg.target, cfg.device)
    lm = StreamingLM(base, cfg.streaming)
    params = list(lm.adapter_state().values())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    checkpoint = Checkpoint(cfg.out / "checkpoint.pt")
    state = restore(cfg, checkpoint, lm, base, opt)
    teacher = TeacherLogits(cfg.data.with_name("teacher_logits.f16"), base.config.vocab_size)
    rng = random.Random(cfg.seed + state["step"])
    epoch: dict[str, Any] = {
        "order": [],
        "examples": 0,
    }  # what is left of this epoch's shuffled examples, and how many it had
    bottom: dict = {}  # example -> frozen hidden states entering layer N - N_s

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        if not epoch["order"]:  # a new epoch over whatever teacher text exists now
            order = read_examples(cfg.data, cfg.max_len, cfg.max_prompt)
            order = order[: cfg.max_examples] if cfg.max_examples else order
            if not order:
                raise SystemExit(f"no training examples in {cfg.data}")
            rng.shuffle(order)
            epoch.update(order=order, examples=len(order))
        loss, stats = ss_loss(lm, epoch["order"].pop(), teacher, cfg, bottom)
        assert isinstance(loss, torch.Tensor), "an example with no position to score"
        return loss, {"loss": float(loss.detach()), **stats}

    def after_step(step: int, stats: dict) -> dict:
        return {"step": step, "seconds": round(state["seconds"], 2), "examples": epoch["examples"], **stats}

    def save(step: int) -> None:
        checkpoint.save(
            {
                "adapter": {n: p.detach().cpu() for n, p in lm.adapter_state().items()},
                "optimizer": opt.state_dict(),
                "step": step,
                "origin": state["origin"],
                "streaming": asdict(cfg.streaming),
                "examples": epoch["examples"],
            }
        )
        lm.save_adapter(
            cfg.out / "adapter.safetensors", steps=str(step), data=str(cfg.data), examples=str(epoch["examples"])
        )

    columns = ["step", "seconds", "examples", "loss"] + [
        f"{k}{j}" for j in range(cfg.streaming.gamma + 1) for k in ("loss", "top1_")
    ]
    log = CsvLog(cfg.out / "log.csv", columns, state["step"])
    lm.train()
    run(
        LoopConfig(steps=cfg.steps, clip=1.0, save_every=cfg.save_every),
        opt,
        params,
        loss_at,
        state,
        lr_at=lambda step: cfg.lr * min(1.0, (step + 1 - state["origin"]) / max(1, cfg.warmup)),
        after_step=after_step,
        log=log,
        save=save,
        progress="streaming adapter" if progress else None,
        show=("loss", "top1_1"),
    )
    log.close()
    return cfg.out / "adapter.safetensors"


def restore(
    cfg: TrainConfig, checkpoint: Checkpoint, lm: StreamingLM, base: PreTrainedModel, opt: torch.optim.Optimizer
) -> dict:
    """Where a run starts: `cfg.out`'s checkpoint (resumed), else the `--init` adapter, else step 0. Returns
    the loop's state: "step" and "origin" (the step training started from, an --init adapter's, where the
    warm-up starts); no "seconds": the log's seconds count from this run's start."""
    state = {"step": 0, "origin": 0}
    saved = checkpoint.load(map_location=cfg.device)
    if saved:  # resume
        if saved["streaming"] != asdict(cfg.streaming):
            raise SystemExit(
                f"{checkpoint.path} was trained with {saved['streaming']}; use another --out or the same shape"
            )
        with torch.no_grad():
            for name, p in lm.adapter_state().items():
                p.copy_(saved["adapter"][name])
        opt.load_state_dict(saved["optimizer"])
        state.update(step=saved["step"], origin=saved.get("origin", 0))
        if cfg.init is not None:  # a resumed continued run keeps its adapter's pruner (not in the checkpoint)
            lm.pruner = load_adapter(base, cfg.init).pruner
    elif cfg.init is not None:
        state["step"] = state["origin"] = start_from(lm, base, cfg.init)
    return state


def start_from(lm: StreamingLM, base: PreTrainedModel, path: Path) -> int:
    """Copy the adapter at `path` (trained for `base`, with `lm`'s shape) into `lm`, its pruner too (it reads
    the main stream, which training leaves alone); returns the steps it was trained for (its `steps`
    metadata), where the step count goes on from."""
    from specviz.models.streaming import read_adapter_meta

    meta = read_adapter_meta(path)
    trained = load_adapter(base, path)
    if trained.cfg != lm.cfg:
        raise SystemExit(f"{path} has the shape {asdict(trained.cfg)}; train with the same shape to continue it")
    with torch.no_grad():
        weights = trained.adapter_state()
        for name, p in lm.adapter_state().items():
            p.copy_(weights[name])
    lm.pruner = trained.pruner
    return int(meta.get("steps", 0))


def export(cfg: TrainConfig, path: Path) -> Path:
    """Write the adapter in `cfg.out`/checkpoint.pt to `path` (safetensors with its target's fingerprint)."""
    lm, ckpt = from_checkpoint(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    examples = {"examples": str(ckpt["examples"])} if "examples" in ckpt else {}
    lm.save_adapter(path, steps=str(ckpt["step"]), data=str(cfg.data), **examples)
    return path


def from_checkpoint(cfg: TrainConfig) -> tuple[StreamingLM, dict]:
    """The StreamingLM in `cfg.out`/checkpoint.pt, and the checkpoint."""
    ckpt = torch.load(cfg.out / "checkpoint.pt", map_location="cpu")
    lm = StreamingLM(load_target(cfg.target, cfg.device), StreamingConfig(**ckpt["streaming"]))
    with torch.no_grad():
        for name, p in lm.adapter_state().items():
            p.copy_(ckpt["adapter"][name])
    return lm, ckpt


def evaluate_checkpoint(cfg: TrainConfig, n: int) -> dict:
    """`evaluate` on the first n held-out records, for the checkpoint in `cfg.out`."""
    lm, ckpt = from_checkpoint(cfg)
    lm.eval()
    held = read_examples(cfg.data, cfg.max_len, cfg.max_prompt, train=False)[:n]
    teacher = TeacherLogits(cfg.data.with_name("teacher_logits.f16"), lm.tuned.config.vocab_size)
    return {
        "step": ckpt["step"],
        "targets": "tokens" if cfg.hard else "target argmax",
        **evaluate(lm, held, teacher, cfg),
    }


@torch.inference_mode()
def agreement(base: PreTrainedModel, lm: StreamingLM, prompts: list[list[int]], new_tokens: int) -> dict:
    """How often the tuned model's greedy output equals the original's (token-wise up to the first
    difference, and whole outputs)."""
    from specviz.models.kv import CachedLM

    def greedy(model: PreTrainedModel, ids: list[int]) -> list[int]:
        cache, out, nxt = CachedLM(model), [], list(ids)
        for _ in range(new_tokens):
            token = int(cache.forward(nxt)[-1].argmax())
            out.append(token)
            nxt = [token]
        return out

    same_prefix, same_whole = 0, 0
    for ids in prompts:
        a, b = greedy(base, ids), greedy(lm.tuned, ids)
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))  # new_tokens each
        same_prefix += n
        same_whole += n == len(a)
    return {
        "prompts": len(prompts),
        "new_tokens": new_tokens,
        "tokens_before_first_difference": same_prefix / max(1, len(prompts) * new_tokens),
        "identical_outputs": same_whole / max(1, len(prompts)),
    }


def parse_args(argv: list[str] | None) -> tuple[TrainConfig, argparse.Namespace]:
    d, s = TrainConfig(), StreamingConfig()
    p = argparse.ArgumentParser(prog="python -m specviz.train.streaming", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=d.target)
    p.add_argument("--data", type=Path, default=d.data)
    p.add_argument("--out", type=Path, default=d.out)
    p.add_argument("--stream-layers", type=int, default=s.stream_layers, help="N_s")
    p.add_argument("--gamma", type=int, default=s.gamma, help="speculative streams")
    p.add_argument("--lora-rank", type=int, default=s.lora_rank)
    p.add_argument("--no-lora-mlp", action="store_true", help="LoRA on attention projections only")
    p.add_argument(
        "--streams-only",
        action="store_true",
        help="LoRA on the streams only: the main stream stays the original target",
    )
    p.add_argument("--eta-rank", type=int, default=s.eta_rank)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--max-len", type=int, default=d.max_len)
    p.add_argument("--max-examples", type=int, default=d.max_examples, help="first N training examples only (0: all)")
    p.add_argument("--alpha0", type=float, default=d.alpha0)
    p.add_argument("--alpha-streams", type=float, default=d.alpha_streams)
    p.add_argument(
        "--positions", type=int, default=d.positions, help="random answer positions scored per stream (0: all)"
    )
    p.add_argument("--hard", action="store_true", help="sampled tokens as targets even when teacher logits exist")
    p.add_argument("--save-every", type=int, default=d.save_every)
    p.add_argument(
        "--init", type=Path, help="start from this adapter (e.g. the shipped one) when --out has no checkpoint yet"
    )
    p.add_argument("--device", default=d.device)
    p.add_argument(
        "--ship", type=Path, help="also copy the final adapter here (e.g. assets/streaming/NAME.safetensors)"
    )
    p.add_argument("--eval-prompts", type=int, default=0, help="held-out prompts for the agreement check of the card")
    p.add_argument("--eval-tokens", type=int, default=48)
    p.add_argument("--export", action="store_true", help="no training: write --out's checkpoint to --ship")
    p.add_argument(
        "--evaluate",
        type=int,
        default=0,
        metavar="N",
        help="no training: per-stream top-1/top-3 of --out's checkpoint on N held-out records (writes heldout.json)",
    )
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    streaming = StreamingConfig(
        stream_layers=a.stream_layers,
        gamma=a.gamma,
        lora_rank=a.lora_rank,
        lora_alpha=2.0 * a.lora_rank,
        lora_mlp=not a.no_lora_mlp,
        eta_rank=a.eta_rank,
        lora_main=not a.streams_only,
    )
    cfg = TrainConfig(
        target=a.target,
        data=a.data,
        out=a.out,
        streaming=streaming,
        steps=a.steps,
        lr=a.lr,
        max_len=a.max_len,
        max_examples=a.max_examples,
        alpha0=a.alpha0,
        alpha_streams=a.alpha_streams,
        hard=a.hard,
        positions=a.positions,
        save_every=a.save_every,
        device=a.device,
        init=a.init,
    )
    return cfg, a


def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    if args.export:
        if not args.ship:
            raise SystemExit("--export needs --ship PATH")
        print(f"exported: {export(cfg, args.ship)}")
        return 0
    if args.evaluate:
        report = evaluate_checkpoint(cfg, args.evaluate)
        (cfg.out / "heldout.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
        return 0
    adapter = train(cfg, progress=not args.quiet)
    print(f"adapter: {adapter}")
    if args.eval_prompts:
        base = load_target(cfg.target, cfg.device)
        held = read_examples(cfg.data, 10**6, cfg.max_prompt, train=False)[: args.eval_prompts]
        report = agreement(
            base, load_adapter(base, adapter), [ex.ids[: ex.prompt_len] for ex in held], args.eval_tokens
        )
        (cfg.out / "agreement.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report))
    if args.ship:
        args.ship.parent.mkdir(parents=True, exist_ok=True)
        args.ship.write_bytes(adapter.read_bytes())
        print(f"shipped: {args.ship} ({args.ship.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
