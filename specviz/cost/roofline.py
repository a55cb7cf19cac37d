"""Roofline cost of one forward pass, per operator, for batch B, S new tokens per sequence, context L.

Following SSSD (section 3.2, Table 1): every operator is either compute-bound (FLOPs / peak) or
memory-bound (bytes / bandwidth), and

    T_forward(B, S, L) = sum_ops max(FLOPs_op / peak, bytes_op / bandwidth) + t_overhead.

(On hardware that does not overlap compute with memory traffic, `Hardware.overlap = False`, the
max becomes a sum; the regimes and the knee are the same. Between the two, a kernel near the ridge
(compute time c close to memory time m) overlaps them only in part: with a finite
`Hardware.overlap_exponent` p an operator takes (c^p + m^p)^(1/p), which is max(c, m) far from the
ridge, 2^(1/p) max(c, m) on it, the sum at p = 1 and the max as p grows.)

At B*S = 1 the weight reads dominate and extra tokens are almost free (memory-bound); once B*S
passes the ridge point peak/bandwidth x bytes-per-param / 2 the matrix multiplies become
compute-bound and every extra token costs its full FLOPs. Speculation lives below that knee.

Counting conventions (kept simple and stated, so tests can count by hand). With T = B*S tokens,
w = bytes per parameter (also per activation and KV element), d = head_dim, h = hidden:
- each projection is one fused matrix that reads its weights once, its input once and writes its
  output once (Q,K,V fused; gate+up fused);
- attention reads the whole KV cache of each sequence, (L+S) positions, writes the S new
  positions' keys and values, reads Q and writes its output; FLOPs count QK^T and AV over the
  causal pairs S*L + S(S+1)/2;
- the LM head computes `n_logits` rows per sequence (default S, what verification needs);
- norms, rotary embeddings, softmax and the embedding lookup are ignored (small).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from specviz.cost.hardware import Hardware
from specviz.cost.shapes import ModelShape

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class OperatorCost:
    name: str  # qkv_proj | attention | o_proj | mlp | lm_head
    flops: float  # over all layers (lm_head: once)
    bytes: float  # read + written, over all layers

    def compute_s(self, hw: Hardware, dtype: str) -> float:
        return self.flops / hw.flops_per_s(dtype)

    def memory_s(self, hw: Hardware) -> float:
        return self.bytes / hw.memory_bandwidth

    def time_s(self, hw: Hardware, dtype: str) -> float:
        c, m = self.compute_s(hw, dtype), self.memory_s(hw)
        return overlap_time(c, m, hw.overlap_exponent) if hw.overlap else c + m

    def bound(self, hw: Hardware, dtype: str) -> str:
        return "compute" if self.compute_s(hw, dtype) >= self.memory_s(hw) else "memory"


@overload
def overlap_time(c: float, m: float, p: float = math.inf) -> float: ...


@overload
def overlap_time(c: np.ndarray, m: np.ndarray, p: float | np.ndarray = math.inf) -> np.ndarray: ...


def overlap_time(c: float | np.ndarray, m: float | np.ndarray, p: float | np.ndarray = math.inf) -> float | np.ndarray:
    """(c^p + m^p)^(1/p): an operator's time from its compute time c and memory time m, p = inf:
    max(c, m). Written as hi · (1 + (lo/hi)^p)^(1/p) so no power underflows; plain arithmetic, so
    c, m and p may be floats or numpy arrays alike (the published-rows fit evaluates grids)."""
    hi, lo = (c + m + abs(c - m)) / 2, (c + m - abs(c - m)) / 2  # max(c, m), min(c, m)
    return hi * (1.0 + (lo / (hi + 1e-300)) ** p) ** (1.0 / p)


def operator_costs(
    shape: ModelShape, batch_size: int = 1, n_tokens: int = 1, context_len: int = 0, n_logits: int | None = None
) -> list[OperatorCost]:
    """FLOPs and bytes of each operator of one forward pass (SSSD Table 1, for any shape)."""
    B, S, L, N = batch_size, n_tokens, context_len, shape.n_layers
    h, d, ffn, V, m = shape.hidden_size, shape.head_dim, shape.intermediate_size, shape.vocab_size, shape.mlp_matrices
    nq, nkv, w = shape.n_heads, shape.n_kv_heads, shape.bytes_per_param
    T = B * S  # tokens in the forward pass
    R = B * (S if n_logits is None else n_logits)  # LM-head rows
    qkv = h * (nq + 2 * nkv) * d  # fused QKV weight elements
    pairs = B * (S * L + S * (S + 1) // 2)  # (query, key) pairs under the causal mask
    kv_width = 2 * nkv * d  # K and V elements per position
    return [
        OperatorCost("qkv_proj", N * 2 * T * qkv, N * w * (qkv + T * (h + (nq + 2 * nkv) * d))),
        OperatorCost(
            "attention",
            N * 4 * nq * d * pairs,  # QK^T and AV: 2 FLOPs per multiply-add each
            N * w * (B * kv_width * (L + S) + T * kv_width + 2 * T * nq * d),
        ),
        OperatorCost("o_proj", N * 2 * T * nq * d * h, N * w * (nq * d * h + T * (nq * d + h))),
        OperatorCost("mlp", N * 2 * T * m * h * ffn, N * w * (m * h * ffn + T * (2 * h + m * ffn))),
        OperatorCost("lm_head", 2 * R * h * V, w * (h * V + R * (h + V))),
    ]


def eager_costs(
    shape: ModelShape,
    batch_size: int = 1,
    n_tokens: int = 1,
    context_len: int = 0,
    attention: bool = True,
    growing_cache: bool = True,
) -> list[OperatorCost]:
    """Memory traffic of an eager (unfused) engine beyond the fused operators above.

    - attention scores: QKᵀ writes B·n_q·S·(L+S) scores, the softmax reads them and writes them in
      float32 (Hugging Face upcasts), a cast back and AV read them again: (4w + 8) bytes a score;
    - the cache's growth: a cache grown by concatenation (DynamicCache's torch.cat) reads and
      rewrites every layer's whole cache each forward: 2·B·(2·n_kv·d)·L·w bytes a layer.
    A fused attention kernel (FlashAttention, SDPA) and a preallocated cache remove them.
    """
    B, S, L, N, w = batch_size, n_tokens, context_len, shape.n_layers, shape.bytes_per_param
    ops = []
    if attention:
        ops.append(OperatorCost("attention_scores", 0.0, N * B * shape.n_heads * S * (L + S) * (4 * w + 8)))
    if growing_cache:
        ops.append(OperatorCost("cache_growth", 0.0, N * 2 * B * 2 * shape.n_kv_heads * shape.head_dim * L * w))
    return ops


def engine_operator_costs(
    shape: ModelShape,
    hardware: Hardware,
    batch_size: int = 1,
    n_tokens: int = 1,
    context_len: int = 0,
    n_logits: int | None = None,
) -> list[OperatorCost]:
    """The operators of one forward pass as `hardware`'s engine runs them: the fused ones, plus an
    eager engine's extra memory traffic."""
    extra = eager_costs(shape, batch_size, n_tokens, context_len, hardware.eager_attention, hardware.growing_cache)
    return operator_costs(shape, batch_size, n_tokens, context_len, n_logits) + extra


