"""The EAGLE head (EAGLE-1, Li et al. 2024, section 3): one decoder layer of the target's width.

Notation: x_t the token at position t, f_t the target's feature there (the hidden state its LM head
reads: the last layer's output after the final norm, `hidden_states[num_layers]`), e(x) the target's
token embedding. The head's entry at position t reads [e(x_{t+1}); f_t] and predicts f̂_{t+1}; the
target's own LM head, restricted to the K frequent tokens `vocab_ids`, turns f̂_{t+1} into the draft
distribution of x_{t+2}. Embedding and LM head are the target's (not saved with the head).

    fc [2H -> H] -> decoder layer (initialised from the target's top layer) -> RMSNorm (the target's final norm)

A file holds fc, the layer, the norm and `vocab_ids` in float16 (~8 MB for SmolLM2-135M), tagged
with its target's fingerprint.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from specviz.models import streaming as msa
from specviz.models.devices import input_embeddings, output_embeddings
from specviz.models.shards import load_shards
from specviz.paths import ASSETS

if TYPE_CHECKING:
    from transformers import Cache

FREQUENT_DRAFT = ASSETS / "drafts" / "smollm2-135m-draft-v2"  # the draft v2, whose head scores its 8k frequent tokens


def head_config(target_config: PretrainedConfig) -> LlamaConfig:
    """The target's config with one layer (the head's own attention cache has one layer)."""
    if not isinstance(target_config, LlamaConfig):
        raise ValueError(f"EAGLE heads here are built for Llama-architecture targets, not {target_config.model_type}")
    cfg = copy.deepcopy(target_config)
    cfg.num_hidden_layers = 1
    cfg._attn_implementation = "sdpa"  # an additive 4D mask (tree, chain) works there
    return cfg


class EagleHead(nn.Module):
    """f̂_{t+1} = norm(layer(fc([e(x_{t+1}); f_t]))), in the target's feature space."""

    vocab_ids: torch.Tensor  # [K] the token ids the draft may propose (a buffer)
    lm_rows: torch.Tensor  # [K, H] the target's LM head rows of `vocab_ids` (a buffer, not saved)

    def __init__(self, config: LlamaConfig, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.config = config
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)  # [e(x_{t+1}); f_t] -> the layer's input
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)  # f̂ in the post-norm space of f
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("vocab_ids", vocab_ids.long())
        self.register_buffer("lm_rows", torch.zeros(len(vocab_ids), hidden), persistent=False)

    def forward(
        self,
        embeds: torch.Tensor,
        feats: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        cache: Cache | None = None,
    ) -> torch.Tensor:
        """f̂ [B, T, H] from e(x_{t+1}) [B, T, H] and f_t [B, T, H] at `positions` [B, T] (t); `mask`:
        additive [B, 1, T, S] over the S = cached + T entries; `cache`: a DynamicCache the entries join."""
        x = self.fc(torch.cat([embeds, feats], dim=-1))  # [B, T, H]
        x = self.layer(
            x,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=cache is not None,
            position_embeddings=self.rotary(x, positions),
        )
        return self.norm(x)

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        """The target's LM head over the K frequent tokens: [.., H] -> [.., K]."""
        return feats @ self.lm_rows.T

    def attach(self, target: PreTrainedModel) -> EagleHead:
        """Copy the target's LM head rows of `vocab_ids` (the head shares the target's head)."""
        table = output_embeddings(target).detach()  # [V, H]
        rows = table[self.vocab_ids.to(table.device)]  # [K, H]
        self.lm_rows = rows.to(self.fc.weight.device, self.fc.weight.dtype)
        return self


def frequent_tokens(vocab: int) -> torch.Tensor:
    """The draft v2's frequent-token set (8k ids) when it fits this vocabulary, else every id."""
    config = FREQUENT_DRAFT / "config.json"
    if config.is_file() and json.loads(config.read_text()).get("vocab_size") == vocab:
        return load_shards(FREQUENT_DRAFT)["lm_head.vocab_ids"].long()
    return torch.arange(vocab)


def from_target(target: PreTrainedModel, vocab_ids: torch.Tensor | None = None) -> EagleHead:
    """A head initialised from the target: its top layer, its final norm, fc = [I, I] (the sum of
    e(x_{t+1}) and f_t); on the target's device and dtype."""
    weight = input_embeddings(target)
    ids = vocab_ids if vocab_ids is not None else frequent_tokens(weight.shape[0])
    head = EagleHead(head_config(target.config), ids)
    decoder = target.get_decoder()  # a Llama-family model: its layers and final norm
    head.layer.load_state_dict(decoder.get_submodule(f"layers.{target.config.num_hidden_layers - 1}").state_dict())
    head.norm.load_state_dict(decoder.get_submodule("norm").state_dict())
    hidden = target.config.hidden_size
    with torch.no_grad():
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.eye(hidden)], dim=1))
    return head.to(weight.device, weight.dtype).attach(target)


def save_head(head: EagleHead, target: PreTrainedModel, path: Path, meta: dict[str, str] | None = None) -> None:
    """The head's weights in float16 with the target's fingerprint (and `meta`) in the file's metadata."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()}
    state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    tags = {"target": json.dumps(msa.fingerprint(target)), **(meta or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=tags)


def load_head(target: PreTrainedModel, path: Path) -> EagleHead:
    """A head saved by `save_head` for this target, on the target's device and dtype."""
    from safetensors.torch import load_file

    if not msa.trained_for(msa.read_adapter_meta(path), target):
        raise ValueError(f"the EAGLE head {path} was trained for another target")
    state = load_file(str(path))
    head = EagleHead(head_config(target.config), state["vocab_ids"])
    head.load_state_dict(state)
    weight = input_embeddings(target)
    return head.to(weight.device, weight.dtype).attach(target)
