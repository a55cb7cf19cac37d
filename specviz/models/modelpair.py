"""What a model pair is: a target and a draft that share a tokenizer (loading lives in `pair`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers import PreTrainedModel

from specviz.errors import SpecvizError
from specviz.models.devices import input_embeddings, output_embeddings


@dataclass(frozen=True)
class ModelPair:
    name: str  # how the pair was asked for: "tiny-random", "default", a preset, or "target,draft"
    target: PreTrainedModel  # the model whose output every method must reproduce
    draft: PreTrainedModel | None  # the small model that proposes tokens (None: no draft model)
    tokenizer: Any  # shared by both models
    chat: bool  # whether text prompts get the tokenizer's chat template by default
    eos_token_ids: tuple[int, ...]  # any of these ends a run
    info: dict[str, Any] = field(default_factory=dict)  # plain facts for display: ids, device, dtype, sizes

    @property
    def device(self) -> torch.device:
        return input_embeddings(self.target).device

    @property
    def vocab_size(self) -> int:
        """Width of the target's output distribution p."""
        return output_embeddings(self.target).shape[0]

    @property
    def max_context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 2048))

    @property
    def draft_model(self) -> PreTrainedModel:
        """The draft, for a method that drafts with it (the runner refuses such a method on a pair without one)."""
        if self.draft is None:
            raise SpecvizError(f"the pair '{self.name}' has no draft model")
        return self.draft

    def with_draft(self, draft: PreTrainedModel | None, name: str | None = None) -> ModelPair:
        """The same target and tokenizer with another draft (e.g. one adapted online)."""
        return replace(self, draft=draft, name=name or self.name)


def eos_ids(model: PreTrainedModel, tokenizer: Any) -> tuple[int, ...]:
    """Every id that ends generation: the generation config's and the tokenizer's EOS."""
    ids: list[int] = []
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        ids += value if isinstance(value, list) else [value] if value is not None else []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return tuple(dict.fromkeys(ids))


def describe(
    target_id: str,
    draft_id: str | None,
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    dev: torch.device,
    dt: torch.dtype,
) -> dict[str, Any]:
    def params(m: PreTrainedModel | None) -> int:
        return sum(p.numel() for p in m.parameters()) if m is not None else 0

    return {
        "target": target_id,
        "draft": draft_id,
        "target_params": params(target),
        "draft_params": params(draft),
        "device": str(dev),
        "dtype": str(dt).removeprefix("torch."),
    }
