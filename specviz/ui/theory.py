"""The Theory tab: why speculation is (not) free. Three views of `specviz.cost`:

1. explorer: α, γ, c sliders -> improvement-factor curves (OSD Fig. 2 family), optimal γ starred;
2. roofline: hardware, engine, model, batch sizes, context -> forward time vs tokens per sequence,
   the memory- and compute-bound parts, the knee, the speculation budget; this machine's measured
   points overlaid when it is selected; what the GPU engines were calibrated on and their error;
3. published vs predicted: Spec-Bench's GPU speedups next to what the calibrated model predicts;
4. the last race: measured α, speculation length, c, verify cost per method -> the speedup its
   family's formula predicts vs the one measured.

Handlers are plain functions of widget values (tested without a server); no torch at import.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from specviz.cost import ENGINES, HARDWARE, SHAPES, THIS_MACHINE, get_hardware, get_shape
from specviz.cost.calibrate import hardware_from_result
from specviz.cost.formulas import expected_tokens, improvement_factor, optimal_gamma
from specviz.cost.roofline import cost_curve_rows, knee_tokens, speculation_budget, verify_cost_ratio
from specviz.errors import SpecvizError
from specviz.paths import ASSETS
from specviz.plots.roofline import cost_curves_figure, published_speedups_figure
from specviz.plots.speedup import (
    improvement_curves_figure,
    predicted_vs_measured_speedup_figure,
    speedup_heatmap_figure,
)
from specviz.ui.feedback import problem_text

TAB_TITLE = "Theory"
TAB_ORDER = 50

LOADED_PAIR = "the loaded pair's target"
MEASURED = ASSETS.parent / "benchmarks" / "roofline" / "roofline.json"  # from `python -m specviz.bench roofline`
NO_ENGINE = "none (datasheet roofline)"
BATCH_CHOICES = [1, 4, 16, 64, 256]
TOLERANCE = 0.1  # "almost free": at most 10% over one decoding step


# ----- 1. explorer ------------------------------------------------------------------------------


def explorer(alpha: float, gamma: int, c: float, max_gamma: int = 16):
    """Curves for a few α around the chosen one, a heatmap over (α, γ), and the numbers at (α, γ, c)."""
    alphas = sorted({round(a, 2) for a in (0.3, 0.5, 0.7, 0.9, alpha)})
    curves = improvement_curves_figure(alphas, c, max_gamma, highlight=round(alpha, 2))
    heat = speedup_heatmap_figure(c, max_gamma)
    best = optimal_gamma(alpha, c, max_gamma)
    text = (
        f"**α = {alpha:.2f}, γ = {gamma}, c = {c:.3f}**: expected tokens per iteration "
        f"(1−α^(γ+1))/(1−α) = **{expected_tokens(alpha, gamma):.2f}**; improvement factor "
        f"(1−α^(γ+1))/((1−α)(γc+1)) = **{improvement_factor(alpha, gamma, c):.2f}×**. "
        f"Best γ for this α and c: **{best}** ({improvement_factor(alpha, best, c):.2f}×). "
        "This assumes verifying γ + 1 tokens costs one decoding step (a GPU at batch 1); a CPU pays more, "
        "and the Race tab's table under the board uses the verify cost each race measured."
    )
    return curves, heat, text


# ----- 2. roofline ------------------------------------------------------------------------------


def resolve_shape(model: str, pair_name: str | None, load_pair=None):
    """A preset shape, or the loaded pair's target (loads the pair: cached after the first time)."""
    if model == LOADED_PAIR:
        from specviz.cost.shapes import shape_from_model

        if load_pair is None:
            from specviz.models.pair import load_pair
        pair = load_pair(pair_name or "default")
        return shape_from_model(pair.target, name=f"{pair.name} target")
    return get_shape(model)


def measured_result(shape_name: str) -> dict | None:
    """This machine's committed `bench roofline` result for `shape_name`, if any."""
    if not MEASURED.exists():
        return None
    result = json.loads(MEASURED.read_text())
    return result if result.get("shape", {}).get("name") == shape_name else None


