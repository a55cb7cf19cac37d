"""The target's features f_t by teacher-forced prefill over the corpus, in resumable float16 chunks.

    python -m specviz.eagle.features --data ../shared/data --work runs/eagle/features [--limit N] [--seconds S]

One prefill of prompt + answer gives every position's feature (the last layer's output after the
final norm: what the LM head reads, `hidden_states[num_layers]`). Sequences are the draft's
(`train.draft.data.CorpusData`: chat template, answers cut at `--max-len`, split by `splits.CORPUS`);
chunk i of a split holds its sequences i*chunk .. (i+1)*chunk - 1 as `{split}-{i:05d}.npy` (float16
[tokens, H], memory-mapped on read) and `.json` (each sequence's ids, answer start and row offset).
A chunk is written whole (temporary file, then renamed), so a stopped run resumes at the first
missing chunk. Time and size for the whole corpus: `--seconds` stops early and projects them.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specviz.train.draft.data import CorpusData, Example

MAX_LEN = 512  # prompt + answer tokens per sequence (the corpus's answers stop at 128 tokens)


@torch.no_grad()  # not inference_mode: training reads these tensors in autograd
def features_of(target: PreTrainedModel, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """f_t for every position of right-padded `ids` [B, T]: [B, T, H] (the target's dtype)."""
    out = target(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True, logits_to_keep=1)
    return out.hidden_states[target.config.num_hidden_layers]


def corpus_data(data: Path, tokenizer: PreTrainedTokenizerBase, max_len: int = MAX_LEN) -> CorpusData:
    """The shipped corpus's sequences with their prompts, split as the draft's are."""
    from specviz.train.corpus import CORPUS

    args = argparse.Namespace(corpus=CORPUS, work=Path("/nonexistent"), top_k=1, data=data, answers_only=True)
    return CorpusData(args, tokenizer, max_len)


def padded(examples: list[Example], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T] and their attention mask [B, T]."""
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    mask = torch.zeros(len(examples), width, dtype=torch.long)
    for b, e in enumerate(examples):
        ids[b, : len(e.ids)] = torch.tensor(e.ids)
        mask[b, : len(e.ids)] = 1
    return ids, mask


def length_batches(examples: list[Example], batch_tokens: int) -> list[list[int]]:
    """Indices in batches of about `batch_tokens` padded tokens, sorted by length (little padding)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].ids))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * len(examples[i].ids) <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def chunk_features(target: PreTrainedModel, examples: list[Example], batch_tokens: int, pad: int) -> list[np.ndarray]:
    """Each example's features, float16 [len(ids), H], in the examples' order."""
    out: list[np.ndarray] = [np.zeros(0)] * len(examples)
    for batch in length_batches(examples, batch_tokens):
        ids, mask = padded([examples[i] for i in batch], pad)
        feats = features_of(target, ids, mask).to(torch.float16).cpu().numpy()  # [B, T, H]
        for b, i in enumerate(batch):
            out[i] = feats[b, : len(examples[i].ids)]
    return out


@dataclass(frozen=True)
class Chunk:
    features: np.ndarray  # [tokens, H] float16 (memory-mapped)
    sequences: list[dict]  # {"ids", "answer_start", "row"}: the sequence's first feature row

    def of(self, j: int) -> torch.Tensor:
        """Sequence j's features [len(ids), H] (float32)."""
        s = self.sequences[j]
        return torch.from_numpy(np.asarray(self.features[s["row"] : s["row"] + len(s["ids"])], np.float32))


def chunk_path(work: Path, split: str, index: int) -> Path:
    return work / f"{split}-{index:05d}.npy"


def write_chunk(path: Path, examples: list[Example], feats: list[np.ndarray]) -> None:
    """The chunk's features and index, each written whole (the index last: it vouches for the features)."""
    rows = np.cumsum([0] + [len(f) for f in feats])
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, np.concatenate(feats) if feats else np.zeros((0, 0), np.float16))
    tmp.replace(path)
    index = [
        {"ids": e.ids, "answer_start": e.answer_start, "row": int(r)} for e, r in zip(examples, rows, strict=False)
    ]
    path.with_suffix(".json.tmp").write_text(json.dumps(index))
    path.with_suffix(".json.tmp").replace(path.with_suffix(".json"))


def read_chunk(path: Path) -> Chunk | None:
    """A complete chunk (None when it is missing or was cut off before its index)."""
    if not path.with_suffix(".json").is_file():
        return None
    return Chunk(np.load(path, mmap_mode="r"), json.loads(path.with_suffix(".json").read_text()))


def extract(
    target: PreTrainedModel,
    examples: list[Example],
    work: Path,
    split: str,
    chunk: int,
    batch_tokens: int,
    pad: int,
    seconds: float | None,
) -> tuple[int, float]:
    """Write the missing chunks of `split`; stop after `seconds` (None: never). Returns (tokens, s) done."""
    work.mkdir(parents=True, exist_ok=True)
    tokens, started = 0, time.monotonic()
    for index in range(0, (len(examples) + chunk - 1) // chunk):
        path = chunk_path(work, split, index)
        part = examples[index * chunk : (index + 1) * chunk]
        done = read_chunk(path)
        if done is not None and len(done.sequences) == len(part):
            continue  # (a shorter one was cut by --limit: written again whole)
        write_chunk(path, part, chunk_features(target, part, batch_tokens, pad))
        tokens += sum(len(e.ids) for e in part)
        if seconds is not None and time.monotonic() - started > seconds:
            break
    return tokens, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="the folder of the training prompt files")
    p.add_argument("--work", type=Path, default=Path("runs/eagle/features"), help="where the chunks go (gitignored)")
    p.add_argument("--chunk", type=int, default=256, help="sequences per chunk file")
    p.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per prefill")
    p.add_argument("--max-len", type=int, default=MAX_LEN)
    p.add_argument("--limit", type=int, default=None, help="only the first N training sequences")
    p.add_argument("--seconds", type=float, default=None, help="stop after this long and project the whole corpus")
    a = p.parse_args(argv)
    from specviz.models.default import load_target

    torch.manual_seed(0)
    target, tokenizer = load_target(torch.device("cpu"), torch.float32)
    data = corpus_data(a.data, tokenizer, a.max_len)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    total = sum(len(e.ids) for e in data.train + data.val)
    done = extract(target, data.val, a.work, "val", a.chunk, a.batch_tokens, pad, a.seconds)
    train = data.train[: a.limit] if a.limit else data.train
    left = None if a.seconds is None else max(0.0, a.seconds - done[1])
    more = extract(target, train, a.work, "train", a.chunk, a.batch_tokens, pad, left)
    tokens, seconds = done[0] + more[0], done[1] + more[1]
    per_token = 2 * target.config.hidden_size  # float16 bytes per feature row
    rate = tokens / seconds if seconds else float("nan")
    print(f"{tokens} tokens in {seconds:.0f} s: {rate:.0f} tokens/s; {per_token} bytes per token")
    print(
        f"whole corpus: {total} tokens ({len(data.train)} train + {len(data.val)} held-out sequences) ->"
        f" {total * per_token / 1e9:.2f} GB, {total / rate / 3600:.1f} h at this rate"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
