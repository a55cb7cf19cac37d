"""Fit the roofline to measured forward times: achieved fractions of peak compute and bandwidth, and
the per-forward overhead (kernel launches, framework time), from a few (B, S) points.

    T(B, S, L) = t_0 + sum_ops max(FLOPs / (e_c * peak), bytes / (e_m * bandwidth))

(or the sum instead of the max: both are fit and the better one kept, `Hardware.overlap`).

e_c, e_m (efficiencies) come from a grid search, t_0 from the median residual; the criterion is
the mean |log(predicted / measured)| over the fit points. The rest of the grid tests the fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specviz.cost.hardware import Hardware
from specviz.cost.roofline import forward_time, operator_costs
from specviz.cost.shapes import ModelShape


@dataclass(frozen=True)
class RooflineFit:
    hardware: Hardware  # the base hardware with fitted peaks, bandwidth and overhead_s
    compute_efficiency: float  # e_c: achieved / base peak FLOP/s
    memory_efficiency: float  # e_m: achieved / base bandwidth
    overhead_s: float  # t_0: per-forward overhead, seconds
    fit_points: int  # how many measured points the fit saw


def _point(p: Any) -> tuple[int, int, int, float]:
    d = p if isinstance(p, dict) else p.as_dict()
    return d["batch_size"], d["n_tokens"], d["context_len"], d["seconds"]


def fit_roofline(
    shape: ModelShape,
    base: Hardware,
    points: Iterable[Any],
    efficiencies: Sequence[float] = tuple(np.geomspace(0.02, 4.0, 61)),
    name: str | None = None,
) -> RooflineFit:
    """Least-log-error fit of (e_c, e_m, t_0) to measured points (dicts or `ForwardTiming`s)."""
    pts = [_point(p) for p in points]
    if not pts:
        raise ValueError("no measured points to fit")
    peak, bw = base.flops_per_s(shape.dtype), base.memory_bandwidth
    ops = [operator_costs(shape, B, S, L) for B, S, L, _ in pts]
    flops = np.array([[o.flops for o in row] for row in ops])  # [P, ops]
    nbytes = np.array([[o.bytes for o in row] for row in ops])  # [P, ops]
    measured = np.array([t for *_, t in pts])  # [P]
    fits = []
    for overlap in (True, False):  # max(compute, memory) or compute + memory, whichever fits better
        ec, em = np.asarray(efficiencies), np.asarray(efficiencies)
        for _ in range(4):  # grid search, then zoom in around the best cell three times
            loss, overhead = _grid_loss(flops, nbytes, measured, peak * ec, bw * em, overlap)
            i, j = np.unravel_index(np.argmin(loss), loss.shape)
            best = (float(loss[i, j]), float(ec[i]), float(em[j]), float(overhead[i, j]), overlap)
            step = ec[1] / ec[0] if len(ec) > 1 else 1.1
            ec = best[1] * np.geomspace(1 / step, step, 21)
            em = best[2] * np.geomspace(1 / step, step, 21)
        fits.append(best)
    _, e_c, e_m, t0, overlap = min(fits)
    hw = replace(
        base,
        name=name or f"{base.name} (fit)",
        peak_flops={k: v * e_c for k, v in base.peak_flops.items()},
        memory_bandwidth=bw * e_m,
        overhead_s=t0,
        overhead_per_layer_s=0.0,
        overlap=overlap,
        source=f"fit to {len(pts)} measured forward passes of {shape.name}",
    )
    return RooflineFit(hw, e_c, e_m, t0, len(pts))


def _grid_loss(
    flops: np.ndarray,
    nbytes: np.ndarray,
    measured: np.ndarray,
    peaks: np.ndarray,
    bandwidths: np.ndarray,
    overlap: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean |log(pred/measured)| for every (peak, bandwidth) pair, t_0 = median residual (>= 0)."""
    compute = flops[None, None] / peaks[:, None, None, None]  # [Ec, 1, P, ops]
    memory = nbytes[None, None] / bandwidths[None, :, None, None]  # [1, Em, P, ops]
    roof = (np.maximum(compute, memory) if overlap else compute + memory).sum(-1)  # [Ec, Em, P]
    overhead = np.clip(np.median(measured - roof, axis=-1), 0.0, None)  # [Ec, Em]
    loss = np.abs(np.log((roof + overhead[..., None]) / measured)).mean(-1)
    return loss, overhead


def relative_errors(shape: ModelShape, hardware: Hardware, points: Iterable[Any]) -> list[float]:
    """|predicted - measured| / measured for each point."""
    errs = []
    for B, S, L, t in map(_point, points):
        errs.append(abs(forward_time(shape, hardware, B, S, L) - t) / t)
    return errs


def split_fit_holdout(points: Sequence[Any], fit_tokens: Sequence[int]) -> tuple[list[Any], list[Any]]:
    """Points whose S is in `fit_tokens` fit the model; the others test it."""
    fit = [p for p in points if _point(p)[1] in fit_tokens]
    held = [p for p in points if _point(p)[1] not in fit_tokens]
    return fit, held


# Other processes' mean run-queue length (the 1-minute load average before the benchmark started) above
# which a fit's timings are not this machine's: on 2 cores, 0.5 already takes a quarter of the CPU.
QUIET_LOAD = 0.5


def load_words(result: dict[str, Any]) -> str:
    """The load a `bench roofline` result was measured under, in words."""
    load = result.get("load_average_before")
    if not load:
        return "load not recorded"
    threads = result.get("machine", {}).get("threads") or result.get("config", {}).get("threads")
    cores = f" on {threads} threads" if threads else ""
    return (
        f"1-minute load average {load[0]:.2f} before it started{cores}: on average {load[0]:.2f} other "
        "processes were running or waiting for a core"
    )


def fit_disturbed(result: dict[str, Any]) -> bool:
    """Whether a `bench roofline` result was measured while other processes used the CPU (its fit is theirs too)."""
    load = result.get("load_average_before")
    return load is not None and len(load) > 0 and float(load[0]) > QUIET_LOAD


def roofline_from_result(result: dict[str, Any]) -> Hardware:
    """The roofline of the same run's micro-benchmark (best-of matmul and copy rates: load slows the best of
    a few short runs far less than it slows the minutes of forward passes a fit is made from), no overhead."""
    base, s, dtype = result["base_hardware"], result["summary"], result["shape"]["dtype"]
    flops, bandwidth = base["peak_flops"][dtype], base["memory_bandwidth"]
    return Hardware(
        name=f"this machine, micro-benchmark roofline ({flops / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.0f} GB/s)",
        peak_flops=dict(base["peak_flops"]),
        memory_bandwidth=bandwidth,
        overlap=s.get("overlap", False),
        source="matmul and copy rates measured by the same run (measure_this_machine), no per-forward overhead",
    )


def hardware_from_result(result: dict[str, Any]) -> Hardware:
    """The fitted Hardware stored in a `python -m specviz.bench roofline` result (roofline.json)."""
    s, dtype = result["summary"], result["shape"]["dtype"]
    load = result.get("load_average_before")
    return Hardware(
        name=f"this machine, fit to {result['shape']['name']} (measured at load {load[0] if load else '?'})",
        peak_flops={dtype: s["fitted_flops_per_s"]},
        memory_bandwidth=s["fitted_bandwidth"],
        overhead_s=s["overhead_ms"] / 1e3,
        overlap=s.get("overlap", True),
        source=f"fit to {s['fit_points']} measured forward passes; held-out median error "
        f"{s['held_out_median_rel_error']:.0%}",
    )
