"""Train DISCO's classifier for one model pair, tune tau and SL_max, ship it as safetensors.

    python -m specviz.train.disco --pair default --teacher runs/draft/teacher_text.jsonl
    python -m specviz.train.disco --pair tiny-perturbed --prompts PROMPTS.jsonl --generate 120

As in the paper's appendix D: on text the target generated (never benchmark prompts), let the draft
predict every next token from the target's prefix (teacher forcing); a token is labelled accepted
when the draft's argmax equals the target's argmax there (the greedy acceptance rule). Features are
those of `specviz.models.disco`; the position i is the token's index in the draft an oracle would
have made (consecutive hits since the last miss). Weighted cross-entropy: the classes are weighted
with the total-variation distance TV(p, q) = 1/2 |p - q|_1, the chance that a draft token is
rejected (accepted examples weigh E[TV], rejected ones 1 - E[TV]: class balance). tau and SL_max
(and the best static SL, "SL-opt") are tuned on held-out validation prompts for latency, replaying
greedy speculative decoding over the validation text with measured forward-pass times.
Prompts are split by index into train / validation / test (3:1:1, `specviz.train.splits.DISCO`),
written into the card.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from specviz.methods import BASELINE
from specviz.methods.drafting import fit_vocab
from specviz.models.disco import ASSET_DIR, DiscoClassifier, DiscoModel, asset_name, draft_features
from specviz.models.kv import CachedLM
from specviz.train import splits
from specviz.train.loop import LoopConfig, run

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PreTrainedModel

    from specviz.models.modelpair import ModelPair

POSITION_CAP = 16  # the oracle position i restarts after this many hits in a row (and SL_max <= this)
SPLITS = ("train", "val", "test")


@dataclass
class Sequence:
    prompt_index: int
    ids: list[int]  # prompt + target-generated tokens
    start: int  # index of the first generated token
    logits_row: int | None = None  # first row of the target's stored logits for this text (teacher_logits.f16)


@dataclass
class Positions:
    """Per generated position of many sequences (concatenated; `seq` says which)."""

    base: np.ndarray  # [N, 11] top-10 of q and H(q) (the features without the position)
    match: np.ndarray  # [N] bool: draft argmax == target argmax (greedy acceptance)
    tv: np.ndarray  # [N] TV(p, q)
    seq: np.ndarray  # [N] sequence number

    def oracle_positions(self) -> np.ndarray:
        """i of each position in the oracle's drafts: hits in a row since the last miss (capped)."""
        pos = np.zeros(len(self.match), dtype=np.int64)
        i = 0
        for j in range(len(self.match)):
            if j and self.seq[j] != self.seq[j - 1]:
                i = 0
            pos[j] = i
            i = i + 1 if self.match[j] and i + 1 < POSITION_CAP else 0
        return pos

    def take(self, mask: np.ndarray) -> Positions:
        return Positions(self.base[mask], self.match[mask], self.tv[mask], self.seq[mask])


# ---------------------------------------------------------------- data


def read_teacher(path: Path) -> list[Sequence]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                ids = list(r["prompt_ids"]) + list(r["output_ids"])
                out.append(Sequence(int(r["prompt_index"]), ids, len(r["prompt_ids"]), r.get("logits_row")))
    return [s for s in out if len(s.ids) > s.start]


def generate_teacher(pair: ModelPair, prompts_path: Path, n: int, max_new_tokens: int) -> list[Sequence]:
    """Target-generated (greedy) text for the first n prompts of a jsonl of {"prompt": ...}."""
    import specviz

    out = []
    with prompts_path.open(encoding="utf-8") as f:
        texts = [json.loads(line)["prompt"] for line in f if line.strip()][:n]
    for index, text in enumerate(texts):
        result = specviz.generate(BASELINE, pair, text, max_new_tokens=max_new_tokens)
        out.append(Sequence(index, list(result.prompt_ids) + list(result.summary.output_ids), len(result.prompt_ids)))
    return out


