"""Hardware presets for the roofline: peak FLOP/s per dtype, memory bandwidth, per-forward overhead.

Peak numbers are vendor datasheet figures for *dense* matrix math (no 2:4 sparsity); real kernels
reach a fraction of them. The overhead terms model what a roofline alone misses: kernel launches
and Python/framework time per forward pass, which dominate small models (see ../shared/DATA.md:
SmolLM2-135M..1.7B take 20-35 ms per forward on an H100 with Hugging Face eager code, whatever the
token count). "This machine" is measured, not looked up (`measure_this_machine`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class Hardware:
    name: str  # shown in the app and the figures
    peak_flops: dict[str, float]  # dtype ("bfloat16", "float16", "float32") -> peak dense FLOP/s
    memory_bandwidth: float  # bytes/s, main memory (HBM on GPUs, DRAM on CPUs)
    overhead_s: float = 0.0  # fixed cost of one forward pass (framework, sync), seconds
    overhead_per_layer_s: float = 0.0  # launch/Python cost per transformer layer, seconds
    overlap: bool = True  # compute and memory traffic overlap: max(c, m) (GPUs); False: c + m (a CPU
    #                       thread that stalls on loads; fits this machine's measurements better)
    source: str = ""  # where the numbers come from
    extra: dict[str, Any] = field(default_factory=dict)  # plain facts (e.g. how it was measured)
    eager_attention: bool = False  # attention scores go through memory, no fused kernel (roofline.eager_costs)
    growing_cache: bool = False  # the KV cache is copied whole every forward (DynamicCache's torch.cat)
    chip: Hardware | None = None  # the datasheet chip an engine was applied to (None: this is the chip)

    def flops_per_s(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`; float16<->bfloat16 stand in for each other when one is missing."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        # weight-only quantised weights (int8, q4) are multiplied in 16-bit after dequantisation
        aliases = {"bfloat16": ("float16",), "float16": ("bfloat16",), "int8": ("bfloat16", "float16"), "q4": ("bfloat16", "float16")}
        for alias in aliases.get(dtype, ()):
            if alias in self.peak_flops:
                return self.peak_flops[alias]
        raise KeyError(f"{self.name} has no peak FLOP/s for {dtype}; known: {', '.join(self.peak_flops)}")

    def overhead(self, n_layers: int) -> float:
        """Per-forward time that is neither compute nor memory traffic: t_0 + layers * t_layer."""
        return self.overhead_s + n_layers * self.overhead_per_layer_s

    def ideal(self) -> Hardware:
        """The chip at its datasheet figures with perfect kernels and no framework time (the pure roofline)."""
        base = self.chip or self
        return replace(base, name=f"{base.name} (no overhead)", overhead_s=0.0, overhead_per_layer_s=0.0,
                       eager_attention=False, growing_cache=False, chip=None)  # fmt: skip

    def with_engine(self, engine: Engine) -> Hardware:
        """The chip as `engine` drives it: achieved fractions of its peaks, its overheads, its extra traffic."""
        chip = self.chip or self
        return replace(
            chip, name=f"{chip.name} · {engine.name}",
            peak_flops={k: v * engine.compute_efficiency for k, v in chip.peak_flops.items()},
            memory_bandwidth=chip.memory_bandwidth * engine.memory_efficiency,
            overhead_s=engine.overhead_s, overhead_per_layer_s=engine.overhead_per_layer_s,
            eager_attention=engine.eager_attention, growing_cache=engine.growing_cache,
            source=f"{chip.source}; {engine.source}", chip=chip,
        )  # fmt: skip

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) where compute time equals memory time."""
        return self.flops_per_s(dtype) / self.memory_bandwidth


@dataclass(frozen=True)
class Engine:
    """What a software stack makes of a chip: the fractions of its peaks its kernels reach, its
    per-forward and per-layer overheads (kernel launches, Python), and whether it materialises
    attention scores and grows the KV cache by copying. Fit to published measurements
    (`specviz.cost.published`, `python -m specviz.bench roofline --published`)."""

    name: str
    memory_efficiency: float  # achieved / datasheet bandwidth
    compute_efficiency: float  # achieved / datasheet peak FLOP/s
    overhead_s: float  # per forward pass
    overhead_per_layer_s: float  # per transformer layer of a forward pass
    eager_attention: bool
    growing_cache: bool
    step_overhead_per_layer_s: float = 0.0  # a speculative step's bookkeeping per target layer (accepted keys/values
    #                                           moved into place, tree masks): kernel launches, not bytes
    source: str = ""


