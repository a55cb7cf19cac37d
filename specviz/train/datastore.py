"""Build SSSD's datastore: `python -m specviz.train.datastore --teacher FILE.jsonl --out PATH.npz`.

Sources (any mix): `--teacher` JSONL records with `output_ids` (text the target generated itself,
as written by the default-pair helper; their `prompt_index` says which ShareGPT prompts they
answer), `--text` files (one document per line, or JSONL with a "text" field) encoded with
`--tokenizer`, and `--tokens` .npy arrays. The default pair's datastore is built from the target's
own answers to ShareGPT prompts only: never from a benchmark's prompts (HumanEval, GSM8K, MT-Bench,
MBPP). Records whose prompt_index is listed in `--exclude-prompt-indices` (the validation split
used to tune the fusion weights) are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specviz.datastore import DEFAULT_PATH, Datastore, tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def teacher_documents(path: Path, exclude: set[int], with_prompts: bool) -> Iterator[list[int]]:
    for line in path.open():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("prompt_index") in exclude:
            continue
        yield (record["prompt_ids"] if with_prompts else []) + record["output_ids"]


def text_documents(path: Path, tokenizer: PreTrainedTokenizerBase) -> Iterator[list[int]]:
    for raw in path.open():
        line = raw.strip()
        if not line:
            continue
        text = json.loads(line)["text"] if path.suffix == ".jsonl" else line
        yield tokenizer.encode(text, add_special_tokens=False)


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """`default` (SmolLM2-135M-Instruct, offline), `tiny` (the tiny-random pair's), or a hub id / folder."""
    if name == "tiny":
        from specviz.models.tiny import tiny_tokenizer

        return tiny_tokenizer()
    from specviz.models import hub

    if name == "default":
        from specviz.models.default import target_source

        name = target_source()
    return hub.load_tokenizer(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--teacher", type=Path, action="append", default=[], help="JSONL with output_ids (target-generated)"
    )
    ap.add_argument(
        "--text", type=Path, action="append", default=[], help="text file: a document per line (or JSONL with 'text')"
    )
    ap.add_argument("--tokens", type=Path, action="append", default=[], help=".npy token array (one document)")
    ap.add_argument(
        "--tokenizer", default="default", help="default | tiny | hub id | folder (its vocabulary is fingerprinted)"
    )
    ap.add_argument("--with-prompts", action="store_true", help="also index the teacher records' prompt_ids")
    ap.add_argument("--exclude-prompt-indices", type=Path, help="JSON list of prompt_index values to leave out")
    ap.add_argument("--max-tokens", type=int, default=2_000_000, help="stop adding documents after this many tokens")
    ap.add_argument("--out", type=Path, default=DEFAULT_PATH)
    ap.add_argument(
        "--tokens-only",
        action="store_true",
        help="leave the suffix array out of the file (as the shipped one does): rebuilt on first load and cached",
    )
    args = ap.parse_args(argv)
    if not (args.teacher or args.text or args.tokens):
        ap.error("give at least one --teacher, --text or --tokens source")
    tokenizer = load_tokenizer(args.tokenizer)
    exclude = set(json.loads(args.exclude_prompt_indices.read_text())) if args.exclude_prompt_indices else set()
    sources = [teacher_documents(p, exclude, args.with_prompts) for p in args.teacher]
    sources += [text_documents(p, tokenizer) for p in args.text]
    sources += [iter([np.load(p).astype(np.int64).tolist()]) for p in args.tokens]
    docs, total = [], 0
    for source in sources:
        for doc in source:
            if total >= args.max_tokens:
                break
            docs.append(doc)
            total += len(doc) + 1
    info = {
        "sources": [str(p) for p in [*args.teacher, *args.text, *args.tokens]],
        "with_prompts": args.with_prompts,
        "excluded_prompt_indices": len(exclude),
    }
    store = Datastore.build(docs, tokenizer_fingerprint(tokenizer), info)
    path = store.save(args.out, with_suffix_array=not args.tokens_only)
    print(
        f"datastore: {store.info['documents']} documents, {len(store)} tokens -> {path}"
        f" ({path.stat().st_size / 1e6:.2f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
