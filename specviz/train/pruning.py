"""Train Speculative Streaming's tree-pruning layer (section 3.2.3) at several candidate layers at once.

    python -m specviz.train.pruning --data runs/corpus/teacher_greedy.jsonl \
        --heldout runs/corpus/teacher_greedy_val.jsonl --layers 8,14,20,23,26 --steps 400 --out runs/pruning

Each candidate layer l gets its own o_theta (`models.tree_pruning.TreePruner`), trained on the
paper's next-token objective as distillation: KL(target's final distribution || softmax of the
early-exit logits), both over the streams' frequent-token set (the tokens trees are drawn from), at
the answer positions of the target's greedy answers (`python -m specviz.train.corpus teacher-text
--temperature 0`). The target is frozen; one teacher-forced pass a sequence feeds every layer.
Held-out: the corpus's held-out prompts (`--split val`), reported per layer for the untrained map
(the logit lens, U = 0) and the trained one. Resumable: `--out` holds checkpoint.pt and log.csv.
`--attach L --adapter A` writes layer L's pruner into the streaming adapter file A.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from specviz.models.tree_pruning import TreePruner
from specviz.train.loop import Checkpoint, CsvLog, LoopConfig, run

THRESHOLDS = (0.01, 0.03, 0.1)  # the held-out report: how often the target's own token falls below each


def read_sequences(path: Path, max_len: int, max_prompt: int) -> list[tuple[list[int], int]]:
    """(prompt + answer ids cut to max_len, answer start) of each record with a short enough prompt."""
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if len(r["prompt_ids"]) <= max_prompt and r["output_ids"]:
            out.append(((r["prompt_ids"] + r["output_ids"])[:max_len], len(r["prompt_ids"])))
    return out


class Teacher:
    """The frozen target: hidden states entering each candidate layer and the final distribution over
    the frequent tokens, at a sequence's answer positions."""

    def __init__(self, target_name: str) -> None:
        from specviz.methods.streaming import frequent_vocab
        from specviz.models.devices import output_embeddings
        from specviz.models.pair import load_target

        self.model = load_target(target_name, "cpu", torch.float32)[0].eval()
        head = output_embeddings(self.model)
        ids = frequent_vocab(len(head))
        self.vocab_ids = ids if ids is not None else torch.arange(len(head))
        self.rows = head[self.vocab_ids].detach()  # [K, H]
        self.norm = self.model.get_decoder().norm

    @torch.no_grad()
    def features(self, ids: list[int], start: int, layers: list[int]) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
        """{layer: [P, H]} (hidden states after `layer` layers) and p [P, K] at the P answer positions."""
        out = self.model(torch.tensor([ids]), output_hidden_states=True)
        pos = torch.arange(start - 1, len(ids) - 1)
        p = out.logits[0, pos][:, self.vocab_ids].softmax(-1)
        return {layer: out.hidden_states[layer][0, pos] for layer in layers}, p