# Fit by `python -m specviz.bench roofline --published` to the rows of published.csv that
# specviz.cost.published.role marks "fit"; benchmarks/roofline/published.md gives the error on the
# others. tests/test_published.py checks that the fit still returns these numbers. A value at the
# edge of the fit's range is not pinned down by the data: HF eager's bandwidth (its per-layer
# overhead explains the rest) and the compiled engine's compute (no compute-bound row).
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in [
        Engine("HF eager", memory_efficiency=1.0, compute_efficiency=0.413, overhead_s=0.000313,
               overhead_per_layer_s=0.0003, eager_attention=True, growing_cache=True, step_overhead_per_layer_s=0.000177,
               source="Hugging Face eager PyTorch, fit to PEARL's H800 speeds and Spec-Bench's A100 13B/33B speedups"),
        Engine("compiled", memory_efficiency=0.669, compute_efficiency=0.1, overhead_s=0.001312,
               overhead_per_layer_s=7.8e-06, eager_attention=False, growing_cache=False,
               source="torch.compile, CUDA graphs and a static cache, fit to gpt-fast's A100 speeds"),
    ]
}
DEFAULT_ENGINE = "HF eager"

PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in [
        # NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16/FP16 tensor (1979 with sparsity),
        # 67 TFLOP/s FP32, 3.35 TB/s HBM3.
        Hardware("H100 SXM", {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
                 3.35 * TERA, source="NVIDIA H100 datasheet (dense, SXM5)"),
        # NVIDIA H800 SXM (the H100 for the Chinese market): the H100 SXM's compute and 3.35 TB/s;
        # only NVLink is cut (PEARL's measurements ran on it).
        Hardware("H800", {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
                 3.35 * TERA, source="NVIDIA H800 SXM5 (H100 SXM5 compute and memory)"),
        # NVIDIA GeForce RTX 3090 (GA102 whitepaper): 71 TFLOP/s dense FP16 tensor with FP32
        # accumulate (what PyTorch uses; 142 with FP16 accumulate), 35.6 TFLOP/s FP32, 936 GB/s.
        Hardware("RTX 3090", {"bfloat16": 71 * TERA, "float16": 71 * TERA, "float32": 35.6 * TERA},
                 936 * GIGA, source="NVIDIA Ampere GA102 whitepaper (RTX 3090)"),
        # NVIDIA H200 SXM datasheet: same compute as H100 SXM, 4.8 TB/s HBM3e (141 GB).
        Hardware("H200", {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
                 4.8 * TERA, source="NVIDIA H200 datasheet (dense, SXM)"),
        # NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s dense BF16/FP16, 19.5 TFLOP/s FP32, 2.039 TB/s.
        Hardware("A100 80GB", {"bfloat16": 312 * TERA, "float16": 312 * TERA, "float32": 19.5 * TERA},
                 2.039 * TERA, source="NVIDIA A100 datasheet (80GB SXM, dense)"),
        # NVIDIA L4 datasheet: 121 TFLOP/s dense BF16/FP16 (242 sparse), 30.3 TFLOP/s FP32, 300 GB/s.
        Hardware("L4", {"bfloat16": 121 * TERA, "float16": 121 * TERA, "float32": 30.3 * TERA},
                 300 * GIGA, source="NVIDIA L4 datasheet (dense)"),
        # NVIDIA T4 datasheet: 65 TFLOP/s FP16 tensor (mixed precision), 8.1 TFLOP/s FP32, 320 GB/s.
        # Turing has no bf16 tensor cores; bf16 falls back to the fp16 figure here (optimistic).
        Hardware("T4", {"float16": 65 * TERA, "float32": 8.1 * TERA}, 320 * GIGA,
                 source="NVIDIA T4 datasheet"),
        # AWS A10G (g5 instances): NVIDIA publishes no datasheet; 600 GB/s GDDR6 and ~70 TFLOP/s
        # dense FP16/BF16 tensor, 31.2 TFLOP/s FP32 are the commonly quoted figures (the A10 is 125).
        Hardware("A10G", {"bfloat16": 70 * TERA, "float16": 70 * TERA, "float32": 31.2 * TERA},
                 600 * GIGA, source="commonly quoted AWS g5 figures (no vendor datasheet)"),
        # Huawei Ascend 910B4 as used in SSSD (section 3.2): 280 TFLOP/s, 0.8 TB/s.
        Hardware("Ascend 910B4", {"bfloat16": 280 * TERA, "float16": 280 * TERA}, 0.8 * TERA,
                 source="SSSD paper, section 3.2"),
        # Apple M2 Max (38-core GPU): Apple quotes 13.6 TFLOP/s (FP32; FP16 runs at the same rate
        # on this GPU) and 400 GB/s unified memory. PyTorch MPS eager overhead is similar to CUDA eager.
        Hardware("Apple M2 Max", {"bfloat16": 13.6 * TERA, "float16": 13.6 * TERA, "float32": 13.6 * TERA},
                 400 * GIGA, source="Apple M2 Max press release (38-core GPU)"),
        # This project's 2-core AMD EPYC VM, measured with `measure_this_machine(threads=1)` on
        # 2026-11-23 (load average ~1.5-2.8: other agents shared it): fp32 matmul 1024^3 70 GFLOP/s
        # (42 with 2 threads under load), bf16 0.6 GFLOP/s (no bf16 instructions: use fp32 on CPU),
        # copy 9.3 GB/s. The overhead terms are fit by `python -m specviz.bench roofline`.
        Hardware("This machine (2-core CPU)", {"float32": 70 * GIGA, "bfloat16": 0.6 * GIGA},
                 9.3 * GIGA, overhead_s=2e-3, overhead_per_layer_s=0.15e-3, overlap=False,
                 source="measured here with measure_this_machine(); overhead fit by specviz.bench roofline"),
    ]
}

THIS_MACHINE = "This machine (2-core CPU)"


def get_hardware(name: str, engine: str | None = DEFAULT_ENGINE) -> Hardware:
    """A preset chip as `engine` (a name in ENGINES) drives it; engine None: its datasheet figures.
    This machine's preset is measured as it runs here, so no engine applies to it."""
    from specviz.errors import SpecvizError

    if name not in PRESETS:
        raise SpecvizError(f"unknown hardware '{name}'; known: {', '.join(PRESETS)}")
    if engine is not None and engine not in ENGINES:
        raise SpecvizError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    chip = PRESETS[name]
    return chip if engine is None or name == THIS_MACHINE else chip.with_engine(ENGINES[engine])


def measure_this_machine(
    n: int = 1024, copy_mb: int = 256, repeats: int = 5, threads: int | None = None, name: str = "measured"
) -> Hardware:
    """Peak-ish FLOP/s (an n x n x n fp32 matmul) and bandwidth (a copy of `copy_mb` MB) of this machine.

    Bandwidth counts read + write bytes of the copy (2 x size). Best of `repeats`, so a busy
    machine biases towards, not away from, the true capability.
    """
    import time

    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        flops = {}
        for dtype, size in ((torch.float32, n), (torch.bfloat16, max(n // 4, 16))):  # CPU bf16 can be 100x slower
            a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
            a @ b  # warm-up
            best = min(_timed(lambda: a @ b, time) for _ in range(repeats))
            flops[str(dtype).removeprefix("torch.")] = 2 * size**3 / best
        src = torch.empty(copy_mb * 2**20 // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = min(_timed(lambda: dst.copy_(src), time) for _ in range(repeats))
        bandwidth = 2 * src.numel() * 4 / best
        return Hardware(name, flops, bandwidth, source="measure_this_machine()",
                        extra={"threads": torch.get_num_threads(), "matmul_n": n, "copy_mb": copy_mb})
    finally:
        torch.set_num_threads(old)


def _timed(fn, time) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
