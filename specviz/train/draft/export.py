"""The trained draft as a folder: config, int8 safetensors shards, the tokenizer and MODEL_CARD.md (its
shape, data and split, schedule, held-out agreement and the cost ratio c measured at export)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specviz.errors import SpecvizError
from specviz.train.draft.data import CorpusData
from specviz.train.draft.fit import TrainConfig
from specviz.train.draft.start import DraftShape

if TYPE_CHECKING:
    import argparse

    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def measure_c(
    target: PreTrainedModel, draft: PreTrainedModel, context: int = 128, repeats: int = 30
) -> dict[str, float]:
    """c = draft time / target time for one new token over a `context`-token cache (median over
    `repeats`, this machine, current thread settings; the draft through its lean decoding pass)."""
    from specviz.models.cpu import prepack_linears
    from specviz.models.kv import CachedLM

    prepack_linears(target)

    def one_token_ms(model: PreTrainedModel) -> float:
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


def export_draft(
    draft: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, card: str, save_tokenizer: bool = True
) -> None:
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
    phases = result.get("phases") or [
        {k: getattr(cfg, k) for k in ("phase_start", "steps", "lr", "warmup", "batch_tokens", "seed")}
    ]
    lines = []
    if phases[0]["phase_start"] > 0:
        lines.append(f"- steps 0-{phases[0]['phase_start']}: an earlier run (see the CSV log)")
    for ph in phases:
        end = min(ph["steps"], result["step"])
        cut = f", stopped at step {end}" if end < ph["steps"] else ""
        lines.append(
            f"- steps {ph['phase_start']}-{end}: about {ph['batch_tokens']} tokens per step, AdamW lr {ph['lr']} "
            f"(warm-up {ph['warmup']}, cosine to lr/10 at step {ph['steps']}{cut}), seed {ph['seed']}"
        )
    return lines


def model_card(
    args: argparse.Namespace,
    shape: DraftShape,
    cfg: TrainConfig,
    data: CorpusData,
    result: dict,
    cost: dict,
    params: int,
    cover: float,
) -> str:
    kinds = Counter("greedy" if e.greedy else "sampled at T = 0.7" for e in data.train)
    lines = [
        f"# Draft for {args.target}",
        "",
        "Distilled by `python -m specviz.train.draft` from the teacher corpus (`assets/corpus/`): the target's",
        "own answers to training prompts. Use it as the draft of speculative decoding with the same target;",
        "it shares the target's tokenizer. Its class is `specviz.models.draft.ReducedVocabDraft`.",
        "",
        "## Shape",
        (
            f"- Llama, {shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads ({shape.kv_heads} key/value), "
            f"MLP {shape.intermediate}, {params / 1e6:.1f}M parameters, matrices stored as int8 with a scale per row"
        ),
        (
            f"- head over the {shape.head_vocab} most frequent answer tokens of the training split "
            f"(q = 0 for every other token; they cover {cover:.1%} of the held-out answer tokens); "
            f"input table [V, {shape.embed_rank}] lifted to width {shape.hidden}"
        ),
        "- decoding on a CPU runs int8 weights with bfloat16 activations (`ReducedVocabDraft.step`)",
        "",
        "## Data",
        f"- {len(data.train)} answers for training ({data.answer_tokens} answer tokens; "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f"), {len(data.val)} held out (`corpus.held_out`)",
        (
            f"- {data.with_topk} training answers with the target's top-k log-probabilities (soft targets), the rest "
            "with the answer token only"
        ),
        "",
        "## Training",
        (
            f"- {result['step']} steps, {result['tokens']} answer positions seen "
            f"(about {result['tokens'] / max(1, data.answer_tokens):.1f} epochs of the training answers)"
        ),
        *schedule_lines(result, cfg),
        (
            f"- wall time {result['seconds'] / 60:.1f} min on {args.device} ({torch.get_num_threads()} thread(s)); "
            f"every step's lr, loss, agreement and validation are in `train-{args.out.name}.csv` of the work folder"
        ),
        (
            f"- held-out agreement argmax q == the target's greedy token: {result['val_agree']:.3f} "
            f"({min(cfg.val_answers, sum(e.greedy for e in data.val))} held-out greedy answers; "
            "`python -m specviz.bench draft_quality` measures the acceptance itself)"
        ),
        "",
        "## Cost",
        (
            f"- one token over a 128-token cache: target {cost['target_ms']:.1f} ms, draft {cost['draft_ms']:.2f} ms "
            f"-> c = {cost['c']:.3f} (measured at export on the training machine)"
        ),
        "",
    ]
    return "\n".join(lines)
