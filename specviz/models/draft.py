"""The default pair's draft: a small Llama whose head covers only the K tokens its target uses most.

Why this shape (measured on the project's 2-core CPU, `assets/drafts/*/MODEL_CARD.md`): a draft pays
only if one of its tokens costs a few hundredths of a target token (c), and a full 49k-row head is
most of a small draft's weights and time. The target's answers use few distinct tokens (8k cover
~97 % of them), so the head scores only those `vocab_ids`; every other token gets logit -inf, so
q = 0 there and the draft never proposes it. Verification needs no change for that: a token with
q(x) = 0 is never drafted, and where the target's x was refused the residual max(0, p - q) equals p.

- input: a factorised embedding over the whole vocabulary, E [V, r] then a linear r -> d (ALBERT),
  so prompts with rare tokens still read well while the shipped table stays small
- body: `num_hidden_layers` Llama decoder layers of width d (Hugging Face's LlamaDecoderLayer)
- head: [K, d] onto `vocab_ids`; logits over the full vocabulary, -inf outside it

Two forward paths compute the same function (up to the rounding of int8 weights):
- `forward` is LlamaForCausalLM's (training, Hugging Face's assisted generation);
- `step` is a lean decoding pass in the style of gpt-fast over a preallocated cache
  (`specviz.models.kv.StaticKV`), with int8 weights on a CPU: there a small draft's time is the bytes
  of its matrices (measured: `benchmarks/default-pair/`), and int8 reads a quarter of float32's.
  `CachedLM` uses it, so everything that drafts or scores as the draft goes through it.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedConfig

from specviz.models.cpu import WeightsStamp
from specviz.models.fast import rope_table, rotate_half
from specviz.models.kv import StaticKV


class FactorisedEmbedding(nn.Module):
    """ids -> E[ids] @ up: [.., d]. E [V, r] holds every token; `up` lifts it to the model width."""

    def __init__(self, vocab: int, rank: int, hidden: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, rank)  # E: [V, r]
        self.up = nn.Linear(rank, hidden, bias=False)  # [r] -> [d]

    @property
    def weight(self) -> torch.Tensor:
        """The table (callers read its device and dtype, as of an nn.Embedding)."""
        return self.table.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.up(self.table(ids))


class ReducedHead(nn.Module):
    """[.., d] -> logits [.., V]: a linear map onto the K token ids in `vocab_ids`, -inf elsewhere."""

    vocab_ids: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, hidden: int, vocab_ids: torch.Tensor, vocab: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, len(vocab_ids), bias=False)  # [d] -> [K]
        self.register_buffer("vocab_ids", vocab_ids.long())  # [K] target ids, in head order
        self.vocab = vocab

    @property
    def weight(self) -> torch.Tensor:
        return self.proj.weight  # [K, d]

    def reduced(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the K head tokens only: [.., K] (what training fits)."""
        return self.proj(hidden)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.widen(self.proj(hidden))

    def widen(self, small: torch.Tensor) -> torch.Tensor:
        """Head logits [.., K] -> logits over the whole vocabulary [.., V], -inf outside the head."""
        out = small.new_full((*small.shape[:-1], self.vocab), float("-inf"))  # [.., V]
        return out.index_copy_(-1, self.vocab_ids, small)

    def index_of(self) -> torch.Tensor:
        """[V] position of each target id in the head (-1: not in it)."""
        index = torch.full((self.vocab,), -1, dtype=torch.long, device=self.vocab_ids.device)
        index[self.vocab_ids] = torch.arange(len(self.vocab_ids), device=self.vocab_ids.device)
        return index


def reduced_config(
    target_config: PreTrainedConfig,
    *,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    head_vocab: int,
    embed_rank: int,
) -> LlamaConfig:
    """A draft config on the target's tokenizer, special tokens and RoPE; the shape given."""
    t = target_config
    rope = getattr(t, "rope_parameters", None) or {
        "rope_type": "default",
        "rope_theta": getattr(t, "rope_theta", 10000.0),
    }
    # transformers' configs take extra keyword arguments (wrap_init_to_accept_kwargs); their dataclass
    # signature, which mypy reads, does not show it.
    return LlamaConfig(  # type: ignore[call-arg]  # the stub hides **kwargs; head_vocab, embed_rank are extra
        vocab_size=t.vocab_size,  # the target's: logits and input ids live in its vocabulary
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=getattr(t, "max_position_embeddings", 2048),
        rope_parameters=dict(rope),
        rms_norm_eps=getattr(t, "rms_norm_eps", 1e-5),
        tie_word_embeddings=False,
        bos_token_id=getattr(t, "bos_token_id", None),
        eos_token_id=getattr(t, "eos_token_id", None),
        pad_token_id=getattr(t, "pad_token_id", None),
        initializer_range=0.02,
        head_vocab=head_vocab,  # K: tokens the head scores
        embed_rank=embed_rank,  # r: width of the factorised input table
    )


