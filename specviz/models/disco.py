"""DISCO's classifier (Mamou et al. 2024): should the draft keep drafting after token i?

C_i = FFN(concat(top-10 of q_i, H(q_i), i)), a 2-layer feed-forward net on 12 numbers computed from
the draft's own distribution q_i, so a decision costs a top-k, an entropy and two tiny matmuls next
to a whole draft forward pass. The score is the probability that x_i will be accepted; drafting
continues while C_i >= tau and fewer than SL_max tokens were drafted.

Weights, the tuned tau / SL_max and a short card live in one safetensors file per model pair under
`assets/disco/` (trained by `python -m specviz.train.disco`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from specviz.errors import SpecvizError
from specviz.models.devices import HOST
from specviz.paths import ASSETS

TOP_K = 10  # top probabilities of q_i used as features
N_FEATURES = TOP_K + 2  # top-10 of q_i, entropy H(q_i) in nats, position i in the draft (0-based)
ASSET_DIR = ASSETS / "disco"


def draft_features(q: torch.Tensor, position: torch.Tensor | int) -> torch.Tensor:
    """[..., V] draft probabilities and the 0-based index of each drafted token -> [..., 12] features."""
    q = q.float()
    top = torch.topk(q, TOP_K, dim=-1).values  # [..., 10], descending
    entropy = -(q * q.clamp_min(1e-30).log()).sum(dim=-1, keepdim=True)  # [..., 1]; 0 log 0 = 0 (2x faster than entr)
    pos = (
        torch.as_tensor(position, dtype=torch.float32, device=q.device).expand(top.shape[:-1]).unsqueeze(-1)
    )  # [..., 1]
    return torch.cat([top, entropy, pos], dim=-1)


class DiscoClassifier(torch.nn.Module):
    """Standardise the 12 features, then Linear -> ReLU -> Linear -> one logit (accept vs reject)."""

    mean: torch.Tensor  # [12] feature standardisation, from training data (buffers, registered in __init__)
    std: torch.Tensor  # [12]

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()  # on the host: one classifier serves every pair, on any device (see `score`)
        self.register_buffer("mean", torch.zeros(N_FEATURES, device=HOST))
        self.register_buffer("std", torch.ones(N_FEATURES, device=HOST))
        self.fc1 = torch.nn.Linear(N_FEATURES, hidden, device=HOST)
        self.fc2 = torch.nn.Linear(hidden, 1, device=HOST)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """[N, 12] features -> [N] logits of P(draft token accepted)."""
        x = (features - self.mean) / self.std
        return self.fc2(torch.relu(self.fc1(x))).squeeze(-1)

    @torch.inference_mode()
    def score(self, q_i: torch.Tensor, i: int) -> float:
        """C_i for one drafted token: P(accepted) from its draft distribution q_i [V] and index i.
        The features are reduced where q_i lives; their 12 numbers then come to the classifier (it is
        shared by every pair, on the CPU), in the one transfer that reading the score needs anyway."""
        features = draft_features(q_i, i).unsqueeze(0).to(self.mean.device)  # [1, 12]
        return float(torch.sigmoid(self(features))[0])


@dataclass
class DiscoModel:
    """A trained classifier with the operating point tuned for it (the shipped asset)."""

    classifier: DiscoClassifier
    threshold: float  # tau: keep drafting while C_i >= tau
    max_speculation_length: int  # SL_max: never draft more than this many tokens per iteration
    card: dict[str, Any] = field(default_factory=dict)  # how it was trained and what it scored (plain values)
    name: str = ""  # which file it came from

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.classifier.state_dict().items()}
        meta = {
            "threshold": repr(self.threshold),
            "max_speculation_length": str(self.max_speculation_length),
            "hidden": str(self.classifier.fc1.out_features),
            "card": json.dumps(self.card),
        }
        save_file(tensors, str(path), metadata=meta)


def load_disco(path: Path | str) -> DiscoModel:
    """Read a classifier file written by `DiscoModel.save`."""
    path = Path(path)
    if not path.is_file():
        raise SpecvizError(f"no DISCO classifier at {path}: train one with `python -m specviz.train.disco`")
    return _load_disco(str(path.resolve()))


@lru_cache(maxsize=8)
def _load_disco(path: str) -> DiscoModel:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    classifier = DiscoClassifier(hidden=int(meta.get("hidden", 32)))
    classifier.load_state_dict(load_file(path))
    classifier.eval()
    return DiscoModel(
        classifier=classifier,
        threshold=float(meta["threshold"]),
        max_speculation_length=int(meta["max_speculation_length"]),
        card=json.loads(meta.get("card", "{}")),
        name=Path(path).stem,
    )


def asset_name(pair_name: str) -> str:
    """File stem of a pair's classifier: 'default', 'tiny-perturbed', 'smollm2-1.7b-135m'..."""
    return re.sub(r"[^a-z0-9.]+", "-", pair_name.lower()).strip("-")


FALLBACK = ("default", "tiny-perturbed")  # borrowed, in this order, by pairs without their own classifier


def classifier_for(pair_name: str) -> DiscoModel:
    """The pair's own shipped classifier, else a borrowed one (its features do not depend on the
    vocabulary, so it runs on any pair, less well tuned); `card['borrowed']` says so."""
    own = ASSET_DIR / f"{asset_name(pair_name)}.safetensors"
    if own.is_file():
        return load_disco(own)
    for stem in FALLBACK:
        path = ASSET_DIR / f"{stem}.safetensors"
        if path.is_file():
            model = load_disco(path)
            return DiscoModel(
                model.classifier,
                model.threshold,
                model.max_speculation_length,
                {**model.card, "borrowed": True},
                model.name,
            )
    raise SpecvizError(f"no DISCO classifier shipped in {ASSET_DIR}: train one with `python -m specviz.train.disco`")