def heldout_text(
    pair: ModelPair,
    prompts_path: Path,
    lines: range,
    out: Path,
    max_new_tokens: int = 128,
    max_prompt_tokens: int = 256,
) -> list[Sequence]:
    """Greedy target answers to lines `lines` of a jsonl of {"prompt": ...} (prompt_index = line number),
    appended to `out` one record at a time (teacher format; a rerun resumes). Greedy, because the
    benchmarks decode greedily; for tuning and testing on text the draft never trained on."""
    import specviz
    from specviz.models.pair import encode_prompt

    done = {s.prompt_index for s in read_teacher(out)} if out.is_file() else set()
    with prompts_path.open(encoding="utf-8") as f:
        texts = {i: json.loads(line)["prompt"] for i, line in enumerate(f) if i in lines}
    out.parent.mkdir(parents=True, exist_ok=True)
    for index in lines:
        if index in done or index not in texts:
            continue
        prompt_ids = encode_prompt(pair, texts[index], None)
        if len(prompt_ids) > max_prompt_tokens:
            continue
        result = specviz.generate(BASELINE, pair, prompt_ids, max_new_tokens=max_new_tokens)
        record = {
            "prompt_index": index,
            "prompt": texts[index],
            "prompt_ids": list(prompt_ids),
            "output_ids": list(result.summary.output_ids),
            "temperature": 0.0,
        }
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        print(f"held-out prompt {index}: {len(record['output_ids'])} tokens", flush=True)
    return [s for s in read_teacher(out) if s.prompt_index in lines]


def stored_logits(path: Path | None, vocab: int) -> np.ndarray | None:
    """The teacher's stored target logits as a read-only [rows, V] float16 memmap (None: recompute p)."""
    if path is None or not path.is_file():
        return None
    return np.memmap(path, dtype=np.float16, mode="r", shape=(path.stat().st_size // (2 * vocab), vocab))


@torch.inference_mode()
def extract(
    pair: ModelPair, sequences: list[Sequence], max_len: int = 1024, logits: np.ndarray | None = None
) -> Positions:
    """Teacher-forced features, labels and TV at every generated position. p comes from the stored
    target logits when given (the same numbers, no target forward pass), else from the target."""
    rows = []
    for n, s in enumerate(sequences):
        ids = s.ids[:max_len]
        if len(ids) <= s.start:
            continue
        x = torch.tensor([ids], device=pair.device)  # [1, L]
        keep = len(ids) - s.start + 1
        if logits is not None and s.logits_row is not None and s.logits_row + keep - 1 <= len(logits):
            target_logits = torch.from_numpy(
                np.asarray(logits[s.logits_row : s.logits_row + keep - 1], dtype=np.float32)
            )
        else:
            target_logits = pair.target(input_ids=x, logits_to_keep=keep).logits[0, :-1]
        p = torch.softmax(target_logits.float(), -1)  # [n, V]
        # [n, V], as the draft drafts (DISCO's pairs have a draft)
        draft_logits = CachedLM(pair.draft).forward(ids, n_logits=keep)[:-1]  # type: ignore[arg-type]
        q = fit_vocab(torch.softmax(draft_logits.float(), -1), p.shape[-1])
        base = draft_features(q, 0)[:, :-1]  # [n, 11]
        match = (q.argmax(-1) == p.argmax(-1)).cpu().numpy()
        tv = (0.5 * (p - q).abs().sum(-1)).cpu().numpy()
        rows.append((base.cpu().numpy(), match, tv, np.full(len(match), n)))
    return Positions(*(np.concatenate(c) for c in zip(*rows, strict=True)))  # rows: 4-tuples


# ---------------------------------------------------------------- training


def features(pos: Positions, i: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.concatenate([pos.base, i[:, None].astype(np.float32)], axis=1)).float()  # [N, 12]


def train_classifier(pos: Positions, hidden: int, epochs: int, seed: int) -> tuple[DiscoClassifier, dict]:
    torch.manual_seed(seed)
    x = features(pos, pos.oracle_positions())
    y = torch.from_numpy(pos.match.astype(np.float32))
    mean_tv = float(pos.tv.mean())
    weight = torch.where(y > 0, mean_tv, 1.0 - mean_tv)  # class weights from TV (see module docstring)
    model = DiscoClassifier(hidden)
    model.mean.copy_(x.mean(0))
    model.std.copy_(x.std(0).clamp_min(1e-6))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    batch = 4096
    per_epoch = math.ceil(len(y) / batch)
    batches: list[torch.Tensor] = []

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        if step % per_epoch == 0:  # a new epoch: a new shuffle
            batches[:] = torch.randperm(len(y), generator=gen).split(batch)
        idx = batches[step % per_epoch]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[idx]), y[idx], weight=weight[idx])
        return loss, {"loss": float(loss.detach())}

    last = run(LoopConfig(steps=epochs * per_epoch), opt, list(model.parameters()), loss_at, {"step": 0})
    model.eval()
    return model, {
        "mean_tv": mean_tv,
        "accept_weight": mean_tv,
        "reject_weight": 1 - mean_tv,
        "final_loss": last["loss"],
    }