def is_reduced(config: PreTrainedConfig) -> bool:
    return getattr(config, "head_vocab", None) is not None


class ReducedVocabDraft(LlamaForCausalLM):
    """LlamaForCausalLM with a factorised input embedding and a head over K tokens (see the module doc)."""

    # Nothing tied: the factorised table is not the head. (transformers reads this class setting from the
    # class but declares it without ClassVar, which mypy then takes for an instance variable.)
    _tied_weights_keys: ClassVar[dict[str, str]] = {}  # type: ignore[misc]  # transformers omits ClassVar

    def __init__(self, config: LlamaConfig, vocab_ids: torch.Tensor | None = None) -> None:
        super().__init__(config)
        ids = vocab_ids if vocab_ids is not None else torch.arange(config.head_vocab)
        if len(ids) != config.head_vocab:
            raise ValueError(f"vocab_ids has {len(ids)} ids, the config says head_vocab = {config.head_vocab}")
        self.model.embed_tokens = FactorisedEmbedding(config.vocab_size, config.embed_rank, config.hidden_size)
        self.lm_head = ReducedHead(config.hidden_size, ids, config.vocab_size)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [positions, head_dim] for `step`

    def reduced_logits(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits over the head's K tokens, [B, T, K], or [N, K] at flat indices `positions` of [B, T]."""
        hidden = self.model(input_ids=input_ids, use_cache=False).last_hidden_state  # [B, T, d]
        if positions is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1])[positions]  # [N, d]
        return self.lm_head.reduced(hidden)

    # -- the lean decoding path ---------------------------------------------------------------------
    def new_cache(self, capacity: int = 512) -> StaticKV:
        c = self.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        w = self.model.embed_tokens.weight
        kv_heads = c.num_key_value_heads or c.num_attention_heads  # Llama's reading of None
        return StaticKV(c.num_hidden_layers, kv_heads, head_dim, w.dtype, w.device, capacity)

    def _rotary(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [end, head_dim] of positions 0..end-1 (Hugging Face's rotary embedding, cached)."""
        w = self.model.embed_tokens.weight
        if (
            self._rope is None
            or self._rope[0].shape[0] < end
            or (self._rope[0].dtype, self._rope[0].device) != (w.dtype, w.device)
        ):
            size = max(end, 2 * (self._rope[0].shape[0] if self._rope else 256))
            self._rope = rope_table(self.model.rotary_emb, w, size)
        return self._rope

    def _lean_weights(self) -> tuple[list[tuple], torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """The matrices `step` multiplies by, per decoder layer (q|k|v, o, gate|up, down: fused where
        they read the same input) and the head's: int8 rows with scales on a CPU, the weights
        themselves elsewhere. Made again when a weight changes (an optimiser step or `load_state_dict`
        bumps its version)."""
        if "_lean_stamp" not in self.__dict__:
            self._lean_stamp = WeightsStamp(self)
        if self._lean_stamp.changed():
            cpu = self.model.embed_tokens.weight.device.type == "cpu"

            def pack(*weights: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
                w = torch.cat([w.detach() for w in weights])  # rows of fused matrices, one above the other
                return quantize_int8(w) if cpu else w

            layers = [
                (
                    pack(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight),
                    pack(a.o_proj.weight),
                    pack(m.gate_proj.weight, m.up_proj.weight),
                    pack(m.down_proj.weight),
                )
                for a, m in ((layer.self_attn, layer.mlp) for layer in self.model.layers)
            ]
            self._lean = (layers, pack(self.lm_head.proj.weight))
        return self._lean

    @torch.inference_mode()
    def step(self, ids: list[int], cache: StaticKV, n_logits: int = 1) -> torch.Tensor:
        """Append `ids` to `cache`; logits [n_logits, V] (float32) of the last `n_logits` of them.

        `forward`'s arithmetic written out without the generic machinery (masks, cache objects,
        output classes): embedding, then per layer RMSNorm -> attention with RoPE over the cache ->
        RMSNorm -> SwiGLU MLP, each with its residual; final norm and the reduced head. On a CPU
        the matrices are int8 (per-row scales) and their inputs bfloat16 (`lean_matmul`): a small
        draft's time there is the bytes of its weights, and this reads a quarter of them."""
        c, T, start = self.config, len(ids), cache.length
        layers, head = self._lean_weights()
        dt, eps, d = self.lean_dtype(), c.rms_norm_eps, (c.hidden_size,)
        x = self.model.embed_tokens(torch.tensor(ids, device=cache.device))  # [T, d] residual stream
        cos, sin = (t[start : start + T] for t in self._rotary(start + T))  # [T, hd]
        for i, (layer, (qkv_w, o_w, gate_up_w, down_w)) in enumerate(zip(self.model.layers, layers, strict=True)):
            attn, hd = layer.self_attn, layer.self_attn.head_dim
            h = F.rms_norm(x, d, layer.input_layernorm.weight, eps).to(dt)
            qkv = lean_matmul(h, qkv_w).to(x.dtype)  # [T, (H + 2 Hkv) hd]
            kv_width = c.num_key_value_heads * hd
            q, k, v = (
                t.reshape(T, -1, hd).transpose(0, 1)
                for t in qkv.split([qkv.shape[1] - 2 * kv_width, kv_width, kv_width], -1)
            )
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # [H, T, hd], [Hkv, T, hd]
            keys, values = cache.append(i, k[None], v[None])  # [1, Hkv, start+T, hd]
            o = grouped_attention(q, keys[0], values[0], attn.scaling, start)  # [T, H*hd]
            x = x + lean_matmul(o.to(dt), o_w).to(x.dtype)
            h = F.rms_norm(x, d, layer.post_attention_layernorm.weight, eps).to(dt)
            gate, up = lean_matmul(h, gate_up_w).chunk(2, dim=-1)  # [T, ffn] each
            x = x + lean_matmul(F.silu(gate) * up, down_w).to(x.dtype)
        cache.advance(T)
        h = F.rms_norm(x[-n_logits:], d, self.model.norm.weight, eps).to(dt)  # [n, d]
        return self.lm_head.widen(lean_matmul(h, head).float())  # [n, V]

    def lean_dtype(self) -> torch.dtype:
        """The dtype of the matrix products' inputs in `step`: bfloat16 on a CPU, else the model's
        (the residual stream, norms and attention stay in the model's dtype)."""
        w = self.model.embed_tokens.weight
        return torch.bfloat16 if w.device.type == "cpu" else w.dtype


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: w ~ q * scales[:, None]; q [out, in] int8, scales [out] bfloat16."""
    w = w.detach().float()
    scales = w.abs().amax(dim=1).clamp_min(1e-8) / 127
    q = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous()
    return q, scales.to(torch.bfloat16)


def lean_matmul(x: torch.Tensor, w: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x [T, in] @ W^T for `step`: W as (int8 rows, scales) with bfloat16 inputs on a CPU (6x faster
    there than float32 for a draft's matrices, measured), or a plain weight elsewhere."""
    if isinstance(w, tuple):
        return torch._weight_int8pack_mm(x, *w)
    return F.linear(x, w.to(x.dtype))


def grouped_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, start: int
) -> torch.Tensor:
    """Causal attention of T new queries [H, T, hd] over [Hkv, S, hd] cached keys/values (S = start + T),
    query head h reading key/value head h // (H / Hkv) as Hugging Face's repeat_kv does: [T, H*hd]."""
    H, T, hd = q.shape
    Hkv, S = keys.shape[0], keys.shape[1]
    g = q.reshape(Hkv, H // Hkv * T, hd)  # [Hkv, G*T, hd]: the G query heads of a key/value head together
    scores = (g @ keys.transpose(1, 2)) * scale  # [Hkv, G*T, S]
    if T > 1:
        visible = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(start)  # [T, S]
        scores = scores.view(Hkv, -1, T, S).masked_fill(~visible, float("-inf")).view(Hkv, -1, S)
    out = torch.softmax(scores, dim=-1) @ values  # [Hkv, G*T, hd]
    return out.view(H, T, hd).transpose(0, 1).reshape(T, H * hd)
