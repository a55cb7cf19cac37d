"""Calibrate the roofline against this machine: time real forward passes of a target (and a draft)
for S = 1..64 new tokens per sequence and B in {1, 4, 16}, fit the efficiencies and the per-forward
overhead on a few points, and report the error on the others.

    python -m specviz.bench roofline --shape SmolLM2-135M --context 256 --out results/roofline

Random weights: a forward pass costs the same whatever the weights, so no checkpoint is needed.
Writes roofline.json (points, fit, errors, machine load) and HTML figures.

    python -m specviz.bench roofline --published --out benchmarks/roofline

fits the GPU engines (specviz.cost.hardware.ENGINES) to the published measurements instead
(specviz/cost/published.csv) and writes published.md and published.json: every predicted row,
published vs predicted, and the error on the rows not used to fit. No GPU is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m specviz.bench roofline", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="SmolLM2-135M", help="target shape (specviz.cost.SHAPES)")
    p.add_argument("--draft-shape", default="", help="also time this draft shape at batch sizes 1 (for c)")
    p.add_argument("--dtype", default="auto", help="auto (float32, as the races run) | float32 | bfloat16")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 4, 16])
    p.add_argument("--tokens", type=_ints, default=[1, 2, 4, 8, 16, 32, 64], help="S values, new tokens per sequence")
    p.add_argument("--fit-tokens", type=_ints, default=[1, 64], help="S values whose points fit the model")
    p.add_argument("--context", type=int, default=256, help="L, cached tokens per sequence")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--out", type=Path, default=Path("results/roofline"))
    p.add_argument("--from-json", type=Path, help="redraw figures and tables from an earlier roofline.json")
    p.add_argument("--published", action="store_true", help="fit the GPU engines to published measurements (no timing)")
    return p.parse_args(argv)


def published(out: Path) -> int:
    """Fit every engine to its published rows; write the comparison (published.md, published.json)."""
    from dataclasses import asdict

    from specviz.cost import published as pub

    engines = {name: pub.round_engine(e) for name, e in pub.calibrate().items()}
    rows = pub.comparison(engines)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m specviz.bench roofline --published --out " + str(out)
    (out / "published.md").write_text(
        f"# Published GPU measurements vs the cost model\n\n`{command}`\n\n" + pub.report_markdown(engines, rows)
    )
    payload = {
        "command": command,
        "engines": {k: asdict(e) for k, e in engines.items()},
        "summary": pub.summary(rows),
        "rows": rows,
    }
    (out / "published.json").write_text(json.dumps(payload, indent=1))
    for line in [*map(pub.engine_line, engines.values()), *(f"{k}: {v}" for k, v in pub.summary(rows).items())]:
        print(line)
    print(f"wrote {out}/published.md and published.json")
    return 0


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.published:
        return published(args.out)
    if args.from_json:  # refit and redraw an earlier measurement (fit and figures are cheap)
        from specviz.reports import read_json

        result = read_json(args.from_json)
        result["config"]["fit_tokens"] = args.fit_tokens
    else:
        result = measure(args, argv)
    analyse(result, args.fit_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "roofline.json").write_text(json.dumps(result, indent=1))
    write_figures(result, args.out)
    report(result)
    print(f"wrote {args.out}/roofline.json and figures")
    return 0


def measure(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """Time the forward passes (and the micro-benchmark the fit starts from): the raw result."""
    import torch

    from specviz.cost import get_shape, measure_this_machine
    from specviz.cost.hardware import PRESETS, preset_for
    from specviz.cost.measure import measure_forward_times, random_model
    from specviz.harness import describe_machine
    from specviz.models.devices import moved, resolve_device, resolve_dtype

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = str(resolve_dtype(args.dtype, device)).removeprefix("torch.")
    shape = get_shape(args.shape).with_dtype(dtype)
    load_before = load_average()
    t0 = time.time()
    if device.type == "cpu":
        base = measure_this_machine(name="this machine (micro-benchmark)")
    else:  # a datasheet preset for the GPU we are on
        base = PRESETS[preset_for("cuda", torch.cuda.get_device_name(0))].ideal()
    print(
        f"{base.name}: {base.flops_per_s(dtype) / 1e9:.1f} GFLOP/s {dtype}, {base.memory_bandwidth / 1e9:.1f} GB/s; "
        f"load average {load_before}"
    )
    print(f"timing {shape.name} ({dtype}, random weights) on {device}, L={args.context}:")
    model = moved(random_model(shape), device)
    points = [
        t.as_dict()
        for t in measure_forward_times(model, args.batch_sizes, args.tokens, args.context, args.repeats, progress=True)
    ]
    del model
    draft_points = []
    if args.draft_shape:
        dshape = get_shape(args.draft_shape).with_dtype(dtype)
        print(f"timing draft {dshape.name}:")
        dmodel = moved(random_model(dshape), device)
        draft_points = [
            t.as_dict() for t in measure_forward_times(dmodel, [1], [1], args.context, args.repeats, progress=True)
        ]
        del dmodel
    return {
        "experiment": "roofline",
        "command": "python -m specviz.bench roofline " + " ".join(argv or []),
        "machine": describe_machine(str(device)),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "elapsed_s": time.time() - t0,
        "shape": shape.__dict__,
        "base_hardware": {"name": base.name, "peak_flops": base.peak_flops, "memory_bandwidth": base.memory_bandwidth},
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "points": points,
        "draft_points": draft_points,
    }


def analyse(result: dict, fit_tokens: list[int]) -> None:
    """Fit on the points with S in `fit_tokens`, test on the rest; adds predictions, summary, theory."""
    from specviz.cost import Hardware, ModelShape, forward_time
    from specviz.cost.calibrate import fit_roofline, relative_errors, split_fit_holdout

    shape = ModelShape(**result["shape"])
    b = result["base_hardware"]
    base = Hardware(b["name"], b["peak_flops"], b["memory_bandwidth"])
    points = result["points"]
    fit_pts, held = split_fit_holdout(points, fit_tokens)
    fit = fit_roofline(shape, base, fit_pts)
    held_err = relative_errors(shape, fit.hardware, held)
    raw_err = relative_errors(shape, base, points)  # the micro-benchmark/datasheet roofline, no overhead
    for p in points:
        p["predicted_s"] = forward_time(shape, fit.hardware, p["batch_size"], p["n_tokens"], p["context_len"])
        p["roofline_only_s"] = forward_time(shape, base, p["batch_size"], p["n_tokens"], p["context_len"])
        p["used_for_fit"] = p["n_tokens"] in fit_tokens
    summary = {
        "fit_tokens": list(fit_tokens),
        "fit_points": len(fit_pts),
        "held_out_points": len(held),
        "held_out_median_rel_error": statistics.median(held_err) if held_err else None,
        "held_out_max_rel_error": max(held_err) if held_err else None,
        "roofline_only_median_rel_error": statistics.median(raw_err),
        "compute_efficiency": fit.compute_efficiency,
        "memory_efficiency": fit.memory_efficiency,
        "overhead_ms": fit.overhead_s * 1e3,
        "overlap": fit.hardware.overlap,
        "fitted_flops_per_s": fit.hardware.flops_per_s(shape.dtype),
        "fitted_bandwidth": fit.hardware.memory_bandwidth,
    }
    if result.get("draft_points"):
        t1 = next(p["seconds"] for p in points if p["batch_size"] == 1 and p["n_tokens"] == 1)
        summary["c_draft_over_target"] = result["draft_points"][0]["seconds"] / t1
    result["summary"] = summary
    result["theory"] = theory_tables(shape.name, result["config"]["context"])


def report(result: dict) -> None:
    s = result["summary"]
    print(
        f"fit on {s['fit_points']} points (S in {s['fit_tokens']}): e_c={s['compute_efficiency']:.2f} "
        f"e_m={s['memory_efficiency']:.2f} overhead={s['overhead_ms']:.1f} ms "
        f"({'max' if s['overlap'] else 'sum'} of compute and memory time)"
    )
    if s["held_out_points"]:
        print(
            f"held-out median relative error {s['held_out_median_rel_error']:.1%} over {s['held_out_points']} points "
            f"(max {s['held_out_max_rel_error']:.1%}); roofline without fit: {s['roofline_only_median_rel_error']:.1%}"
        )
    if "c_draft_over_target" in s:
        print(f"c = T_draft / T_target at B=1, S=1: {s['c_draft_over_target']:.3f}")
    print(f"load average before {result['load_average_before']}, after {result['load_average_after']}")


def theory_tables(shape_name: str, context: int, batch_sizes: tuple[int, ...] = (1, 4, 16, 64)) -> dict:
    """Per hardware preset: speculation budget (≤10% extra) and knee per batch size, for the
    measured shape and for Llama-2-7B (the SSSD-sized case), with and without per-forward overhead."""
    from specviz.cost import HARDWARE, THIS_MACHINE, get_hardware, get_shape, knee_tokens, speculation_budget

    out: dict[str, dict[str, dict[str, Any]]] = {}  # shape -> hf-eager / ideal -> hardware -> budget, knee
    for name in dict.fromkeys([shape_name, "Llama-2-7B"]):
        for hw in HARDWARE.values():
            shape = get_shape(name).with_dtype("float32" if hw.name == THIS_MACHINE else "bfloat16")
            for label, h in (("hf-eager", get_hardware(hw.name)), ("ideal", hw.ideal())):
                out.setdefault(name, {}).setdefault(label, {})[hw.name] = {
                    "budget": {b: speculation_budget(shape, h, b, context) for b in batch_sizes},
                    "knee": {b: knee_tokens(shape, h, b, context) for b in batch_sizes},
                }
    return out


def measured_verify_ratio(points: list[dict], batch_size: int) -> Callable[[int], float]:
    """γ -> T(γ+1)/T(1) from measured points at one batch size (log-log interpolation in S)."""
    import numpy as np

    rows = sorted((p["n_tokens"], p["seconds"]) for p in points if p["batch_size"] == batch_size)
    s, t = np.log([r[0] for r in rows]), np.log([r[1] for r in rows])
    t1 = rows[0][1]
    return lambda g: float(np.exp(np.interp(np.log(g + 1), s, t))) / t1


def write_figures(result: dict, out: Path) -> None:
    """The calibration and theory figures as HTML (plotly.js from the CDN keeps them small)."""
    from specviz.plots.roofline import budget_bars_figure, cost_curves_figure, predicted_vs_measured_figure
    from specviz.plots.speedup import improvement_curves_figure, speedup_heatmap_figure, speedup_vs_alpha_figure

    pts = result["points"]
    predicted = [dict(p, seconds=p["predicted_s"]) for p in pts]
    name, L = result["shape"]["name"], result["config"]["context"]
    c = result["summary"].get("c_draft_over_target", 0.1)
    max_s = max(p["n_tokens"] for p in pts)
    figs = {
        "cost_curves.html": cost_curves_figure(
            predicted,
            measured=pts,
            title=f"{name}: forward time vs tokens per sequence, measured (×) and fitted roofline (L={L})",
        ),
        "cost_ratio.html": cost_curves_figure(
            predicted,
            measured=pts,
            normalize=True,
            title=f"{name}: verification cost T(S)/T(1), measured (×) and fitted",
        ),
        "predicted_vs_measured.html": predicted_vs_measured_figure(pts),
        "speedup_vs_alpha.html": speedup_vs_alpha_figure([0.01, 0.05, 0.1, 0.2, 0.5], fixed_gamma=4),
        "speedup_heatmap.html": speedup_heatmap_figure(c, 16),
    }
    for b in sorted({p["batch_size"] for p in pts}):
        ratio = measured_verify_ratio(pts, b)
        fig = improvement_curves_figure([0.5, 0.7, 0.8, 0.9], c, min(16, max_s - 1), verify_ratio=ratio)
        fig.update_layout(
            title=f"Speedup vs γ with this machine's measured verify cost, B={b}, c={c:.3f} (SSSD Fig. 2)"
        )
        figs[f"speedup_measured_cost_B{b}.html"] = fig
    theory = result.get("theory", {})
    for shape_name, by_label in theory.items():
        budgets = {hw: v["budget"] for hw, v in by_label.get("ideal", {}).items()}
        fig = budget_bars_figure(budgets, 0.1)
        fig.update_layout(
            title=f"{shape_name}, L={L}, ideal kernels: drafts per sequence that cost ≤ 10% over one step"
        )
        figs[f"budget_{shape_name}.html"] = fig
    for fname, fig in figs.items():
        fig.write_html(out / fname, include_plotlyjs="cdn")


if __name__ == "__main__":
    raise SystemExit(main())
