"""The target's step written out for Llama-family models on a CPU: specviz's fast path (issue 51).

`FastLlama` computes what `LlamaForCausalLM.forward` (and Qwen2's, which adds q|k|v biases)
computes in float32, without the generic machinery, in the style of gpt-fast's `model.py`:

    h = RMSNorm(x);  q|k|v = h W_qkv^T;  q, k = RoPE(q, k at their positions)
    keys, values = cache.append(k, v);  o = SDPA(q, keys, values, mask);  x = x + o W_o^T
    h = RMSNorm(x);  gate|up = h W_gate_up^T;  x = x + (silu(gate) * up) W_down^T

then RMSNorm and the LM head on the last `n_logits` rows. On a CPU a step's time is mostly reading
the weights, and every matrix is read through oneDNN's packed copy of it (`cpu.pack_weight`), which
serves one row and a few rows at nearly the same cost. What this saves beside transformers' eager
forward (which multiplies by the same copies) is the machinery around the matrices: q|k|v and
gate|up fused (they read the same input), RoPE from a table, no mask or cache objects, about 40 %
fewer torch calls a pass (figures: benchmarks/fast-target/README.md). The caller's cache
(`kv.StaticKV`) appends each layer's keys and values.

A row's keys and values go to the cache's next slot; its RoPE position is the caller's (a tree
node's is the prefix length plus its depth) and `allowed` says which slots each row sees (None:
causal, a chain): what a chain verification, a token tree and EAGLE's feature read-out need.
transformers still loads the model, and every other architecture, device or dtype keeps its eager
forward (`decoder` returns None there), as do models with adapters in their layers (Speculative
Streaming's LoRA'd target).
Set SPECVIZ_FAST=0 to run the eager forward everywhere.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from specviz.models.cpu import PackedLinear, pack_weight, packed_linear, version_stamp

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # decoder layers this forward computes exactly
PLAIN = (nn.Linear, PackedLinear)  # linear layers it reads the weights of (not adapters: LoRA, quantised)


class KVSlots(Protocol):
    """The cache a step writes to (`kv.StaticKV`): per layer, append [B, Hkv, T, hd] after the held
    slots and get that layer's keys and values so far; `advance` once every layer has appended."""

    length: int

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def advance(self, n: int) -> None: ...


def enabled() -> bool:
    return os.environ.get("SPECVIZ_FAST", "1") != "0" and torch.backends.mkldnn.is_available()


def supports(model: PreTrainedModel) -> bool:
    """Whether `model` is a float32 CPU Llama-family LM whose every layer this forward computes."""
    c = getattr(model, "config", None)
    if c is None or type(model).__name__ not in ARCHITECTURES or len(getattr(model, "hf_device_map", {}) or {}) > 1:
        return False
    weight = model.get_input_embeddings().get_parameter("weight")
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and getattr(c, "hidden_act", "silu") == "silu"
        and not getattr(c, "use_sliding_window", False)
        and not getattr(c, "mlp_bias", False)
        and getattr(c, "pretraining_tp", 1) == 1
        and all(type(m) in PLAIN for layer in _layers(model) for m in _linears(layer))
    )


def _layers(model: PreTrainedModel) -> list[nn.Module]:
    layers = model.get_submodule("model.layers")
    assert isinstance(layers, nn.ModuleList)  # a Llama-family model's decoder layers
    return list(layers)


def _linears(layer: nn.Module) -> list[nn.Module]:
    """q, k, v, o, gate, up, down."""
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    return [layer.get_submodule(f"self_attn.{n}") for n in names] + [
        layer.get_submodule(f"mlp.{n}") for n in ("gate_proj", "up_proj", "down_proj")
    ]


_DECODERS: weakref.WeakKeyDictionary[PreTrainedModel, tuple[tuple, FastLlama]] = weakref.WeakKeyDictionary()


def decoder(model: PreTrainedModel) -> FastLlama | None:
    """`model`'s fast forward, built at first use and kept while the model lives (made again if a
    weight changed in place); None where the eager forward runs (`supports`, `enabled`)."""
    if not enabled() or not supports(model):
        return None
    stamp = tuple(version_stamp(p) for p in model.parameters())
    held = _DECODERS.get(model)
    if held is None or held[0] != stamp:
        held = (stamp, FastLlama(model))
        _DECODERS[model] = held
    return held[1]


def engine_name(model: PreTrainedModel) -> str:
    """Which forward decodes with `model`, in words for the app."""
    if enabled() and supports(model):
        return "specviz's fast Llama step (set SPECVIZ_FAST=0 for transformers' eager forward)"
    return "transformers' eager forward"


class Matrix:
    """x @ W^T (+ b) through W's oneDNN copy (`cpu.pack_weight`), made once; W itself is not kept."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.packed = pack_weight(weight)
        self.bias = None if bias is None else bias.detach()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.packed, self.bias)


def _fused(*linears: nn.Module) -> Matrix:
    """One Matrix of linears that read the same input, their rows one above the other."""
    weight = torch.cat([m.get_parameter("weight").detach() for m in linears])
    biases = [getattr(m, "bias", None) for m in linears]
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases if b is not None])
    return Matrix(weight, bias)


class Layer:
    """One decoder layer's matrices and norms."""

    def __init__(self, layer: nn.Module) -> None:
        q, k, v, o, gate, up, down = _linears(layer)
        self.qkv, self.o, self.gate_up, self.down = _fused(q, k, v), _fused(o), _fused(gate, up), _fused(down)
        self.ln1 = layer.get_parameter("input_layernorm.weight").detach()
        self.ln2 = layer.get_parameter("post_attention_layernorm.weight").detach()

    def products(self) -> tuple[Matrix, Matrix, Matrix, Matrix]:
        """q|k|v, o, gate|up, down: the matrices a pass multiplies by, in order."""
        return self.qkv, self.o, self.gate_up, self.down