def roofline_view(hardware: str, model: str, batch_sizes: list, context: int, engine: str, shape=None):
    """Forward time vs S per batch size, the knee per B, the budget and the verify cost ratio."""
    hw = get_hardware(hardware, None if engine == NO_ENGINE else engine)
    shape = shape or get_shape(model)
    measured = None
    if hardware == THIS_MACHINE:
        shape = shape.with_dtype("float32")  # this CPU has no fast bf16 (see the preset)
        measured = measured_result(shape.name)
        if measured:  # the roofline fitted to these very measurements
            hw = hardware_from_result(measured)
        hw = hw.ideal() if engine == NO_ENGINE else hw
    elif shape.dtype == "float32":  # a pair loaded on this CPU: GPUs would serve it in bf16
        shape = shape.with_dtype("bfloat16")
    bs = sorted(int(b) for b in batch_sizes) or [1]
    rows = cost_curve_rows(shape, hw, bs, list(range(1, 65)), int(context))
    knees = {b: knee_tokens(shape, hw, b, int(context)) for b in bs}
    title = f"{shape.name} ({shape.dtype}) on {hw.name}, context {int(context)}"
    if measured:
        title += f" — × measured here at context {measured['config']['context']}"
    fig = cost_curves_figure(rows, measured=measured["points"] if measured else None, title=title, knees=knees)
    lines = [f"| B | T(1) ms | T(5)/T(1) | budget γ (≤{TOLERANCE:.0%} extra) | knee S |", "|---|---|---|---|---|"]
    for b in bs:
        t1 = next(r["seconds"] for r in rows if r["batch_size"] == b and r["n_tokens"] == 1)
        lines.append(
            f"| {b} | {t1 * 1e3:.2f} | {verify_cost_ratio(shape, hw, 4, b, int(context)):.2f} | "
            f"{speculation_budget(shape, hw, b, int(context), TOLERANCE)} | {knees[b] or '>65k'} |"
        )
    note = (
        f"\n\n{hw.name}: {hw.flops_per_s(shape.dtype) / 1e12:.3g} TFLOP/s {shape.dtype}, "
        f"{hw.memory_bandwidth / 1e9:.0f} GB/s, overhead {hw.overhead(shape.n_layers) * 1e3:.1f} ms per forward "
        f"({hw.source}). Solid: memory-bound, dashed: compute-bound, ○: knee."
    )
    if hardware != THIS_MACHINE:
        note += "\n\n" + calibration_note(engine)
    return fig, "\n".join(lines) + note


@cache
def published_errors() -> tuple[dict, dict]:
    """The cost model's errors on published GPU figures: the summary, and per chip the held-out
    Spec-Bench methods within 15 % (computed, not read back from a report)."""
    from specviz.cost import published

    rows = published.comparison()
    return published.summary(rows), published.held_out_within(rows)


def calibration_note(engine: str) -> str:
    """What a GPU curve rests on: datasheet figures, and the engine's calibration and its error."""
    if engine == NO_ENGINE:
        return (
            "**Datasheet roofline**: peak compute and bandwidth, no framework time; real engines are slower "
            "(pick one above)."
        )
    text = f"**{engine}** is calibrated on published measurements ({ENGINES[engine].source}); no GPU ran here."
    s, within_by_chip = published_errors()
    forward = s.get(f"forward {engine} test: median |error|")
    if forward is not None:
        text += f" Median error on held-out published forward times: **{forward:.0%}**"
    if engine == "HF eager" and s.get("Spec-Bench test: median |error|") is not None:
        text += f"; on held-out Spec-Bench speedups (Vicuna-7B): **{s['Spec-Bench test: median |error|']:.0%}**"
        within = [f"{chip} {len(methods)} of {held}" for chip, (methods, held) in within_by_chip.items()]
        text += f" (methods within 15 %: {', '.join(within)})" if within else ""
    text += " (`benchmarks/roofline/published.md`)."
    return text


# ----- 3. published vs predicted ------------------------------------------------------------------


def published_view():
    """Spec-Bench's speedups next to the cost model's predictions, and the fit's summary."""
    from specviz.cost import published

    rows = published.comparison()
    speedups = [r for r in rows if r["kind"] == "speedup"]
    table = ["| GPU | model | method | τ | published | predicted | error | |", "|---|---|---|---|---|---|---|---|"]
    table += [
        f"| {r['chip']} | {r['model']} | {r['method']} | {r['mean_accepted']} | {r['published']:.2f}× | "
        f"{r['predicted']:.2f}× | {r['error']:+.0%} | {'fit' if r['role'] == 'fit' else 'held out'} |"
        for r in speedups
    ]
    summary = published.summary(rows)
    lines = [f"- {k}: **{v}**" for k, v in summary.items() if k.startswith("Spec-Bench Vicuna-7B")]
    text = (
        "τ is the published mean accepted tokens per step; the prediction is τ · T_AR / (the step's passes), "
        "with each method's passes as Spec-Bench runs them (`specviz/cost/published.py`). Sources and every row: "
        "`specviz/cost/published.csv`, `benchmarks/roofline/published.md`.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(table)
    )
    return published_speedups_figure(speedups), text


