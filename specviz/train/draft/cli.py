"""`python -m specviz.train.draft`: the command line (every DraftShape and TrainConfig field is a flag)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specviz.errors import SpecvizError
from specviz.train import corpus as corpus_mod
from specviz.train.draft.data import CorpusData
from specviz.train.draft.export import export_draft, measure_c, model_card
from specviz.train.draft.fit import TrainConfig, train
from specviz.train.draft.start import DraftShape, choose_vocab, coverage, new_draft, subclone_draft
from specviz.train.loop import Checkpoint

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from specviz.models.draft import ReducedVocabDraft


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specviz.train.draft", description="Distil a reduced-vocabulary draft from the teacher corpus."
    )
    parser.add_argument(
        "--target", default="default", help="'default' (SmolLM2-135M-Instruct), 'tiny-random', or a hub id / folder"
    )
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the corpus's prompt files")
    parser.add_argument("--corpus", type=Path, default=corpus_mod.CORPUS, help="shipped corpus folder ('' for none)")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("runs/corpus"),
        help="generation work folder (answers with top-k), checkpoint and log",
    )
    parser.add_argument(
        "--top-k", type=int, default=corpus_mod.GenerationConfig.top_k, help="top-k width of the work folder's files"
    )
    parser.add_argument(
        "--answers-only", action="store_true", help="train on the answer tokens alone, even where top-k is kept"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the trained draft")
    parser.add_argument(
        "--init", type=Path, help="start from this draft folder's weights (same shape) instead of the target"
    )
    parser.add_argument(
        "--init-layers",
        default="",
        help="cut the draft from the target: copy these of its layers (e.g. 0,1,28,29); its width, heads and MLP",
    )
    for f, default in [*asdict(DraftShape()).items(), *asdict(TrainConfig()).items()]:
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(default, bool) else type(default)
        parser.add_argument(f"--{f.replace('_', '-')}", type=kind, default=default)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-tokenizer", action="store_true", help="do not copy the tokenizer into --out")
    parser.add_argument(
        "--export-only", action="store_true", help="write --out from the checkpoint in --work as it is (no training)"
    )
    parser.add_argument(
        "--more-steps",
        type=int,
        default=0,
        help="continue from the checkpoint for this many steps with a new schedule (--lr, cosine, no warm-up)",
    )
    return parser


def _resumed_config(args: argparse.Namespace, cfg: TrainConfig, checkpoint: Path) -> TrainConfig:
    """--export-only: the checkpoint's steps as they are; --more-steps: a new schedule after them."""
    saved = Checkpoint(checkpoint).load(weights_only=False)
    if saved is None:
        raise SpecvizError(f"no checkpoint {checkpoint} to export or continue")
    done = saved["state"]["step"]
    return (
        replace(cfg, steps=done)
        if args.export_only
        else replace(cfg, phase_start=done, steps=done + args.more_steps, warmup=0)
    )


def _start_draft(
    args: argparse.Namespace,
    target: PreTrainedModel,
    data: CorpusData,
    shape: DraftShape,
    cfg: TrainConfig,
    eos: tuple[int, ...],
) -> tuple[Any, DraftShape]:
    """The draft before training (from --init, cut from the target's layers, or new) and its shape."""
    vocab = target.config.vocab_size
    if args.init is not None:
        from specviz.models.default import load_draft

        draft = load_draft(args.init, torch.device(args.device), torch.float32).train()
        return draft, replace(shape, head_vocab=draft.config.head_vocab)
    if args.init_layers:
        layers = [int(x) for x in args.init_layers.split(",")]
        draft = subclone_draft(target, layers, choose_vocab(data, vocab, shape.head_vocab, eos), shape.embed_rank).to(
            args.device
        )
        t = target.config
        shape = replace(
            shape,
            hidden=t.hidden_size,
            layers=len(layers),
            heads=t.num_attention_heads,
            kv_heads=t.num_key_value_heads,
            intermediate=t.intermediate_size,
        )
        return draft, shape
    return new_draft(target, shape, choose_vocab(data, vocab, shape.head_vocab, eos), cfg.seed).to(args.device), shape


def _write_draft(
    args: argparse.Namespace,
    target: PreTrainedModel,
    draft: ReducedVocabDraft,
    tokenizer: PreTrainedTokenizerBase,
    shape: DraftShape,
    cfg: TrainConfig,
    data: CorpusData,
    result: dict,
    cover: float,
) -> None:
    """The draft folder (weights, model card, training.json) and the closing line."""
    cost = measure_c(target, draft)
    params = sum(p.numel() for p in draft.parameters())
    export_draft(
        draft,
        tokenizer,
        args.out,
        model_card(args, shape, cfg, data, result, cost, params, cover),
        not args.no_tokenizer,
    )
    (args.out / "training.json").write_text(
        json.dumps(
            {"shape": asdict(shape), "train": asdict(cfg), "result": result, "cost": cost, "coverage": cover}, indent=1
        )
    )
    print(
        f"[specviz] wrote {args.out}: held-out agreement {result['val_agree']:.3f}, coverage {cover:.3f}, "
        f"c {cost['c']:.3f}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
        cfg = _resumed_config(args, cfg, checkpoint)

    from specviz.models.pair import load_target

    target, tokenizer, eos = load_target(args.target, args.device)
    data = CorpusData(args, tokenizer, cfg.max_len)
    print(
        f"[specviz] distilling on {len(data.train)} answers ({data.answer_tokens} answer tokens, "
        f"{data.with_topk} with top-k), {len(data.val)} held out",
        file=sys.stderr,
    )
    draft, shape = _start_draft(args, target, data, shape, cfg, eos)
    cover = coverage(data, draft.lm_head.vocab_ids.cpu(), target.config.vocab_size)
    result = train(
        draft, data, cfg, checkpoint, args.work / f"train-{args.out.name}.csv", eos[0], progress=not args.no_progress
    )
    draft.eval()
    _write_draft(args, target, draft, tokenizer, shape, cfg, data, result, cover)
    return 0


def run_cli() -> None:
    """main() with a user's error as one line and exit status 2."""
    try:
        raise SystemExit(main())
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