class FastLlama:
    """A Llama-family LM's decoding forward over a `KVSlots` cache (see the module's docstring)."""

    def __init__(self, model: PreTrainedModel) -> None:
        c = model.config
        layers = _layers(model)
        self.n_layers, self.n_heads = c.num_hidden_layers, c.num_attention_heads
        self.n_kv = c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.scale = self.head_dim**-0.5  # Llama's and Qwen2's attention scaling
        self.width, self.eps = c.hidden_size, c.rms_norm_eps
        self.layers = [Layer(layer) for layer in layers]
        self.embed = model.get_input_embeddings().get_parameter("weight").detach()  # [V, d], shared with the model
        self.norm = model.get_parameter("model.norm.weight").detach()
        self.head = Matrix(model.get_output_embeddings().get_parameter("weight"))
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.rotary = model.get_submodule("model.rotary_emb")  # transformers' own: every rope type and its scaling
        self.cos = self.sin = torch.empty(0, self.head_dim, device=self.device)  # [P, hd] by position, grown by `rope`

    def rope(self, end: int) -> None:
        """The RoPE table for positions 0..end-1 (doubling)."""
        if self.cos.shape[0] < end:
            self.cos, self.sin = rope_table(self.rotary, self.embed, max(end, 2 * self.cos.shape[0], 256))

    def step(self, ids: list[int], cache: KVSlots, n_logits: int = 1) -> torch.Tensor:
        """Append `ids` (a chain) to `cache`; logits [n_logits, V] of the last of them (`kv.LeanDecoder`)."""
        logits, _ = self.forward(torch.tensor([ids], device=self.device), cache, n_logits=n_logits)
        return logits[0]

    @torch.inference_mode()
    def forward(
        self,
        ids: torch.Tensor,
        cache: KVSlots,
        positions: list[int] | None = None,
        allowed: torch.Tensor | None = None,
        n_logits: int = 1,
        hidden_layer: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append `ids` [B, T] to `cache`; logits [B, n_logits, V] of the last rows and, with
        `hidden_layer` = l, the hidden states entering decoder layer l of every new row [B, T, d]
        (l = the number of layers: after the final norm; transformers' hidden_states[l]).

        positions: the T rows' RoPE positions, every sequence's (default: the slots the rows take, a
        chain); on the host, so that no step waits to read the device. allowed: bool [B, T, length + T],
        True where a row may attend (default: causal over the slots)."""
        B, T = ids.shape
        start = cache.length
        end = start + T if positions is None else max(positions) + 1
        self.rope(end)
        if positions is None:
            cos, sin = self.cos[start : start + T], self.sin[start : start + T]  # [T, hd]
        else:
            index = torch.tensor(positions, device=self.device)
            cos, sin = self.cos[index], self.sin[index]
        mask = None if allowed is None else allowed[:, None]  # [B, 1, T, S]
        if mask is None and T > 1 and start:
            mask = torch.ones(T, start + T, dtype=torch.bool, device=self.device).tril(start)
        causal = mask is None and T > 1  # a prompt into an empty cache
        H, Hkv, hd, d = self.n_heads, self.n_kv, self.head_dim, (self.width,)
        x = F.embedding(ids, self.embed)  # [B, T, d] the residual stream
        hidden = None
        for i, layer in enumerate(self.layers):
            if i == hidden_layer:
                hidden = x
            h = F.rms_norm(x, d, layer.ln1, self.eps)
            q, k, v = layer.qkv(h).view(B, T, H + 2 * Hkv, hd).transpose(1, 2).split([H, Hkv, Hkv], dim=1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # [B, H, T, hd], [B, Hkv, T, hd]
            keys, values = cache.append(i, k, v)  # [B, Hkv, start + T, hd]
            o = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, is_causal=causal, scale=self.scale, enable_gqa=Hkv != H
            )  # [B, H, T, hd]
            x = x + layer.o(o.transpose(1, 2).reshape(B, T, H * hd))
            gate, up = layer.gate_up(F.rms_norm(x, d, layer.ln2, self.eps)).chunk(2, dim=-1)  # [B, T, ffn] each
            x = x + layer.down(F.silu(gate) * up)
        cache.advance(T)
        if hidden_layer == self.n_layers:
            hidden = x = F.rms_norm(x, d, self.norm, self.eps)
            return self.head(x[:, -n_logits:]), hidden
        return self.head(F.rms_norm(x[:, -n_logits:], d, self.norm, self.eps)), hidden


def rope_table(rotary: nn.Module, like: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [size, head_dim] of positions 0..size-1 from a model's rotary embedding (transformers'
    own: every rope type, its scaling), in `like`'s dtype and on its device."""
    cos, sin = rotary(like[:1], torch.arange(size, device=like.device)[None])  # [1, size, head_dim]
    return cos[0], sin[0]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