def forward_time(
    shape: ModelShape,
    hardware: Hardware,
    batch_size: int = 1,
    n_tokens: int = 1,
    context_len: int = 0,
    n_logits: int | None = None,
    overhead: bool = True,
) -> float:
    """Seconds for one forward pass: sum over operators of max(compute, memory) + per-forward
    overhead; on an eager engine (`hardware.eager_attention`, `hardware.growing_cache`) its extra
    memory traffic too."""
    if overhead:
        ops = engine_operator_costs(shape, hardware, batch_size, n_tokens, context_len, n_logits)
    else:
        ops = operator_costs(shape, batch_size, n_tokens, context_len, n_logits)
    t = sum(op.time_s(hardware, shape.dtype) for op in ops)
    return t + (hardware.overhead(shape.n_layers) if overhead else 0.0)


def forward_breakdown(
    shape: ModelShape, hardware: Hardware, batch_size: int = 1, n_tokens: int = 1, context_len: int = 0
) -> list[dict]:
    """Per operator: FLOPs, bytes, compute and memory seconds, which one binds; plain dicts for tables."""
    rows = [
        {
            "operator": op.name,
            "flops": op.flops,
            "bytes": op.bytes,
            "compute_s": op.compute_s(hardware, shape.dtype),
            "memory_s": op.memory_s(hardware),
            "time_s": op.time_s(hardware, shape.dtype),
            "bound": op.bound(hardware, shape.dtype),
        }
        for op in engine_operator_costs(shape, hardware, batch_size, n_tokens, context_len)
    ]
    rows.append(
        {
            "operator": "overhead",
            "flops": 0.0,
            "bytes": 0.0,
            "compute_s": 0.0,
            "memory_s": 0.0,
            "time_s": hardware.overhead(shape.n_layers),
            "bound": "overhead",
        }
    )
    return rows