# ---------------------------------------------------------------- evaluation and tuning


def f1(pred: np.ndarray, label: np.ndarray) -> float:
    tp = float((pred & label).sum())
    return 2 * tp / (pred.sum() + label.sum()) if pred.sum() + label.sum() else 0.0


@torch.inference_mode()
def score_table(model: DiscoClassifier, pos: Positions) -> np.ndarray:
    """[N, POSITION_CAP]: C_i at every position for every draft index i."""
    cols = [torch.sigmoid(model(features(pos, np.full(len(pos.match), i)))).numpy() for i in range(POSITION_CAP)]
    return np.stack(cols, axis=1)


@dataclass(frozen=True)
class Costs:
    draft_ms: float  # one draft forward pass (one token)
    verify_ms_1: float  # one target forward pass over 1 token
    verify_ms_per_token: float  # extra per additional token in a verification pass

    def verify_ms(self, k: int) -> float:
        return self.verify_ms_1 + self.verify_ms_per_token * k  # k drafts + 1 -> k+1 tokens


def sequences(seq: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of equal sequence ids: one answer's positions."""
    cuts = [0, *(np.flatnonzero(np.diff(seq)) + 1).tolist(), len(seq)]
    return list(itertools.pairwise(cuts))


def replay(pos: Positions, decide: Callable[[int, int], bool], costs: Costs) -> dict:
    """Greedy speculative decoding replayed over the text. decide(start, i): in the iteration that
    starts at position `start`, draft token i? Returns tokens, forwards and modelled ms per token."""
    from specviz.oracle import replay_chain

    tokens = drafts = verifies = 0
    ms = 0.0
    lengths = []
    for start, end in sequences(pos.seq):

        def draft_length(j: int, left: int, start: int = start) -> int:
            k = 0
            while k < left and decide(start + j, k):
                k += 1
            return k

        for _, k, _, emitted in replay_chain(pos.match[start:end], draft_length):
            tokens, drafts, verifies = tokens + emitted, drafts + k, verifies + 1
            ms += k * costs.draft_ms + costs.verify_ms(k)
            lengths.append(k)
    return {
        "tokens": tokens,
        "draft_forwards": drafts,
        "target_forwards": verifies,
        "ms_per_token": ms / tokens,
        "mean_sl": float(np.mean(lengths)),
    }


def tune(pos: Positions, scores: np.ndarray, costs: Costs) -> dict:
    """Static SL-k for k = 1..16, DISCO over a (tau, SL_max) grid, and the oracle, on one split."""
    # (mypy cannot infer a lambda with a default argument where a Callable[[int, int], bool] is expected)
    static = {k: replay(pos, lambda j, i, k=k: i < k, costs) for k in range(1, POSITION_CAP + 1)}  # type: ignore[misc]
    sl_opt = min(static, key=lambda k: static[k]["ms_per_token"])
    grid = {}
    for tau in np.round(np.arange(0.05, 1.0, 0.05), 2):
        for sl_max in (4, 6, 8, 10, 12, 16):
            grid[(float(tau), sl_max)] = replay(pos, disco_rule(scores, float(tau), sl_max), costs)
    best = min(grid, key=lambda c: grid[c]["ms_per_token"])
    ahead = hits_ahead(pos)
    oracle = replay(pos, lambda j, i: i < ahead[j], costs)  # drafts exactly the hits ahead (maybe none)
    return {
        "static": {str(k): v for k, v in static.items()},
        "sl_opt": sl_opt,
        "disco_best": {"threshold": best[0], "max_speculation_length": best[1], **grid[best]},
        "oracle": oracle,
    }


def disco_rule(scores: np.ndarray, tau: float, sl_max: int) -> Callable[[int, int], bool]:
    """decide(start, i) for DISCO: the first token always; token i if i < SL_max and C_{i-1} >= tau."""
    return lambda j, i: i == 0 or (i < sl_max and scores[j + i - 1, i - 1] >= tau)


def hits_ahead(pos: Positions) -> np.ndarray:
    """hits_ahead[j]: consecutive draft hits from position j on (within its sequence)."""
    out = np.zeros(len(pos.match), dtype=np.int64)
    for j in range(len(pos.match) - 1, -1, -1):
        same = j + 1 < len(pos.match) and pos.seq[j + 1] == pos.seq[j]
        out[j] = (out[j + 1] + 1 if same else 1) if pos.match[j] else 0
    return out


def measure_costs(pair: ModelPair, context: int = 128, repeats: int = 5) -> Costs:
    """Median wall ms of a one-token draft pass and of 1- and 9-token target passes over `context` tokens."""
    vocab = min(pair.vocab_size, 1000)
    prefix = [int(t) for t in torch.randint(10, vocab, (context,), generator=torch.Generator().manual_seed(0))]

    def timed(model: PreTrainedModel, n_new: int) -> float:
        times = []
        for _ in range(repeats):
            lm = CachedLM(model)
            lm.forward(prefix)
            t = time.perf_counter()
            lm.forward(prefix[:n_new], n_logits=n_new)
            times.append((time.perf_counter() - t) * 1e3)
        return float(np.median(times))

    d, v1, v9 = timed(pair.draft, 1), timed(pair.target, 1), timed(pair.target, 9)  # type: ignore[arg-type]  # a draft
    return Costs(d, v1, max(0.0, (v9 - v1) / 8))


def decision_cost_us(model: DiscoClassifier, vocab: int, repeats: int = 200) -> float:
    """Median microseconds of one C_i (features from a [V] distribution + the FFN)."""
    q = torch.softmax(torch.randn(vocab), -1)
    model.score(q, 0)
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        model.score(q, i % 8)
        times.append((time.perf_counter() - t) * 1e6)
    return float(np.median(times))


# ---------------------------------------------------------------- CLI


def load_named_pair(name: str) -> ModelPair:
    if name.startswith("tiny-"):
        from specviz.models.tiny import tiny_pair

        return tiny_pair(draft=name.removeprefix("tiny-"))
    from specviz.models.pair import load_pair

    return load_pair(name, device="cpu", dtype="float32")


def fit(
    pair: ModelPair,
    pair_name: str,
    sequences: list[Sequence],
    source: str,
    hidden: int,
    epochs: int,
    seed: int,
    logits: np.ndarray | None = None,
    costs: Costs | None = None,
    given: dict[str, list[Sequence]] | None = None,
    split_rule: str = splits.DISCO.describe(),
) -> DiscoModel | None:
    """Split (by `splits.DISCO` unless `given` holds train / val / test), extract, train, tune
    tau / SL_max on validation, score on test; None if a split is empty."""
    by_split = given or {
        s: [q for q in sequences if splits.split_of(splits.DISCO, q.prompt_index) == s] for s in SPLITS
    }
    print(f"{len(sequences)} sequences: " + ", ".join(f"{s} {len(v)}" for s, v in by_split.items()), flush=True)
    t = time.perf_counter()
    data = {s: extract(pair, v, logits=logits) for s, v in by_split.items() if v}
    if set(data) != set(SPLITS):
        return None
    print(
        f"features of {sum(len(d.match) for d in data.values())} positions in {time.perf_counter() - t:.0f} s",
        flush=True,
    )

    model, loss_info = train_classifier(data["train"], hidden, epochs, seed)
    costs_source = "given" if costs else "measured by measure_costs at training time"
    costs = costs or measure_costs(pair)
    val = tune(data["val"], score_table(model, data["val"]), costs)
    tau, sl_max = val["disco_best"]["threshold"], val["disco_best"]["max_speculation_length"]

    test = data["test"]
    i_test = test.oracle_positions()
    test_scores = score_table(model, test)  # [N, 16]
    scores = test_scores[np.arange(len(i_test)), i_test]  # C_i at the oracle's i
    label = test.match.astype(bool)
    static_f1 = {k: f1(i_test < k, label) for k in range(1, POSITION_CAP + 1)}
    best_static = max(static_f1, key=static_f1.__getitem__)
    test_replay = tune(test, test_scores, costs)
    card = {
        "pair": pair_name,
        "pair_info": {k: v for k, v in pair.info.items() if isinstance(v, (str, int, float))},
        "draft_sha256": weights_digest(pair.draft),  # type: ignore[arg-type]  # DISCO's pairs have a draft
        "training_text": source,
        "split": split_rule,
        "split_prompt_indices": {s: sorted({q.prompt_index for q in v}) for s, v in by_split.items()},
        "positions": {s: len(d.match) for s, d in data.items()},
        "accept_rate": {s: float(d.match.mean()) for s, d in data.items()},
        "loss": loss_info,
        "features": "top-10 of q_i, entropy of q_i (nats), draft index i (0-based)",
        "hidden": hidden,
        "epochs": epochs,
        "tuned_on": "val",
        "costs_ms": costs.__dict__,
        "costs_source": costs_source,
        "decision_cost_us": decision_cost_us(model, pair.vocab_size),
        "validation": val,
        "test": {
            "f1_accept_disco": f1(scores >= tau, label),
            "f1_accept_static_best": static_f1[best_static],
            "static_best_k_for_f1": best_static,
            "f1_accept_disco_at_0.5": f1(scores >= 0.5, label),
            "f1_reject_disco": f1(scores < tau, ~label),
            "f1_reject_static_best": max(f1(i_test >= k, ~label) for k in range(1, POSITION_CAP + 1)),
            "replay": {k: test_replay[k] for k in ("sl_opt", "disco_best", "oracle")},
            "replay_at_tuned": replay(test, disco_rule(test_scores, tau, sl_max), costs),
            "replay_sl_opt": test_replay["static"][str(val["sl_opt"])],
        },
        "static_sl_opt": val["sl_opt"],
    }
    return DiscoModel(model, tau, sl_max, card)


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of a model's parameters (names and float32 values): which draft a classifier was fitted to."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specviz.train.disco", description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="default", help="default | tiny-random | tiny-perturbed | tiny-self | a preset")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--teacher", type=Path, help="jsonl of target-generated text: prompt_index, prompt_ids, output_ids"
    )
    src.add_argument(
        "--prompts", type=Path, help='jsonl of {"prompt": ...} training prompts: the target answers them here'
    )
    p.add_argument("--generate", type=int, default=100, help="with --prompts: how many prompts to answer")
    p.add_argument("--max-new-tokens", type=int, default=96, help="with --prompts: tokens per answer")
    p.add_argument("--limit", type=int, default=0, help="use at most this many teacher records (0: all)")
    p.add_argument(
        "--records",
        default="",
        help="A:B, a slice of the teacher records (e.g. '681:' skips the first 681, "
        "the text the draft was trained on, whose acceptance is optimistic)",
    )
    p.add_argument(
        "--heldout",
        type=Path,
        help="teacher-format jsonl of greedy target text on other prompts: "
        "validation (even prompt_index) and test (odd); then every --teacher record trains",
    )
    p.add_argument(
        "--heldout-prompts",
        type=Path,
        help='with --heldout: jsonl of {"prompt": ...}; its lines '
        "--heldout-lines are answered greedily into --heldout first (resumes)",
    )
    p.add_argument("--heldout-lines", default="5500:5600", help="A:B, line range of --heldout-prompts")
    p.add_argument(
        "--exclude-mod",
        type=int,
        default=0,
        help="leave out teacher records with prompt_index %% N == 0 (the corpus's held-out answers are "
        "chosen by `corpus teacher-text --split`, not by this)",
    )
    p.add_argument("--hidden", type=int, default=32, help="width of the FFN's hidden layer")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--costs",
        default="",
        help="D,V1,VK: ms of one draft forward, of a 1-token target forward and per "
        "extra verified token, to tune with instead of measuring them here (e.g. on a busy machine)",
    )
    p.add_argument("--out", type=Path, help="classifier file (default assets/disco/<pair>.safetensors)")
    return p


