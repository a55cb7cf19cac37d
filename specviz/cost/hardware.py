"""Hardware presets for the roofline: peak FLOP/s per dtype, memory bandwidth, per-forward overhead.

Peak numbers are vendor datasheet figures for *dense* matrix math (no 2:4 sparsity); real kernels
reach a fraction of them. Where a published PyTorch measurement exists, `gemm_flops` holds the rate
large fp16/bf16 GEMMs (`torch.mm`) actually reach: a datacenter part runs below its datasheet figure
(A100 80GB: 259 of 312 TFLOP/s, 83 %), a GeForce card above it (RTX 3090: 75.7 of 71, 107 %: its
datasheet figure is at the rated 1.70 GHz boost clock, and GeForce cards boost higher). An engine's
compute rate is taken from this measured rate, not fit: the published rows it is fit on are all
memory-bound (batch 1, at most 64 tokens on an A100 or H800), so they cannot tell a compute rate.

The overhead terms model what a roofline alone misses: kernel launches
and Python/framework time per forward pass, which dominate small models (see ../shared/DATA.md:
SmolLM2-135M..1.7B take 20-35 ms per forward on an H100 with Hugging Face eager code, whatever the
token count). "This machine" is measured, not looked up (`measure_this_machine`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

TERA = 1e12
GIGA = 1e9
# A dtype without its own figure borrows one: float16 <-> bfloat16; weight-only quantised weights
# (int8, q4) are multiplied in 16-bit after dequantisation.
DTYPE_ALIASES = {
    "bfloat16": ("float16",),
    "float16": ("bfloat16",),
    "int8": ("bfloat16", "float16"),
    "q4": ("bfloat16", "float16"),
}


@dataclass(frozen=True)
class Hardware:
    name: str  # shown in the app and the figures
    peak_flops: dict[str, float]  # dtype ("bfloat16", "float16", "float32") -> peak dense FLOP/s
    memory_bandwidth: float  # bytes/s, main memory (HBM on GPUs, DRAM on CPUs)
    overhead_s: float = 0.0  # fixed cost of one forward pass (framework, sync), seconds
    overhead_per_layer_s: float = 0.0  # launch/Python cost per transformer layer, seconds
    overlap: bool = True  # compute and memory traffic overlap: max(c, m) (GPUs); False: c + m (a CPU
    #                       thread that stalls on loads; fits this machine's measurements better)
    overlap_exponent: float = math.inf  # p of the overlap (c^p + m^p)^(1/p): inf is the roofline's max(c, m);
    #                                     a finite p: a kernel near the ridge (c ~ m) overlaps the two only in part
    source: str = ""  # where the numbers come from
    extra: dict[str, Any] = field(default_factory=dict)  # plain facts (e.g. how it was measured)
    eager_attention: bool = False  # attention scores go through memory, no fused kernel (roofline.eager_costs)
    growing_cache: bool = False  # the KV cache is copied whole every forward (DynamicCache's torch.cat)
    chip: Hardware | None = None  # the datasheet chip an engine was applied to (None: this is the chip)
    gemm_flops: dict[str, float] = field(default_factory=dict)  # dtype -> FLOP/s large GEMMs reach, measured
    #                                                              and published (torch.mm); empty: datasheet only

    def flops_per_s(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`; float16<->bfloat16 stand in for each other when one is missing."""
        for d in (dtype, *DTYPE_ALIASES.get(dtype, ())):
            if d in self.peak_flops:
                return self.peak_flops[d]
        raise KeyError(f"{self.name} has no peak FLOP/s for {dtype}; known: {', '.join(self.peak_flops)}")

    def gemm_flops_per_s(self, dtype: str) -> float:
        """FLOP/s large GEMMs reach on this chip: the published measurement, else the datasheet peak."""
        for d in (dtype, *DTYPE_ALIASES.get(dtype, ())):
            if d in self.gemm_flops:
                return self.gemm_flops[d]
        return self.flops_per_s(dtype)

    def overhead(self, n_layers: int) -> float:
        """Per-forward time that is neither compute nor memory traffic: t_0 + layers * t_layer."""
        return self.overhead_s + n_layers * self.overhead_per_layer_s

    def ideal(self) -> Hardware:
        """The chip at its datasheet figures with perfect kernels and no framework time (the pure roofline)."""
        base = self.chip or self
        return replace(
            base,
            name=f"{base.name} (no overhead)",
            overhead_s=0.0,
            overhead_per_layer_s=0.0,
            eager_attention=False,
            growing_cache=False,
            overlap_exponent=math.inf,
            chip=None,
        )

    def with_engine(self, engine: Engine) -> Hardware:
        """The chip as `engine` drives it: the GEMM rate it reaches (measured where published), its
        fraction of the bandwidth, its overheads, its extra traffic, how its kernels overlap."""
        chip = self.chip or self
        return replace(
            chip,
            name=f"{chip.name} · {engine.name}",
            peak_flops={k: chip.gemm_flops_per_s(k) * engine.compute_efficiency for k in chip.peak_flops},
            memory_bandwidth=chip.memory_bandwidth * engine.memory_efficiency,
            overhead_s=engine.overhead_s,
            overhead_per_layer_s=engine.overhead_per_layer_s,
            eager_attention=engine.eager_attention,
            growing_cache=engine.growing_cache,
            overlap_exponent=engine.overlap_exponent,
            source=f"{chip.source}; {engine.source}",
            chip=chip,
        )

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) where compute time equals memory time."""
        return self.flops_per_s(dtype) / self.memory_bandwidth


@dataclass(frozen=True)
class Engine:
    """What a software stack makes of a chip: the fraction of its bandwidth its kernels reach, how
    well they overlap memory traffic with math, its per-forward and per-layer overheads (kernel
    launches, Python), and whether it materialises attention scores and grows the KV cache by
    copying. Fit to published measurements (`specviz.cost.published`,
    `python -m specviz.bench roofline --published`)."""

    name: str
    memory_efficiency: float  # achieved / datasheet bandwidth
    compute_efficiency: float  # achieved / the chip's measured GEMM rate (Hardware.gemm_flops_per_s); not fit
    overhead_s: float  # per forward pass
    overhead_per_layer_s: float  # per transformer layer of a forward pass
    eager_attention: bool
    growing_cache: bool
    step_overhead_per_layer_s: float = 0.0  # a speculative step's bookkeeping per target layer (accepted keys/values
    #                                           moved into place, tree masks): kernel launches, not bytes
    overlap_exponent: float = math.inf  # p in (c^p + m^p)^(1/p) per operator (Hardware.overlap_exponent)
    source: str = ""


# Fit by `python -m specviz.bench roofline --published` to the rows of published.csv that
# specviz.cost.published.role marks "fit"; benchmarks/roofline/published.md gives the error on the
# others. tests/test_published.py checks that the fit still returns these numbers. A value at the
# edge of the fit's range is not pinned down by the data: HF eager's bandwidth (its per-layer
# overhead explains the rest). Not fit at all: the compute rate (compute_efficiency 1 of the chip's
# measured GEMM rate: no fit row is compute-bound) and the compiled engine's overlap (its fit rows
# are single-token passes, far from the ridge: the plain roofline max). HF eager's overlap exponent
# p = 2.5 is pinned down only loosely, by the A100 rows' 57-64-token passes (c ~ m/2 there): the fit
# loss is 0.0384 at p = 2.5 against 0.0394 for max(c, m) (p = inf).
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in [
        Engine(
            "HF eager",
            memory_efficiency=1.0,
            compute_efficiency=1.0,
            overhead_s=0.000188,
            overhead_per_layer_s=0.0003031,
            eager_attention=True,
            growing_cache=True,
            step_overhead_per_layer_s=0.000172,
            overlap_exponent=2.5,
            source="Hugging Face eager PyTorch, fit to PEARL's H800 speeds and Spec-Bench's A100 13B/33B speedups; "
            "compute at each chip's published torch.mm rate",
        ),
        Engine(
            "compiled",
            memory_efficiency=0.669,
            compute_efficiency=1.0,
            overhead_s=0.001312,
            overhead_per_layer_s=7.8e-06,
            eager_attention=False,
            growing_cache=False,
            source="torch.compile, CUDA graphs and a static cache, fit to gpt-fast's A100 speeds; "
            "compute at each chip's published torch.mm rate",
        ),
    ]
}
DEFAULT_ENGINE = "HF eager"

# Measured GEMM rates (`gemm_flops`): zzc0721/torch-performance-test-data, database.md (commit
# 0785868), the best TFLOP/s of `torch.mm` on square fp16/bf16 matrices of 1024..10240 (test.py:
# 30 timed calls after 6 warm-up calls); where the table has several entries for a chip, their mean.
PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in [
        # NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16/FP16 tensor (1979 with sparsity),
        # 67 TFLOP/s FP32, 3.35 TB/s HBM3. Measured ("H100 80GB HBM3", two entries): fp16 761.8 and
        # 758.1, bf16 789.2 and 783.7 TFLOP/s (77-80 % of the datasheet).
        Hardware(
            "H100 SXM",
            {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
            3.35 * TERA,
            source="NVIDIA H100 datasheet (dense, SXM5)",
            gemm_flops={"float16": 760 * TERA, "bfloat16": 786 * TERA},
        ),
        # NVIDIA H800 SXM (the H100 for the Chinese market): the H100 SXM's compute and 3.35 TB/s;
        # only NVLink is cut (PEARL's measurements ran on it). GEMM rate: the H100 SXM's (same chip).
        Hardware(
            "H800",
            {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
            3.35 * TERA,
            source="NVIDIA H800 SXM5 (H100 SXM5 compute and memory)",
            gemm_flops={"float16": 760 * TERA, "bfloat16": 786 * TERA},
        ),
        # NVIDIA GeForce RTX 3090, GA102 whitepaper v2 (Appendix A): 82 SMs at a 1.695 GHz boost
        # clock, 71 TFLOP/s dense FP16 tensor with FP32 accumulate (142 with FP16 accumulate: on
        # GeForce cards FP32 accumulate runs at half rate), 35.6 TFLOP/s FP32, 936 GB/s (19.5 Gbps
        # GDDR6X, 384-bit). PyTorch multiplies fp16 with FP32 accumulate (cublasGemmEx with a
        # CUDA_R_32F compute type whatever allow_fp16_reduced_precision_reduction says: pytorch/pytorch
        # issue #123157), so 71 is its datasheet ceiling. Measured (three entries): fp16 75.6, 75.9,
        # 75.5, bf16 76.3, 76.7, 76.6 TFLOP/s: 107 % of 71, the card boosting above its rated clock.
        Hardware(
            "RTX 3090",
            {"bfloat16": 71 * TERA, "float16": 71 * TERA, "float32": 35.6 * TERA},
            936 * GIGA,
            source="NVIDIA Ampere GA102 whitepaper (RTX 3090)",
            gemm_flops={"float16": 75.7 * TERA, "bfloat16": 76.5 * TERA},
        ),
        # NVIDIA H200 SXM datasheet: same compute as H100 SXM, 4.8 TB/s HBM3e (141 GB). Measured:
        # fp16 759.4, bf16 790.3 TFLOP/s.
        Hardware(
            "H200",
            {"bfloat16": 989 * TERA, "float16": 989 * TERA, "float32": 67 * TERA},
            4.8 * TERA,
            source="NVIDIA H200 datasheet (dense, SXM)",
            gemm_flops={"float16": 759 * TERA, "bfloat16": 790 * TERA},
        ),
        # NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s dense BF16/FP16, 19.5 TFLOP/s FP32, 2.039 TB/s.
        # Measured ("A100 SXM4 80GB"): fp16 258.7, bf16 264.5 TFLOP/s (83-85 % of the datasheet).
        Hardware(
            "A100 80GB",
            {"bfloat16": 312 * TERA, "float16": 312 * TERA, "float32": 19.5 * TERA},
            2.039 * TERA,
            source="NVIDIA A100 datasheet (80GB SXM, dense)",
            gemm_flops={"float16": 259 * TERA, "bfloat16": 265 * TERA},
        ),
        # NVIDIA L4 datasheet: 121 TFLOP/s dense BF16/FP16 (242 sparse), 30.3 TFLOP/s FP32, 300 GB/s.
        Hardware(
            "L4",
            {"bfloat16": 121 * TERA, "float16": 121 * TERA, "float32": 30.3 * TERA},
            300 * GIGA,
            source="NVIDIA L4 datasheet (dense)",
        ),
        # NVIDIA T4 datasheet: 65 TFLOP/s FP16 tensor (mixed precision), 8.1 TFLOP/s FP32, 320 GB/s.
        # Turing has no bf16 tensor cores; bf16 falls back to the fp16 figure here (optimistic).
        Hardware("T4", {"float16": 65 * TERA, "float32": 8.1 * TERA}, 320 * GIGA, source="NVIDIA T4 datasheet"),
        # AWS A10G (g5 instances): NVIDIA publishes no datasheet; 600 GB/s GDDR6 and ~70 TFLOP/s
        # dense FP16/BF16 tensor, 31.2 TFLOP/s FP32 are the commonly quoted figures (the A10 is 125).
        Hardware(
            "A10G",
            {"bfloat16": 70 * TERA, "float16": 70 * TERA, "float32": 31.2 * TERA},
            600 * GIGA,
            source="commonly quoted AWS g5 figures (no vendor datasheet)",
        ),
        # Huawei Ascend 910B4 as used in SSSD (section 3.2): 280 TFLOP/s, 0.8 TB/s.
        Hardware(
            "Ascend 910B4",
            {"bfloat16": 280 * TERA, "float16": 280 * TERA},
            0.8 * TERA,
            source="SSSD paper, section 3.2",
        ),
        # Apple M2 Max (38-core GPU): Apple quotes 13.6 TFLOP/s (FP32; FP16 runs at the same rate
        # on this GPU) and 400 GB/s unified memory. PyTorch MPS eager overhead is similar to CUDA eager.
        Hardware(
            "Apple M2 Max",
            {"bfloat16": 13.6 * TERA, "float16": 13.6 * TERA, "float32": 13.6 * TERA},
            400 * GIGA,
            source="Apple M2 Max press release (38-core GPU)",
        ),
        # This project's 2-core AMD EPYC VM, measured with `measure_this_machine(threads=1)` on
        # 2026-11-23 (load average ~1.5-2.8: other agents shared it): fp32 matmul 1024^3 70 GFLOP/s
        # (42 with 2 threads under load), bf16 0.6 GFLOP/s (no bf16 instructions: use fp32 on CPU),
        # copy 9.3 GB/s. The overhead terms are fit by `python -m specviz.bench roofline`.
        Hardware(
            "This machine (2-core CPU)",
            {"float32": 70 * GIGA, "bfloat16": 0.6 * GIGA},
            9.3 * GIGA,
            overhead_s=2e-3,
            overhead_per_layer_s=0.15e-3,
            overlap=False,
            source="measured here with measure_this_machine(); overhead fit by specviz.bench roofline",
        ),
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


def preset_for(device_type: str, gpu_name: str = "") -> str:
    """The preset that stands for a torch device: this machine's for "cpu", the Apple M2 Max for "mps", and
    for a GPU the preset whose name's first word its name holds ("NVIDIA H100 80GB HBM3": H100 SXM), else the
    H100 SXM."""
    if device_type == "cpu":
        return THIS_MACHINE
    if device_type == "mps":
        return "Apple M2 Max"
    return next((n for n in PRESETS if n.split()[0] in gpu_name and n != THIS_MACHINE), "H100 SXM")


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
            best = min(_timed(functools.partial(torch.matmul, a, b), time) for _ in range(repeats))
            flops[str(dtype).removeprefix("torch.")] = 2 * size**3 / best
        src = torch.empty(copy_mb * 2**20 // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = min(_timed(lambda: dst.copy_(src), time) for _ in range(repeats))
        bandwidth = 2 * src.numel() * 4 / best
        return Hardware(
            name,
            flops,
            bandwidth,
            source="measure_this_machine()",
            extra={"threads": torch.get_num_threads(), "matmul_n": n, "copy_mb": copy_mb},
        )
    finally:
        torch.set_num_threads(old)


def _timed(fn: Callable[[], object], time: ModuleType) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
