"""Timing real forward passes to calibrate the roofline: forward time vs tokens per sequence S for a
few batch sizes B over a fixed context L. The only part of `specviz.cost` that runs models."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from transformers import PreTrainedModel

from specviz.cost.shapes import ModelShape
from specviz.models.cpu import prepack_linears
from specviz.models.devices import moved
from specviz.models.kv import BatchedLM


@dataclass(frozen=True)
class ForwardTiming:
    batch_size: int  # B sequences in the forward pass
    n_tokens: int  # S new tokens per sequence
    context_len: int  # L tokens already in each sequence's KV cache
    seconds: float  # median wall time of one forward pass
    samples: tuple[float, ...]  # every timed repeat, seconds

    def as_dict(self) -> dict:
        return {**asdict(self), "samples": list(self.samples)}


def random_model(shape: ModelShape, seed: int = 0) -> PreTrainedModel:
    """A Llama with `shape` and random weights: it costs the same per forward as the trained model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        tie_word_embeddings=shape.tied_embeddings,
        max_position_embeddings=8192,
    )
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[shape.dtype]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model = moved(model, dtype=dtype).eval()
    prepack_linears(model)  # as a loaded pair's (float32 on a CPU): the eager forward the races run
    return model


@torch.inference_mode()
def measure_forward_times(
    model: PreTrainedModel,
    batch_sizes: Sequence[int] = (1, 4, 16),
    n_tokens: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    context_len: int = 256,
    repeats: int = 3,
    seed: int = 0,
    progress: bool = False,
) -> list[ForwardTiming]:
    """Median time of one forward pass of [B, S] new tokens over a KV cache of L tokens per sequence.

    Each B prefills its cache once; every timed pass appends S tokens and is rolled back after, so
    all passes see exactly L cached tokens. One untimed pass per (B, S) first (allocator warm-up).
    Repeats sweep the whole grid in turn (not one point at a time), so a burst of load from other
    processes spreads over many points instead of spoiling one. Logits are kept for all S
    positions, as verification needs.
    """
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    sync = torch.cuda.synchronize if next(model.parameters()).is_cuda else (lambda: None)
    caches = {}
    for B in batch_sizes:
        caches[B] = BatchedLM(model)
        if context_len:
            caches[B].forward(torch.randint(vocab, (B, context_len), generator=gen))
    grid = [(B, S) for B in batch_sizes for S in n_tokens]
    ids = {(B, S): torch.randint(vocab, (B, S), generator=gen) for B, S in grid}
    samples: dict[tuple[int, int], list[float]] = {key: [] for key in grid}
    for r in range(repeats + 1):  # r = 0: the warm-up sweep
        for B, S in grid[r % len(grid) :] + grid[: r % len(grid)]:  # a different starting point each sweep
            lm = caches[B]
            sync()
            t0 = time.perf_counter()
            lm.forward(ids[B, S], n_logits=S)
            sync()
            if r:
                samples[B, S].append(time.perf_counter() - t0)
            lm.truncate(context_len)
    out = [ForwardTiming(B, S, context_len, statistics.median(samples[B, S]), tuple(samples[B, S])) for B, S in grid]
    if progress:
        for t in out:
            print(f"  B={t.batch_size:3d} S={t.n_tokens:3d} L={context_len}: {t.seconds * 1e3:8.1f} ms", flush=True)
    return out
