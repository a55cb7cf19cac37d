"""Where the models run, in which dtype, and how the host waits for a device.

The dtype policy keeps the lossless promise where it can. A method is lossless against the target
in the dtype the target runs in; in bfloat16 (8 bits of mantissa) two logits are often exactly
equal, and which of two tied tokens a greedy step picks then depends on the order of the sums, which
differs between one token per pass and γ + 1 per pass (measured in `benchmarks/gpu/README.md`: in
bfloat16 most default-pair prompts differ somewhere; in float32 none). So `auto` is float32 wherever
the pair fits comfortably, and a
half-precision dtype only where it must (or where a user asks for one); the race then says so and
tells ties apart from real mismatches (`specviz.parity`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import torch

from specviz.errors import SpecvizError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT32_MOST_PARAMS = 2_500_000_000  # target + draft parameters that `auto` keeps in float32 on a GPU (~2B-class pairs)
FLOAT32_MEMORY_SHARE = 0.5  # ... if their float32 weights take at most this share of the GPU's memory
HOST = torch.device("cpu")
M = TypeVar("M", bound=torch.nn.Module)


def resolve_device(device: str = "auto") -> torch.device:
    """'auto': a CUDA GPU, else Apple's MPS, else the CPU."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return HOST
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda", "mps"):
        raise SpecvizError(f"unknown device '{device}': use cpu, cuda, cuda:N, mps or auto")
    if kind == "cuda" and not torch.cuda.is_available():
        raise SpecvizError(f"device '{device}' was asked for, but PyTorch sees no CUDA GPU here; use --device cpu")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise SpecvizError(
            f"device '{device}' was asked for, but PyTorch sees no Apple GPU (MPS) here; use --device cpu"
        )
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device, params: int | None = None) -> torch.dtype:
    """'auto': float32 on a CPU, and on a GPU wherever the pair (`params`, target + draft) fits
    comfortably; bfloat16 only for bigger pairs (a GPU without bfloat16: float16)."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise SpecvizError(f"unknown dtype '{dtype}': use one of {', '.join(DTYPES)} or auto")
        return DTYPES[dtype]
    if device.type == "cpu" or params is None or fits_in_float32(params, device):
        return torch.float32
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def fits_in_float32(params: int, device: torch.device) -> bool:
    if params > FLOAT32_MOST_PARAMS:
        return False
    if device.type != "cuda":
        return True
    try:
        total = torch.cuda.get_device_properties(device).total_memory
    except (RuntimeError, AssertionError):  # no real GPU in this process yet (ZeroGPU's main process): by size alone
        return True
    return 4 * params <= FLOAT32_MEMORY_SHARE * total


def synchronize(device: torch.device) -> None:
    """Wait for the work this thread queued on `device` (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A tensor built on the host, on `device`. To a CUDA GPU it goes from pinned memory without
    blocking: a plain copy from pageable memory waits for every kernel queued before it (a host sync)."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def host_values(*tensors: torch.Tensor) -> list[list[float]]:
    """The values of several small tensors, read to the host in one transfer (one host sync on a GPU
    instead of one per tensor or per element). Packed as float32, which holds every float32 value,
    bool and token id below 2**24 exactly (and MPS has no float64)."""
    flat = [t.reshape(-1) for t in tensors]
    values = torch.cat([t.float() for t in flat]).tolist() if flat else []
    out, start = [], 0
    for t in flat:
        out.append(values[start : start + t.numel()])
        start += t.numel()
    return out


def input_embeddings(model: PreTrainedModel) -> torch.Tensor:
    """The model's input embedding matrix [V, H]: its device is where the model reads token ids."""
    weight = model.get_input_embeddings().weight
    assert isinstance(weight, torch.Tensor)  # a Parameter (or a factorised embedding's product)
    return weight


def output_embeddings(model: PreTrainedModel) -> torch.Tensor:
    """The model's head [V, H]: one row per token of its output distribution."""
    head = model.get_output_embeddings()
    assert head is not None and isinstance(head.weight, torch.Tensor)  # a causal LM has a head
    return head.weight


def moved(model: M, device: torch.device | None = None, dtype: torch.dtype | None = None) -> M:
    """`model.to(device, dtype)` (either may be left out), typed as the model it returns. (transformers
    declares `PreTrainedModel.to` through functools.wraps, which mypy reads as an unbound function,
    python/typeshed#10653; through `M` the call type-checks as `nn.Module.to` and still runs the override.)"""
    if dtype is None:
        return model.to(device)
    return model.to(dtype) if device is None else model.to(device, dtype)