def _teacher_sequences(args: argparse.Namespace, pair: ModelPair) -> tuple[list[Sequence], str]:
    """The target's text to train on (read from --teacher or answered here from --prompts), cut by
    --exclude-mod, --records and --limit, and the card's account of where it came from."""
    if args.teacher:
        sequences = read_teacher(args.teacher)
        source = str(args.teacher)
    else:
        sequences = generate_teacher(pair, args.prompts, args.generate, args.max_new_tokens)
        source = f"{args.prompts} (first {args.generate} prompts, answered greedily by the target here)"
    if args.exclude_mod:
        sequences = [s for s in sequences if splits.split_of(splits.every(args.exclude_mod), s.prompt_index) == "kept"]
        source += f" (records with prompt_index % {args.exclude_mod} == 0 left out)"
    if args.records:
        a, b = (int(x) if x else None for x in args.records.split(":"))
        sequences = sequences[a:b]
        source += f" (records {args.records})"
    if args.limit:
        sequences = sequences[: args.limit]
    return sequences, source


def _heldout_splits(
    args: argparse.Namespace, pair: ModelPair, sequences: list[Sequence], source: str
) -> tuple[list[Sequence], dict[str, list[Sequence]] | None, str]:
    """With --heldout, tau / SL_max are tuned and scored on text the draft never trained on: every
    teacher record trains, the held-out answers validate (even prompt_index) and test (odd).
    Returns all sequences, the given splits (None: `splits.DISCO` splits them) and the card's rule."""
    if not args.heldout:
        return sequences, None, splits.DISCO.describe()
    if args.heldout_prompts:
        a, b = (int(x) for x in args.heldout_lines.split(":"))
        heldout_text(pair, args.heldout_prompts, range(a, b), args.heldout, args.max_new_tokens)
    held = read_teacher(args.heldout)
    part = {s.prompt_index: splits.split_of(splits.DISCO_HELDOUT, s.prompt_index) for s in held}
    given = {
        "train": sequences,
        "val": [s for s in held if part[s.prompt_index] == "val"],
        "test": [s for s in held if part[s.prompt_index] == "test"],
    }
    rule = f"train: {source}; validation / test: greedy target answers in {args.heldout} (even / odd prompt_index)"
    return sequences + held, given, rule