def kl(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p || softmax(logits)), mean over rows."""
    return (p * (p.clamp_min(1e-12).log() - logits.log_softmax(-1))).sum(-1).mean()


@torch.no_grad()
def evaluate(teacher: Teacher, pruners: dict[int, TreePruner], seqs: list[tuple[list[int], int]]) -> dict:
    """Per layer: top-1 agreement with the target, mean p~ of the target's own token, how often that
    token falls below each threshold (a greedy path it would cut), and the KL."""
    sums: dict[int, dict[str, float]] = {layer: {} for layer in pruners}
    n = 0
    for ids, start in seqs:
        hs, p = teacher.features(ids, start, list(pruners))
        best = p.argmax(-1)
        n += len(best)
        for layer, pruner in pruners.items():
            z = pruner.early_logits(hs[layer], teacher.norm, teacher.rows)
            q = z.softmax(-1)
            mine = q.gather(1, best[:, None])[:, 0]
            s = sums[layer]
            s["top1"] = s.get("top1", 0.0) + float((z.argmax(-1) == best).sum())
            s["p_target_token"] = s.get("p_target_token", 0.0) + float(mine.sum())
            s["kl"] = s.get("kl", 0.0) + float(kl(p, z)) * len(best)
            for t in THRESHOLDS:
                s[f"below_{t}"] = s.get(f"below_{t}", 0.0) + float((mine < t).sum())
    return {str(layer): {k: round(v / n, 4) for k, v in s.items()} | {"positions": n} for layer, s in sums.items()}


def train(args: argparse.Namespace) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    teacher = Teacher(args.target)
    hidden = teacher.rows.shape[1]
    torch.manual_seed(args.seed)
    pruners = {layer: TreePruner(hidden, layer) for layer in args.layers}
    params: list[torch.Tensor] = [p for m in pruners.values() for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=args.lr)
    ckpt = Checkpoint(args.out / "checkpoint.pt")
    state: dict = {"step": 0, "seconds": 0.0}
    saved = ckpt.load()
    if saved:
        for layer, m in pruners.items():
            m.load_state_dict(saved["pruners"][str(layer)])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]
    seqs = read_sequences(args.data, args.max_len, args.max_prompt)

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        rng = random.Random(args.seed * 1_000_003 + step)  # the batch is a function of the step: resumable
        total = torch.zeros(())
        for ids, start in rng.sample(seqs, args.batch):
            hs, p = teacher.features(ids, start, args.layers)
            for layer, m in pruners.items():
                total = total + kl(p, m.early_logits(hs[layer], teacher.norm, teacher.rows))
        loss = total / (args.batch * len(pruners))
        return loss, {"loss": float(loss.detach())}

    def save(step: int) -> None:
        ckpt.save(
            {
                "pruners": {str(k): m.state_dict() for k, m in pruners.items()},
                "optimizer": opt.state_dict(),
                "state": state,
            }
        )

    log = CsvLog(args.out / "log.csv", ["step", "loss"], state["step"])
    run(
        LoopConfig(steps=args.steps, save_every=25),
        opt,
        params,
        loss_at,
        state,
        after_step=lambda step, stats: {"step": step, "loss": round(stats["loss"], 5)},
        log=log,
        save=save,
        progress=None if args.quiet else "pruning",
    )
    log.close()
    held = read_sequences(args.heldout, args.max_len, args.max_prompt)[: args.eval_sequences]
    lens = {layer: TreePruner(hidden, layer) for layer in args.layers}  # U = 0: the logit lens
    report = {
        "steps": state["step"],
        "logit_lens": evaluate(teacher, lens, held),
        "trained": evaluate(teacher, pruners, held),
    }
    (args.out / "heldout.json").write_text(json.dumps(report, indent=1))
    return report


def attach(args: argparse.Namespace) -> None:
    """Write the trained pruner of layer `args.attach` into the adapter file (tensors `pruner.*`,
    metadata `pruner_layer`), keeping the adapter's own tensors and metadata."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    saved = Checkpoint(args.out / "checkpoint.pt").load()
    if saved is None or str(args.attach) not in saved["pruners"]:
        raise SystemExit(f"no trained pruner for layer {args.attach} in {args.out}")
    with safe_open(str(args.adapter), framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("pruner.")}  # noqa: SIM118 (safe_open is not a mapping)
    for name, t in saved["pruners"][str(args.attach)].items():
        tensors[f"pruner.{name}"] = t.contiguous()
    meta["pruner_layer"] = str(args.attach)
    save_file(tensors, str(args.adapter), metadata=meta)
    print(f"attached layer {args.attach}'s pruner to {args.adapter}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--data", type=Path, default=Path("runs/corpus/teacher_greedy.jsonl"))
    ap.add_argument("--heldout", type=Path, default=Path("runs/corpus/teacher_greedy_val.jsonl"))
    ap.add_argument("--layers", type=lambda s: [int(x) for x in s.split(",")], default=[8, 14, 20, 23, 26])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=4, help="sequences a step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-len", type=int, default=192)
    ap.add_argument("--max-prompt", type=int, default=128)
    ap.add_argument("--eval-sequences", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/pruning"))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--attach", type=int, help="write this layer's trained pruner into --adapter instead of training")
    ap.add_argument("--adapter", type=Path, default=Path("assets/streaming/smollm2-135m-instruct.safetensors"))
    args = ap.parse_args(argv)
    if args.attach is not None:
        attach(args)
        return 0
    print(json.dumps(train(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
