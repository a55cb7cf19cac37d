"""Where a draft agrees with its target, and where not: teacher-forced top-1 agreement on the
corpus's held-out answers, broken down by prompt source, answer position, token class and the
target's own confidence.

    python -m specviz.bench agreement --draft assets/drafts/smollm2-135m-draft-v2 --work runs/corpus

Under greedy decoding a drafted token is accepted exactly when it is the target's argmax, so this
agreement is the acceptance rate of every drafted token given a correct prefix (α, teacher-forced).
The target's argmax is taken from the top-k kept at generation (answers of a local work folder),
else the answer token of a greedy answer. Tokens outside the draft's head can never be drafted:
their share is reported. Writes agreement.json and agreement.md under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

POSITIONS = ((0, 4), (4, 16), (16, 64), (64, 10**9))  # answer positions [start, end)
CONFIDENCE = ((0.0, 0.3), (0.3, 0.6), (0.6, 0.9), (0.9, 1.01))  # the target's top-1 probability


def token_class(piece: str) -> str:
    """A byte-level BPE piece's kind: word start ('Ġthe'), word piece ('ing'), digit, space or newline, punctuation."""
    text = piece.replace("Ġ", " ").replace("Ċ", "\n").replace("ĉ", "\t")
    core = text.strip()
    if not core:
        return "space/newline"
    if core.isdigit():
        return "digit"
    if core.replace("_", "").isalpha():
        return "word start" if text[0].isspace() else "word piece"
    if all(not ch.isalnum() for ch in core):
        return "punctuation"
    return "mixed"


def bucket(value: float, edges: tuple[tuple[float, float], ...], unit: str = "") -> str:
    lo, hi = next((lo, hi) for lo, hi in edges if lo <= value < hi)
    return f"{lo:g}–{hi:g}{unit}" if hi < 10**8 else f"{lo:g}+{unit}"


def analyse(draft: Any, examples: list, tokenizer: Any, batch: int = 16) -> dict[str, Any]:
    """Counts of (hits, total) per breakdown over the examples' answer positions."""
    import torch

    vocab_ids = draft.lm_head.vocab_ids.cpu()
    in_head = torch.zeros(int(vocab_ids.max()) + 1 + tokenizer.vocab_size, dtype=torch.bool)
    in_head[vocab_ids] = True
    pieces: dict[int, str] = {}
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for i in range(0, len(examples), batch):
        chunk = examples[i : i + batch]
        width = max(len(e.ids) for e in chunk) - 1
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        for b, e in enumerate(chunk):
            ids[b, : len(e.ids) - 1] = torch.tensor(e.ids[:-1])
        with torch.no_grad():
            guess = vocab_ids[draft.reduced_logits(ids).argmax(-1)]  # [B, T] the draft's top-1 token ids
        for b, e in enumerate(chunk):
            a = len(e.ids) - e.answer_start
            start = e.answer_start - 1  # the row that predicts the first answer token
            drafted = guess[b, start : start + a].tolist()
            top1 = e.topk[0][:a, 0].tolist() if e.topk is not None else e.ids[e.answer_start :]
            p_top1 = torch.from_numpy(e.topk[1][:a, 0].astype("float32")).exp().tolist() if e.topk is not None else None
            for j, (d, t) in enumerate(zip(drafted, top1, strict=True)):  # a answer tokens each
                hit = int(d == t)
                piece = pieces.setdefault(t, tokenizer.convert_ids_to_tokens(int(t)))
                keys = [
                    ("all", "all"),
                    ("source", e.source),
                    ("position", bucket(j, POSITIONS)),
                    ("token class", token_class(piece)),
                    ("in the head", "yes" if in_head[t] else "no"),
                ]
                if p_top1 is not None:
                    keys.append(("target's top-1 probability", bucket(p_top1[j], CONFIDENCE)))
                for group, key in keys:
                    counts[group][key][0] += hit
                    counts[group][key][1] += 1
    order = {
        bucket(lo, edges): i for edges in (POSITIONS, CONFIDENCE) for i, (lo, _) in enumerate(edges)
    }  # buckets in range order
    return {
        g: {
            k: {"agreement": h / n, "tokens": n}
            for k, (h, n) in sorted(rows.items(), key=lambda kv: (order.get(kv[0], 0), kv[0]))
        }
        for g, rows in counts.items()
    }


def markdown(result: dict[str, Any], title: str) -> str:
    lines = [f"# {title}", "", "| breakdown | group | agreement | share of tokens |", "|---|---|---|---|"]
    total = result["all"]["all"]["tokens"]
    for group, rows in result.items():
        for key, row in rows.items():
            lines.append(f"| {group} | {key} | {row['agreement']:.3f} | {row['tokens'] / total:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import torch

    from specviz.errors import SpecvizError
    from specviz.models.default import load_draft
    from specviz.models.pair import load_target
    from specviz.train import corpus as corpus_mod
    from specviz.train.draft import CorpusData

    p = argparse.ArgumentParser(prog="python -m specviz.bench agreement", description=__doc__.split("\n\n")[0])
    p.add_argument("--draft", type=Path, required=True, help="a draft folder written by specviz.train.draft")
    p.add_argument("--target", default="default", help="whose tokenizer and corpus (default: the default target)")
    p.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the corpus's prompt files")
    p.add_argument("--corpus", type=Path, default=corpus_mod.CORPUS, help="shipped corpus folder")
    p.add_argument("--work", type=Path, default=Path("runs/corpus"), help="generation work folder (answers with top-k)")
    p.add_argument("--limit", type=int, default=400, help="held-out answers to read")
    p.add_argument("--max-len", type=int, default=448)
    p.add_argument("--out", type=Path, help="folder for agreement.json and agreement.md (default: the draft folder)")
    args = p.parse_args(argv)
    args.top_k, args.answers_only = corpus_mod.GenerationConfig.top_k, False
    if not (args.draft / "config.json").is_file():
        raise SpecvizError(f"no draft at {args.draft}")
    _, tokenizer, _ = load_target(args.target)
    data = CorpusData(args, tokenizer, args.max_len)
    examples = [e for e in data.val if e.topk is not None or e.greedy][: args.limit]
    if not examples:
        raise SpecvizError("no held-out answers with the target's argmax: pass --work and/or --corpus")
    draft = load_draft(args.draft, torch.device("cpu"), torch.float32).eval()
    result = analyse(draft, examples, tokenizer)
    out = args.out or args.draft
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps(result, indent=1))
    (out / "agreement.md").write_text(
        markdown(result, f"Teacher-forced agreement of {args.draft.name} on {len(examples)} held-out answers")
    )
    print(markdown(result, f"{args.draft.name}: {len(examples)} held-out answers"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