# ----- 4. the last race -------------------------------------------------------------------------


def race_view(race: Any):
    """Predicted vs measured speedup for every finished method of the last race (ctx.race's value)."""
    from specviz.ui.why import explain_race, why_markdown

    if race is None:
        return None, "Run a race first (Race tab); then press the button again."
    rows = explain_race(race)
    if not rows:
        return None, why_markdown(race)
    return predicted_vs_measured_speedup_figure(rows), why_markdown(race)


# ----- the tab ----------------------------------------------------------------------------------


def build_tab(ctx: Any) -> None:
    import gradio as gr

    gr.Markdown("### Expected speedup (Leviathan et al.): α, speculation length γ, draft cost c")
    with gr.Row():
        alpha = gr.Slider(
            0.0, 0.99, value=0.7, step=0.01, label="α: chance a drafted token is accepted (see the Race glossary)"
        )
        gamma = gr.Slider(1, 16, value=4, step=1, label="speculation length γ")
        c = gr.Slider(0.0, 1.0, value=0.05, step=0.005, label="draft cost c = T_draft / T_target")
    first = explorer(alpha.value, gamma.value, c.value)  # drawn at build time: pure Python, a few ms
    numbers = gr.Markdown(first[2])
    with gr.Row():
        curves = gr.Plot(first[0], label="speedup vs γ", show_label=False)
        heat = gr.Plot(first[1], label="speedup over (α, γ)", show_label=False)
    for w in (alpha, gamma, c):
        w.change(explorer, [alpha, gamma, c], [curves, heat, numbers], show_progress="hidden")

    gr.Markdown("### Roofline: what one forward pass costs, and how many drafted tokens ride along for free")
    with gr.Row():
        # the default pair's target is a preset shape: start there (no model load), on this machine;
        # other pairs: a 7B on an H100
        on_default = getattr(ctx.pair, "value", None) in ("default", None)
        start = "SmolLM2-135M" if on_default else "Llama-2-7B"
        hardware = gr.Dropdown(list(HARDWARE), value=THIS_MACHINE if on_default else "H100 SXM", label="hardware")
        model = gr.Dropdown([*SHAPES, LOADED_PAIR], value=start, label="model")
        batch = gr.CheckboxGroup(BATCH_CHOICES, value=[1, 4, 16, 64], label="batch sizes B")
        context = gr.Slider(0, 8192, value=1024, step=64, label="context length L")
        engine = gr.Dropdown([*ENGINES, NO_ENGINE], value="HF eager", label="engine (GPUs)")
    first = roofline_view(hardware.value, model.value, batch.value, context.value, engine.value)
    roof_plot = gr.Plot(first[0], label="forward time vs tokens per sequence", show_label=False)
    roof_table = gr.Markdown(first[1])

    def on_roofline(hw, m, b, ctx_len, eng, pair_name):
        try:
            shape = resolve_shape(m, pair_name, ctx.load_pair)
            return roofline_view(hw, m, b, ctx_len, eng, shape=shape)
        except (
            SpecvizError,
            OSError,
            ValueError,
        ) as e:  # a user's choice (or a pair that cannot load): said in the tab; a fault raises
            return None, f"**Cannot draw this:** {problem_text(e)}"

    roof_inputs = [hardware, model, batch, context, engine, ctx.pair]
    for widget in (hardware, model, batch, context, engine):
        widget.change(on_roofline, roof_inputs, [roof_plot, roof_table], show_progress="hidden")

    gr.Markdown("### Published GPU speedups vs the cost model (Spec-Bench, Vicuna, fp16, batch 1)")
    show = gr.Button("Compare with the published figures")
    published_plot = gr.Plot(label="published vs predicted speedup", show_label=False)
    published_text = gr.Markdown()
    show.click(published_view, None, [published_plot, published_text], api_visibility="private")

    gr.Markdown(
        "### The last race through its methods' formulas: measured α, speculation length, c and verify cost → "
        "predicted speedup"
    )
    explain = gr.Button("Explain the last race")
    race_plot = gr.Plot(label="predicted vs measured speedup", show_label=False)
    race_table = gr.Markdown()
    explain.click(race_view, [ctx.race], [race_plot, race_table])