def verify_cost_ratio(
    shape: ModelShape, hardware: Hardware, gamma: int, batch_size: int = 1, context_len: int = 0
) -> float:
    """T(gamma+1) / T(1): the cost of a verification pass over gamma drafts relative to one decoding step."""
    one = forward_time(shape, hardware, batch_size, 1, context_len)
    return forward_time(shape, hardware, batch_size, gamma + 1, context_len) / one


def speculation_budget(
    shape: ModelShape,
    hardware: Hardware,
    batch_size: int = 1,
    context_len: int = 0,
    tolerance: float = 0.1,
    max_gamma: int = 256,
) -> int:
    """The almost-free speculation length (SSSD): the largest gamma whose verification pass
    (gamma+1 tokens per sequence, batch B) costs at most (1 + tolerance) x a plain decoding step.

    0 means even one draft token per sequence costs more than `tolerance` extra (compute-bound).
    """

    def free(gamma: int) -> bool:
        return verify_cost_ratio(shape, hardware, gamma, batch_size, context_len) <= 1.0 + tolerance

    if free(max_gamma):
        return max_gamma
    lo, hi = 0, max_gamma  # free(lo) (gamma = 0 costs nothing extra), not free(hi); cost grows with gamma
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if free(mid) else (lo, mid)
    return lo


def knee_tokens(
    shape: ModelShape, hardware: Hardware, batch_size: int = 1, context_len: int = 0, max_tokens: int = 1 << 16
) -> int | None:
    """Tokens per sequence S at which the forward pass turns compute-bound (total compute time >=
    total memory time, overhead aside): the knee of the cost curve. None if beyond `max_tokens`."""

    def compute_bound(s: int) -> bool:
        ops = operator_costs(shape, batch_size, s, context_len)
        return sum(o.compute_s(hardware, shape.dtype) for o in ops) >= sum(o.memory_s(hardware) for o in ops)

    if compute_bound(1):
        return 1
    if not compute_bound(max_tokens):
        return None
    lo, hi = 1, max_tokens  # compute_bound(lo) is False, compute_bound(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi


def optimal_speculation_length(
    alpha: float,
    shape: ModelShape,
    hardware: Hardware,
    batch_size: int = 1,
    context_len: int = 0,
    c: float = 0.0,
    max_gamma: int = 32,
) -> int:
    """Batch-aware γ (SSSD Fig. 2): argmax_γ E[tokens](α, γ) / (γc + T(B, γ+1) / T(B, 1)).

    c = 0 for drafts that cost nothing next to the target (prompt lookup, a datastore). As B grows
    the verification pass leaves the memory-bound regime sooner and the best γ shrinks.
    """
    from specviz.cost.formulas import optimal_gamma

    ratios = [0.0] + [verify_cost_ratio(shape, hardware, g, batch_size, context_len) for g in range(1, max_gamma + 1)]
    return optimal_gamma(alpha, c, max_gamma, verify_ratio=ratios)


def cost_curve_rows(
    shape: ModelShape,
    hardware: Hardware,
    batch_sizes: Sequence[int] = (1, 4, 16, 64),
    n_tokens: Sequence[int] = tuple(range(1, 65)),
    context_len: int = 0,
) -> list[dict]:
    """Predicted forward time per (B, S), with which regime binds (overhead aside): plot rows."""
    rows = []
    for b in batch_sizes:
        for s in n_tokens:
            ops = operator_costs(shape, b, s, context_len)
            compute = sum(o.compute_s(hardware, shape.dtype) for o in ops)
            memory = sum(o.memory_s(hardware) for o in ops)
            rows.append(
                {
                    "batch_size": b,
                    "n_tokens": s,
                    "context_len": context_len,
                    "seconds": forward_time(shape, hardware, b, s, context_len),
                    "bound": "compute" if compute >= memory else "memory",
                }
            )
    return rows


def arithmetic_intensity(shape: ModelShape, batch_size: int = 1, n_tokens: int = 1, context_len: int = 0) -> float:
    """FLOPs per byte of memory traffic of one forward pass (fused operators): below the hardware's ridge
    point the pass waits on memory, and more tokens per pass ride along on the same weight reads."""
    ops = operator_costs(shape, batch_size, n_tokens, context_len)
    return sum(o.flops for o in ops) / sum(o.bytes for o in ops)