def _write_classifier(args: argparse.Namespace, trained: DiscoModel) -> None:
    """The classifier file (--out or the pair's asset), then the card's summary and the closing line."""
    out = args.out or ASSET_DIR / f"{asset_name(args.pair)}.safetensors"
    trained.save(out)
    print(summary_text(trained.card))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_grad_enabled(True)
    pair = load_named_pair(args.pair)
    sequences, source = _teacher_sequences(args, pair)
    sequences, given, rule = _heldout_splits(args, pair, sequences, source)
    logits = stored_logits(args.teacher.parent / "teacher_logits.f16", pair.vocab_size) if args.teacher else None
    costs = Costs(*(float(x) for x in args.costs.split(","))) if args.costs else None
    trained = fit(pair, args.pair, sequences, source, args.hidden, args.epochs, args.seed, logits, costs, given, rule)
    if trained is None:
        print("error: every split needs at least one sequence (give more prompts)", file=sys.stderr)
        return 2
    _write_classifier(args, trained)
    return 0


def summary_text(card: dict) -> str:
    v, t = card["validation"], card["test"]
    lines = [
        "accept rate (train/val/test): " + ", ".join(f"{card['accept_rate'][s]:.3f}" for s in SPLITS),
        (
            f"tuned on validation: tau={v['disco_best']['threshold']}, "
            f"SL_max={v['disco_best']['max_speculation_length']}, SL-opt={v['sl_opt']}"
        ),
        (
            f"test F1 (accept class): DISCO {t['f1_accept_disco']:.3f} "
            f"vs best static SL-{t['static_best_k_for_f1']} {t['f1_accept_static_best']:.3f}"
        ),
        (
            f"test replay ms/token: DISCO {t['replay_at_tuned']['ms_per_token']:.2f}, "
            f"SL-opt {t['replay_sl_opt']['ms_per_token']:.2f}, oracle {t['replay']['oracle']['ms_per_token']:.2f}"
        ),
        (
            f"one decision {card['decision_cost_us']:.0f} us "
            f"vs one draft forward {card['costs_ms']['draft_ms'] * 1e3:.0f} us"
        ),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
