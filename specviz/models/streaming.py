"""Speculative Streaming (Bhendawade et al. 2024, section 3.2): one model that drafts its own future.

Multi-stream attention (MSA) in the top N_s layers of a Hugging Face Llama, reusing its weights:

- The bottom N - N_s layers run as usual. At layer N - N_s every position t gets gamma speculative
  streams, initialised as  s_j = f_eta(M_t) + P_j  (f_eta: identity plus a low-rank map; P_j: a
  learned stream-identifier embedding), j = 1..gamma.
- In each MSA layer, stream j at position t attends to the main stream's keys/values at positions
  <= t and to streams 1..j at position t, nothing else. Streams add no KV cache: the main stream
  never attends to them.
- The main stream's last layer predicts y_{t+1} (the next token); stream j predicts y_{t+1+j}.
- LoRA adapters on the top layers' q/k/v/o (and MLP) projections are trained with the streams; the
  *tuned* main stream (base model + LoRA) is the model whose output decoding reproduces. With
  `lora_main=False` the LoRA acts on the streams only: the main stream stays the original model, so
  decoding reproduces the target itself (a variant of the paper, which tunes both).

`StreamingLM.tuned` is a LlamaForCausalLM that shares every base weight with the original model
(only the top layers' projections are wrapped with LoRA), so decoding runs it through the ordinary
KV cache (`specviz.models.kv.CachedLM`) and reads that cache's keys/values to run the streams.
With zero LoRA, `tuned` computes exactly what the original model computes.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, TypeVar, cast

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

from specviz.models.devices import input_embeddings, output_embeddings
from specviz.models.kv import KVAppend
from specviz.models.tree_pruning import TreePruner

M = TypeVar("M", bound=nn.Module)


# What this module reads of a Llama-shaped causal LM (Llama, SmolLM2, Qwen2, ...): the shapes below
# are Hugging Face's attribute names, which nn.Module's typing cannot see through.
class _Attention(Protocol):
    head_dim: int
    num_key_value_groups: int
    scaling: float
    q_proj: nn.Module
    k_proj: nn.Module
    v_proj: nn.Module
    o_proj: nn.Module


class _MLP(Protocol):
    gate_proj: nn.Module
    up_proj: nn.Module
    down_proj: nn.Module

    def act_fn(self, x: torch.Tensor) -> torch.Tensor: ...


class DecoderLayer(Protocol):
    self_attn: _Attention
    mlp: _MLP

    def input_layernorm(self, x: torch.Tensor) -> torch.Tensor: ...

    def post_attention_layernorm(self, x: torch.Tensor) -> torch.Tensor: ...


class _Decoder(Protocol):
    layers: Sequence[DecoderLayer]  # an nn.ModuleList

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor: ...

    def rotary_emb(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def norm(self, x: torch.Tensor) -> torch.Tensor: ...


class _CausalLM(Protocol):
    model: _Decoder

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class StreamingConfig:
    stream_layers: int = 2  # N_s: the top layers that run multi-stream attention (and carry LoRA)
    gamma: int = 4  # speculative streams per position; stream j predicts the token j after the next one
    lora_rank: int = 8  # rank of the LoRA adapters on the top layers' projections
    lora_alpha: float = 16.0  # LoRA scale is alpha / rank
    lora_mlp: bool = True  # also adapt gate/up/down of the MLP (else attention projections only)
    eta_rank: int = 8  # rank of f_eta, the map from the main stream to the stream initialisation
    lora_main: bool = True  # the LoRA also changes the main stream (the paper); False: streams only,
    #                         the main stream stays the base model


class LoRALinear(nn.Module):
    """y = W x + (alpha / r) * B A x; B starts at zero, so a fresh adapter changes nothing.
    `forward` (the main stream) adds the LoRA only when `on_main`; `adapted` (the streams) always."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, on_main: bool = True) -> None:
        super().__init__()
        self.base = base  # shared with the original model, frozen
        dtype, device = base.weight.dtype, base.weight.device
        self.lora_A = nn.Parameter(
            torch.randn(rank, base.in_features, dtype=dtype, device=device) / math.sqrt(base.in_features)
        )
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=dtype, device=device))
        self.scale = alpha / rank
        self.on_main = on_main

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        """The LoRA's own term, (alpha / r) * B A x."""
        return F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale

    def adapted(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.delta(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adapted(x) if self.on_main else self.base(x)


def _proj(module: nn.Module, x: torch.Tensor, streams_from: int | None) -> torch.Tensor:
    """A projection of rows x [.., L, H]: rows before `streams_from` are the main stream (`module(x)`),
    rows from it on are streams (always with their LoRA); None: main stream only. Main and stream rows
    share one product with the base weight (the fused pass reads each weight once)."""
    if streams_from is None or not isinstance(module, LoRALinear):
        return module(x)
    if streams_from == 0 or module.on_main:
        return module.adapted(x)
    y = module.base(x)
    return torch.cat([y[..., :streams_from, :], y[..., streams_from:, :] + module.delta(x[..., streams_from:, :])], -2)


ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _shared_copy(model: M) -> M:
    """A structural copy of `model` whose parameters and buffers are the original tensors."""
    memo = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo)


class StreamingLM(nn.Module):
    def __init__(self, base: PreTrainedModel, cfg: StreamingConfig) -> None:
        super().__init__()
        n_layers = base.config.num_hidden_layers
        if not 1 <= cfg.stream_layers <= n_layers:
            raise ValueError(f"stream_layers must be in [1, {n_layers}], got {cfg.stream_layers}")
        self.cfg = cfg
        self.first_stream_layer = n_layers - cfg.stream_layers  # N - N_s
        self.tuned = _shared_copy(base).eval()  # the main stream: base + LoRA on the top layers
        for p in self.tuned.parameters():
            p.requires_grad_(False)
        for layer in self.layers[self.first_stream_layer :]:
            for owner, names in (
                (layer.self_attn, ATTENTION_PROJECTIONS),
                (layer.mlp, MLP_PROJECTIONS if cfg.lora_mlp else ()),
            ):
                for name in names:
                    setattr(owner, name, LoRALinear(getattr(owner, name), cfg.lora_rank, cfg.lora_alpha, cfg.lora_main))
        embeddings = input_embeddings(base)
        hidden, dtype, device = base.config.hidden_size, embeddings.dtype, embeddings.device
        # f_eta(M) = M + U V M  (low rank; U starts at zero) and P_j, one embedding per stream
        self.eta_down = nn.Linear(hidden, cfg.eta_rank, bias=False, dtype=dtype, device=device)
        self.eta_up = nn.Linear(cfg.eta_rank, hidden, bias=False, dtype=dtype, device=device)
        nn.init.zeros_(self.eta_up.weight)
        self.stream_embed = nn.Parameter(torch.randn(cfg.gamma, hidden, dtype=dtype, device=device) * 0.02)  # P_j
        self.pruner: TreePruner | None = None  # the tree-pruning layer (section 3.2.3), when the adapter has one

    # ----- pieces of one layer, written with the layer's own modules -----
    @property
    def _lm(self) -> _CausalLM:
        """The tuned model, seen through the attributes this module reads (a Llama-shaped causal LM)."""
        return cast(_CausalLM, self.tuned)

    @property
    def layers(self) -> Sequence[DecoderLayer]:
        return self._lm.model.layers

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._lm.model.rotary_emb(x, positions.unsqueeze(0))  # cos, sin: [1, L, d]

    @staticmethod
    def _qkv(
        layer: DecoderLayer,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        streams_from: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, heads, L, d], k and v [B, kv_heads, L, d], rotary applied (as the KV cache stores them).
        `streams_from`: the first row that is a stream (`_proj`)."""
        attn = layer.self_attn
        shape = (*x.shape[:-1], -1, attn.head_dim)
        q = _proj(attn.q_proj, x, streams_from).view(shape).transpose(1, 2)
        k = _proj(attn.k_proj, x, streams_from).view(shape).transpose(1, 2)
        v = _proj(attn.v_proj, x, streams_from).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *rope)
        return q, k, v

    @staticmethod
    def _finish(
        layer: DecoderLayer,
        residual: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | str,
        streams_from: int | None = None,
    ) -> torch.Tensor:
        """Attention (mask: bool, True = may attend; additive float; or "causal"), o_proj, residual, MLP block."""
        attn, mlp = layer.self_attn, layer.mlp
        k, v = repeat_kv(k, attn.num_key_value_groups), repeat_kv(v, attn.num_key_value_groups)
        if isinstance(mask, str):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.scaling)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling)
        x = residual + _proj(
            attn.o_proj, out.transpose(1, 2).reshape(*residual.shape[:-1], -1), streams_from
        )  # [B, L, H]
        y = layer.post_attention_layernorm(x)
        gate, up = _proj(mlp.gate_proj, y, streams_from), _proj(mlp.up_proj, y, streams_from)
        return x + _proj(mlp.down_proj, mlp.act_fn(gate) * up, streams_from)

    def init_streams(self, h: torch.Tensor, gamma: int | None = None) -> torch.Tensor:
        """s_j = f_eta(h) + P_j:  h [..., H] -> [..., gamma, H], streams 1..gamma (default: all the adapter's).
        Stream j sees streams 1..j only, so the first gamma streams are the same whatever follows them."""
        f = h + self.eta_up(self.eta_down(h))
        return f.unsqueeze(-2) + self.stream_embed[: self.cfg.gamma if gamma is None else gamma]

    def _stream_layer(
        self,
        layer: DecoderLayer,
        s: torch.Tensor,
        node_pos: torch.Tensor,
        main_k: torch.Tensor,
        main_v: torch.Tensor,
    ) -> torch.Tensor:
        """One MSA layer for the streams. s [B, T*gamma, H] (node-major), node_pos [T]: each node's
        position; main_k/v [B, kv_heads, S, d]: the main stream's keys/values of this layer."""
        gamma = self.cfg.gamma
        positions = (node_pos.unsqueeze(1) + torch.arange(1, gamma + 1, device=s.device)).reshape(-1)  # stream j at t+j
        q, k, v = self._qkv(layer, layer.input_layernorm(s), self._rotary(s, positions), streams_from=0)
        mask = stream_mask(node_pos, main_k.shape[-2], gamma)  # [T*gamma, S + T*gamma]
        return self._finish(
            layer, s, q, torch.cat([main_k, k], dim=2), torch.cat([main_v, v], dim=2), mask, streams_from=0
        )

    # ----- training: the whole sequence at once, main stream and streams side by side -----
    def forward(
        self, input_ids: torch.Tensor, h: torch.Tensor | None = None, nodes: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids [B, T] -> main stream's final hidden states [B, T, H] and the streams' [B, K, gamma, H]
        (both before the final norm; `logits` maps them to the vocabulary). `h`: `self.bottom(input_ids)`
        when the caller already has it (training reuses it across epochs). `nodes` [K]: the positions
        whose streams to run (default: all T; training samples some, the streams of one position do
        not depend on the others')."""
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device)
        nodes = pos if nodes is None else nodes
        x = self.bottom(input_ids) if h is None else h
        rope = self._rotary(x, pos)
        s = self.init_streams(x[:, nodes]).reshape(B, len(nodes) * self.cfg.gamma, -1)  # [B, K*gamma, H]
        for layer in self.layers[self.first_stream_layer :]:
            q, k, v = self._qkv(layer, layer.input_layernorm(x), rope)
            s = self._stream_layer(layer, s, nodes, k, v)  # reads this layer's main keys/values
            x = self._finish(layer, x, q, k, v, "causal")
        return x, s.reshape(B, len(nodes), self.cfg.gamma, -1)

    @torch.no_grad()
    def bottom(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The frozen bottom N - N_s layers (no adapters): hidden states entering layer N - N_s [B, T, H]."""
        x = self._lm.model.embed_tokens(input_ids)
        rope = self._rotary(x, torch.arange(input_ids.shape[1], device=input_ids.device))
        for layer in self.layers[: self.first_stream_layer]:
            q, k, v = self._qkv(layer, layer.input_layernorm(x), rope)
            x = self._finish(layer, x, q, k, v, "causal")
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._lm.lm_head(self._lm.model.norm(hidden))

    # ----- decoding: streams of one node, read from the main stream's KV cache -----
    @torch.inference_mode()
    def stream_logits(
        self, h: torch.Tensor, position: int, layer_kv: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Logits of the gamma streams of the node at `position`: [gamma, V].

        h [H]: the node's hidden state entering layer N - N_s; layer_kv(l) -> the cache's keys and
        values of layer l, holding exactly the main stream's positions 0..position.
        """
        node_pos = torch.tensor([position], device=h.device)
        s = self.init_streams(h.view(1, 1, -1)).reshape(1, self.cfg.gamma, -1)  # [1, gamma, H]
        for i, layer in enumerate(self.layers[self.first_stream_layer :], start=self.first_stream_layer):
            main_k, main_v = layer_kv(i)
            s = self._stream_layer(layer, s, node_pos, main_k, main_v)
        return self.logits(s[0])  # [gamma, V]

    # ----- decoding in one pass per iteration (section 3.2.2): verify a tree and run its nodes' streams -----
    @torch.inference_mode()
    def fused_tree_pass(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        append: KVAppend,
        rows: int,
        gamma: int | None = None,
        prune: Callable[[torch.Tensor], list[int]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """The forward pass that verifies one tree and speculates the next (Figure 1(b)).

        ids [1, L], positions [L], mask [1, 1, L, past + L] (additive): a tree pass's inputs
        (`CachedLM.forward_tree_by`); `append(layer, k, v)` caches the main stream's keys and values.
        The main stream of every row is the tuned model's own computation: no stream reaches it. In
        the top N_s layers each of the last `rows` rows (the last committed token, then the tree's
        nodes) carries its streams 1..gamma (the streams in use, at most the adapter's; 0: none, the
        main rows alone), batched with the main rows: stream j of the node at position p sits at p + j
        and sees what the node's main row sees (the cached prefix, the node's path from the root) and
        the node's own streams 1..j (eq. 2), never another node's rows; nothing of the streams is
        cached.

        `prune` (section 3.2.3): given the `rows` candidate rows' hidden states after
        `self.pruner.layer` layers [rows, H], the candidate rows to keep (increasing, row 0 among
        them, a kept node's parent kept); the others stop there: the layers above run without them
        (their cache entries there are zeros, which no kept row sees) and they carry no streams.

        Returns the main stream's logits of the kept candidate rows [kept, V], their streams' last
        hidden states [kept, gamma, H] (before the final norm; `stream_head` scores them) and the kept
        rows (all `rows` when nothing was pruned).
        """
        gamma = self.cfg.gamma if gamma is None else gamma
        if not 0 <= gamma <= self.cfg.gamma:
            raise ValueError(f"a fused pass runs 0 to {self.cfg.gamma} streams (the adapter's gamma), got {gamma}")
        x = self._lm.model.embed_tokens(ids)  # [1, L, H]
        H = x.shape[-1]
        rope = self._rotary(x, positions)
        kept, write = list(range(rows)), append
        prune_at = self.pruner.layer if prune is not None and self.pruner is not None else -1
        for i, layer in enumerate(self.layers[: self.first_stream_layer]):
            if i == prune_at:
                kept, x, positions, mask, write = self._prune(prune, x, positions, mask, append, rows)
                rope = self._rotary(x, positions)
            q, k, v = self._qkv(layer, layer.input_layernorm(x), rope)
            k, v = write(i, k, v)  # the cached prefix and this pass: [1, kv_heads, past + L, d]
            x = self._finish(layer, x, q, k, v, mask)
        if prune_at == self.first_stream_layer:  # the paper's place: just before the streams
            kept, x, positions, mask, write = self._prune(prune, x, positions, mask, append, rows)
        Lk, rk = x.shape[1], len(kept)  # main rows and candidate rows left
        s = self.init_streams(x[:, Lk - rk :], gamma).reshape(1, rk * gamma, H)  # s_j = f_eta(M) + P_j, node-major
        stream_pos = (positions[Lk - rk :, None] + torch.arange(1, gamma + 1, device=ids.device)).reshape(-1)
        rope = self._rotary(x, torch.cat([positions, stream_pos]))
        both = fused_mask(mask[0, 0], rk, gamma)[None, None]  # [1, 1, Lk + rk*gamma, past + L + rk*gamma]
        xs = torch.cat([x, s], dim=1)  # main rows, then stream rows: [1, Lk + rk*gamma, H]
        for i, layer in enumerate(self.layers[self.first_stream_layer :], start=self.first_stream_layer):
            q, k, v = self._qkv(layer, layer.input_layernorm(xs), rope, streams_from=Lk)
            main_k, main_v = write(i, k[:, :, :Lk], v[:, :, :Lk])  # only the main stream is cached
            k, v = torch.cat([main_k, k[:, :, Lk:]], dim=2), torch.cat([main_v, v[:, :, Lk:]], dim=2)
            xs = self._finish(layer, xs, q, k, v, both, streams_from=Lk)
        return self.logits(xs[0, Lk - rk : Lk]), xs[0, Lk:].view(rk, gamma, H), kept

    def _prune(
        self,
        prune: Callable[[torch.Tensor], list[int]] | None,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        append: KVAppend,
        rows: int,
    ) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor, KVAppend]:
        """The pruning layer: the candidate rows `prune` keeps, and the pass's rows, positions, mask
        rows and cache writer for the layers above (pruned rows' keys and values written as zeros)."""
        assert prune is not None
        L = x.shape[1]
        kept = prune(x[0, L - rows :])
        if len(kept) == rows:
            return kept, x, positions, mask, append
        main = torch.tensor([*range(L - rows), *(L - rows + r for r in kept)], device=x.device)

        def write(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            full_k, full_v = k.new_zeros(*k.shape[:2], L, k.shape[3]), v.new_zeros(*v.shape[:2], L, v.shape[3])
            full_k[:, :, main], full_v[:, :, main] = k, v
            return append(layer, full_k, full_v)

        return kept, x[:, main], positions[main], mask[:, :, main], write

    def stream_head(self, s: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The streams' logits: s [.., H] (last layer, before the final norm) -> [.., V]; with `rows`
        [K, H], the LM head's rows of K tokens (`head_rows`), -> [.., K]: a K-row product, not V."""
        if rows is None:
            return self.logits(s)
        return F.linear(self._lm.model.norm(s), rows)

    def head_rows(self, vocab_ids: torch.Tensor) -> torch.Tensor:
        """The LM head's rows of the tokens `vocab_ids` [K, H]: the head restricted to them."""
        head = self.tuned.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("a restricted stream head needs an LM head without bias")
        weight = output_embeddings(self.tuned)
        return weight[vocab_ids.to(weight.device)]  # [K, H]

    # ----- the adapter: LoRA + f_eta + P_j, saved apart from the base weights -----
    def changes_main_stream(self) -> bool:
        """Whether the main stream (the model decoding reproduces) differs from the base model."""
        return self.cfg.lora_main and any(
            bool(p.detach().any()) for n, p in self.adapter_state().items() if n.endswith("lora_B")
        )

    def adapter_state(self) -> dict[str, torch.Tensor]:
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def extra_parameters(self) -> int:
        """Parameters added to the base model (Table 1's 'extra parameters')."""
        return sum(p.numel() for p in self.adapter_state().values())

    def save_adapter(self, path: str | Path, **card: str) -> None:
        from safetensors.torch import save_file

        tensors = {n: p.detach().contiguous().cpu() for n, p in self.adapter_state().items()}
        meta = {"config": json.dumps(asdict(self.cfg)), "target": json.dumps(fingerprint(self.tuned)), **card}
        if self.pruner is not None:  # frozen, so not in adapter_state, but part of the adapter
            tensors |= {f"pruner.{n}": t.detach().contiguous().cpu() for n, t in self.pruner.state_dict().items()}
            meta["pruner_layer"] = str(self.pruner.layer)
        save_file(tensors, str(path), metadata=meta)


def stream_mask(node_pos: torch.Tensor, n_main: int, gamma: int) -> torch.Tensor:
    """Who each stream may attend to: bool [T*gamma, n_main + T*gamma], True = visible.

    Row (t, j) (node-major, j = 1..gamma) sees main-stream column m iff m <= node_pos[t], and stream
    column (t', i) iff t' == t and i <= j.
    """
    main = torch.arange(n_main, device=node_pos.device) <= node_pos.unsqueeze(1)  # [T, n_main]
    main = main.repeat_interleave(gamma, dim=0)  # [T*gamma, n_main]
    return torch.cat([main, own_streams(node_pos.shape[0], gamma, node_pos.device)], dim=1)


def own_streams(T: int, gamma: int, device: torch.device) -> torch.Tensor:
    """Bool [T*gamma, T*gamma] over T nodes' streams (node-major): stream j of a node sees that node's
    streams 1..j only."""
    node = torch.arange(T, device=device).repeat_interleave(gamma)  # [T*gamma]
    j = torch.arange(gamma, device=device).repeat(T)  # [T*gamma]
    return (node.unsqueeze(1) == node.unsqueeze(0)) & (j.unsqueeze(0) <= j.unsqueeze(1))


def fused_mask(tree_mask: torch.Tensor, rows: int, gamma: int) -> torch.Tensor:
    """The fused pass's additive mask [L + rows*gamma, C + rows*gamma] from a tree pass's [L, C]
    (0: attend, min: not): the main rows as in the tree pass and blind to every stream; stream j of the
    r-th of the last `rows` rows sees that row's columns and the row's own streams 1..j (eq. 2)."""
    L, n = tree_mask.shape[0], rows * gamma
    blocked = torch.finfo(tree_mask.dtype).min
    streams = torch.zeros(n, n, dtype=tree_mask.dtype, device=tree_mask.device).masked_fill(
        ~own_streams(rows, gamma, tree_mask.device), blocked
    )
    main_rows = torch.cat([tree_mask, tree_mask.new_full((L, n), blocked)], dim=1)
    stream_rows = torch.cat([tree_mask[L - rows :].repeat_interleave(gamma, dim=0), streams], dim=1)
    return torch.cat([main_rows, stream_rows], dim=0)


def fingerprint(model: PreTrainedModel) -> dict:
    """Which weights an adapter was trained on: shapes and a few weight values (compared with a
    tolerance, so that the same model in bfloat16 or on another device still matches)."""
    emb = input_embeddings(model)
    head = output_embeddings(model)
    probe = torch.cat([emb[:4, :8].flatten(), head[-4:, -8:].flatten()]).float().cpu()  # [64]
    return {
        "shape": list(emb.shape),
        "layers": model.config.num_hidden_layers,
        "probe": [round(v, 6) for v in probe.tolist()],
    }


def trained_for(meta: dict[str, str], model: PreTrainedModel) -> bool:
    """Whether an adapter's metadata names `model` as its target."""
    try:
        theirs = json.loads(meta.get("target", ""))
    except json.JSONDecodeError:
        return False
    mine = fingerprint(model)
    if not isinstance(theirs, dict) or theirs.get("shape") != mine["shape"] or theirs.get("layers") != mine["layers"]:
        return False
    cpu = torch.device("cpu")
    return torch.allclose(
        torch.tensor(theirs["probe"], device=cpu), torch.tensor(mine["probe"], device=cpu), rtol=2e-2, atol=1e-3
    )


def read_adapter_meta(path: str | Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_adapter(base: PreTrainedModel, path: str | Path) -> StreamingLM:
    """A StreamingLM over `base` with the adapter saved at `path` (it must have been trained on `base`)."""
    from safetensors.torch import load_file

    meta = read_adapter_meta(path)
    if not trained_for(meta, base):
        raise ValueError(f"the streaming adapter {path} was trained for another target model")
    lm = StreamingLM(base, StreamingConfig(**json.loads(meta["config"])))
    state = load_file(str(path), device=str(input_embeddings(base).device))
    missing = set(lm.adapter_state()) - set(state)
    if missing:
        raise ValueError(f"the streaming adapter {path} lacks {sorted(missing)[:3]}")
    with torch.no_grad():
        for name, p in lm.adapter_state().items():
            p.copy_(state[name].to(p.dtype))
    if "pruner_layer" in meta:
        lm.pruner = _pruner(
            lm, int(meta["pruner_layer"]), {k[7:]: t for k, t in state.items() if k.startswith("pruner.")}
        )
    return lm


def _pruner(lm: StreamingLM, layer: int, state: dict[str, torch.Tensor]) -> TreePruner:
    """The adapter's tree-pruning layer (frozen: not part of `adapter_state`)."""
    if not 1 <= layer <= lm.first_stream_layer:
        raise ValueError(f"a pruning layer sits below the stream layers (1 to {lm.first_stream_layer}), got {layer}")
    weight = lm.stream_embed
    pruner = TreePruner(
        weight.shape[1], layer, rank=state["down.weight"].shape[0], dtype=weight.dtype, device=weight.device
    )
    pruner.load_state_dict({k: t.to(weight.dtype) for k, t in state.items()})
    return pruner.requires_grad_(False)


def untrained(base: PreTrainedModel, cfg: StreamingConfig | None = None, seed: int = 0) -> StreamingLM:
    """Zero LoRA (the tuned model IS the base) and seeded random streams: drafts are guesses, the
    output is still exactly the base model's."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cfg = cfg or StreamingConfig(stream_layers=min(2, base.config.num_hidden_layers))
        return StreamingLM(base, cfg)
