"""Faster CPU inference: the weights of every `nn.Linear` packed once for oneDNN.

PyTorch's default CPU path for a float32 linear layer (MKL sgemm on the weight as stored) makes a
forward of a few tokens much dearer than a forward of one: on this project's 2-core machine,
SmolLM2-135M takes 31 ms for 1 token, 49 ms for 2 and 56 ms for 8 (most likely the weight is
re-laid-out for the matrix-matrix kernel on every call; oneDNN keeps a packed copy instead). Speculative decoding
lives on exactly those few-token forwards (the target verifies γ+1 tokens, SSSD and Speculative
Streaming verify trees). With the weights packed once for oneDNN the same forwards took 27.5,
35.5 and 40 ms: verifying 8 tokens cost 1.47x one token instead of 1.8x. The packed copy is now
the layout oneDNN reorders a weight to for its matmul (`pack_weight`, `packed_linear`), which also
serves one row faster than MKL's gemv on the plain weight; `specviz.models.fast` multiplies by the
same copies (figures: benchmarks/fast-target/README.md).

Numbers change only in the last bits (a different summation order), for every method alike: the
lossless tests compare each method with autoregressive decoding of the same packed model, and the
peers (Hugging Face `generate`) run on the same modules. The packed path is used only without
autograd, on float32 CPU tensors; training (autograd on) takes the ordinary path, and a weight
changed in place (an optimiser step, `load_state_dict`) is packed again at its next use.
Set SPECVIZ_CPU_PREPACK=0 to turn it off (e.g. to measure its effect).

oneDNN builds and caches a kernel for every input shape it meets (two caches of 1,024 entries,
oneDNN's and PyTorch's ideep's; ~0.6 MB per shape measured here, whatever the layer's size). A
server that meets every prompt length from its visitors would fill both: up to ~600 MB that stays.
So inputs of more than `EXACT_ROWS` rows (a prompt's prefill, a long verification) are padded with
zero rows to one of four sizes per octave and the padding's outputs dropped: at most 25 % more rows,
still ~1.6x faster than the unpacked path (the default target's 576x1536 layer, 32 to 256 rows),
and every input up to 2,048 rows meets one of 40 shapes per layer. Padding from 8 rows rather
than 32 costs little, as a forward of few rows is bound by reading the weights (the default
target's 576x1536 layer: 0.147 ms for 9 rows, 0.181 ms for 16): vanilla, SSSD and DISCO ran as
fast (default pair, 8 prompts, runs alternated), and a server meets 16 shapes below 33 rows
instead of 32.

The most that prompts of every length can add, measured on the default pair: a prefill of each of
the 28 padded sizes from 9 to 1,024 rows left +90 MB of kernels, once. Prefills through the
ordinary path would leave none, but they are 1.5-1.7x slower on the default target (20 to 320
tokens), and vanilla, SSSD and DISCO lost 1-2 % of their speedup (the same 8 prompts, 3 runs each,
alternated): a bounded, one-off 90 MB is the better trade.
"""

from __future__ import annotations

import os

import torch


class _Packed:
    """The packed copy of one weight, and which version of the weight it was made from.
    Not carried over by deepcopy (a copy packs its own weights at first use)."""

    def __init__(self) -> None:
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.source: tuple[int, int] | None = None  # (id, version) of the dense weight it was made from

    def __deepcopy__(self, memo: dict[int, object]) -> _Packed:
        return _Packed()


def version_stamp(t: torch.Tensor) -> tuple[int, int]:
    try:
        return id(t), t._version
    except RuntimeError:  # an inference tensor keeps no version counter (it cannot be changed in place either)
        return id(t), 0


class WeightsStamp:
    """What a copy made from a module's weights (packed, quantised) was made from, cheap enough to check
    every step: each parameter's identity, version and device, and each submodule's identity. It
    changes when a weight changes in place (an optimiser step, `load_state_dict`), moves to another
    device, or a parameter or submodule is replaced. The modules are listed once and again only after a
    change: walking `parameters()` each step cost the default draft a few percent of its step
    (benchmarks/fast-target/README.md, section 4)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.modules: list[torch.nn.Module] = []
        self.last: tuple | None = None

    def _read(self) -> tuple:
        out: list = []
        for m in self.modules:
            out += [id(c) for c in m._modules.values()]
            out += [(*version_stamp(p), p.device) for p in m._parameters.values() if p is not None]
        return tuple(out)

    def changed(self) -> bool:
        """Whether the weights differ from the last call's (True at the first)."""
        if self._read() == self.last:  # never at the first call: `last` is None
            return False
        self.modules = list(self.module.modules())  # a submodule may have been replaced: list them again
        self.last = self._read()
        return True


class PackedLinear(torch.nn.Linear):
    """An `nn.Linear` that `prepack_linears` routed through packed oneDNN weights."""

    _specviz_packed: _Packed

    @staticmethod
    def adopt(linear: torch.nn.Linear) -> None:
        """Make `linear` a PackedLinear in place. The class, not a bound method stored on the module:
        that would be a reference cycle, and a dropped model (a released online learner's weights)
        would wait for the cyclic collector."""
        linear.__class__ = PackedLinear
        assert isinstance(linear, PackedLinear)
        linear._specviz_packed = _Packed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if torch.is_grad_enabled() or x.dtype != torch.float32 or w.dtype != torch.float32 or x.device.type != "cpu":
            return torch.nn.functional.linear(x, w, self.bias)
        cache = self._specviz_packed
        if cache.weight is None or cache.source != version_stamp(w):
            cache.weight = pack_weight(w)
            cache.bias = None if self.bias is None else self.bias.detach()
            cache.source = version_stamp(w)
        return packed_linear(x, cache.weight, cache.bias)


EXACT_ROWS = 8  # inputs up to this many rows (tokens) are packed as they are


def packed_rows(rows: int) -> int:
    """The rows an input of `rows` rows is padded to: itself up to EXACT_ROWS, then the next of four
    sizes per octave (10, 12, 14, 16, 20, 24, ...), so oneDNN meets few distinct shapes."""
    if rows <= EXACT_ROWS:
        return rows
    step = 1 << ((rows - 1).bit_length() - 3)  # an eighth of the octave's top: 33..64 -> 8, 65..128 -> 16
    return -(-rows // step) * step


PACK_ROWS = 8  # the rows oneDNN lays a weight out for; the copy serves any row count (1 row: measured as fast)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A float32 CPU weight [out, in] in oneDNN's blocked layout: a copy the size of the weight."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [.., in] @ W^T (+ bias) through W's `pack_weight` copy: [.., out]. Inputs of more than
    EXACT_ROWS rows are padded to `packed_rows` (the padding's outputs dropped)."""
    flat = x.reshape(-1, x.shape[-1])  # [rows, in]
    rows = flat.shape[0]
    if (padded := packed_rows(rows)) != rows:
        flat = torch.nn.functional.pad(flat, (0, 0, 0, padded - rows))
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return out[:rows].view(*x.shape[:-1], out.shape[-1])


def enabled() -> bool:
    return os.environ.get("SPECVIZ_CPU_PREPACK", "1") != "0" and torch.backends.mkldnn.is_available()


def prepack_linears(model: torch.nn.Module | None) -> int:
    """Route the float32 CPU `nn.Linear` layers of `model` through packed oneDNN weights; how many."""
    if model is None or not enabled():
        return 0
    count = 0
    for module in model.modules():
        if (
            type(module) is torch.nn.Linear
            and module.weight.device.type == "cpu"
            and module.weight.dtype == torch.float32
        ):
            PackedLinear.adopt(module)
            count += 1
    return count
