"""The Theory tab: why speculation is (not) free. Four views of `specviz.cost`:

1. what-if: α, γ and tree-size sliders -> speedup curves with this pair's draft cost c and verify cost
   T(γ+1)/T(1) (measured in the last race, else the cost model's for the default pair), the race's own
   methods drawn on them, and why verifying γ tokens is nearly free on a GPU and what it costs on this CPU;
2. roofline: hardware, engine, model, batch sizes, context -> forward time vs tokens per sequence,
   the memory- and compute-bound parts, the knee, the speculation budget; this machine's measured
   points overlaid when it is selected; what the GPU engines were calibrated on and their error;
3. published vs predicted: Spec-Bench's GPU speedups next to what the calibrated model predicts, and
   which of its methods the race runs;
4. the last race: measured α, speculation length, c, verify cost per method -> the speedup its
   family's formula predicts vs the one measured.

Handlers are plain functions of widget values (tested without a server); no torch at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from specviz.cost import ENGINES, HARDWARE, SHAPES, THIS_MACHINE, get_hardware, get_shape
from specviz.cost.calibrate import fit_disturbed, hardware_from_result, load_words, roofline_from_result
from specviz.cost.families import c_text, tree_speedup
from specviz.cost.formulas import expected_tokens, optimal_gamma, speedup_with_verify_cost
from specviz.cost.hardware import Hardware
from specviz.cost.roofline import (
    arithmetic_intensity,
    cost_curve_rows,
    forward_time,
    knee_tokens,
    speculation_budget,
    verify_cost_ratio,
)
from specviz.cost.shapes import ModelShape
from specviz.errors import SpecvizError
from specviz.paths import ASSETS
from specviz.plots.roofline import cost_curves_figure, published_speedups_figure
from specviz.plots.speedup import improvement_curves_figure, predicted_vs_measured_speedup_figure, tree_size_figure
from specviz.plots.theme import signed_percent
from specviz.ui.feedback import problem_text

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from specviz.serving.race import Race
    from specviz.ui.blocks import TabContext

TAB_TITLE = "Theory"
TAB_ORDER = 55  # after PEARL's tab

LOADED_PAIR = "the loaded pair's target"
MEASURED = ASSETS.parent / "benchmarks" / "roofline" / "roofline.json"  # from `python -m specviz.bench roofline`
TARGET_STEP = MEASURED.with_name("target_step.json")  # from `python -m specviz.tools.target_step`
STEPS = ASSETS.parent / "benchmarks" / "fast-target"  # steps-<engine>/roofline.json: T(n) per engine (its README)
NO_ENGINE = "none (datasheet roofline)"
BATCH_CHOICES = [1, 4, 16, 64, 256]
TOLERANCE = 0.1  # "almost free": at most 10% over one decoding step
DEFAULT_TARGET, DEFAULT_DRAFT = "SmolLM2-135M", "SmolLM2-135M draft (4 layers)"  # the default pair's shapes
DEFAULT_CONTEXT = 256  # tokens in the cache while decoding: a prompt and a short answer
MAX_TREE = 64  # the tree-size slider's end
GPU = "H100 SXM"  # the GPU the what-if compares this CPU with
DROPDOWN_WIDTH = 290  # px: the roofline's dropdowns show their longest value whole


# ----- this machine -----------------------------------------------------------------------------


def measured_result(shape_name: str) -> dict | None:
    """This machine's committed `bench roofline` result for `shape_name`, if any."""
    if not MEASURED.exists():
        return None
    result = json.loads(MEASURED.read_text())
    return result if result.get("shape", {}).get("name") == shape_name else None


def measured_context() -> int:
    """The context this machine's forward passes were timed at (the roofline's default, so its line and crosses
    are drawn at the same context)."""
    result = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    return int(result.get("config", {}).get("context", DEFAULT_CONTEXT))


def this_machine(shape: ModelShape, engine: str = "HF eager") -> tuple[Hardware, dict | None, str]:
    """This CPU's roofline for `shape` (float32), its committed measurement (or None) and what the lines rest on.

    The fit to the measured forward passes is used unless they were timed while other processes loaded the CPU:
    then the same run's micro-benchmark rates stand in, and the note says why and what the fit would have said."""
    hw = get_hardware(THIS_MACHINE, None)
    measured = measured_result(shape.name)
    note = ""
    if measured:
        fit = hardware_from_result(measured)
        hw = fit
        if fit_disturbed(measured):
            hw = roofline_from_result(measured)
            bw = measured["base_hardware"]["memory_bandwidth"]
            context = measured["config"]["context"]
            note = (
                f"**Why not the fit to the × points:** they were timed under load ({load_words(measured)}). "
                f"The fit put the memory bandwidth at {fit.memory_bandwidth / 1e9:.1f} GB/s, "
                f"{fit.memory_bandwidth / bw:.0%} of the {bw / 1e9:.0f} GB/s a plain copy reached in the same run, "
                "so it sees every pass as waiting on the weights and prices verifying 4 drafts at "
                f"T(5)/T(1) = {verify_cost_ratio(shape, fit, 4, 1, context):.2f} (context {context}). "
                f"The lines use the run's matmul and copy rates instead: T(5)/T(1) = "
                f"{verify_cost_ratio(shape, hw, 4, 1, context):.2f}. Re-measure on a quiet machine with "
                f"`{measured.get('command', 'python -m specviz.bench roofline')}`."
            )
    if engine == NO_ENGINE:
        hw = hw.ideal()
    return hw, measured, note


# ----- 1. what-if from the measured pair --------------------------------------------------------


@dataclass(frozen=True)
class PairCost:
    """What one drafted token and one verification pass cost this pair, in decoding steps T(1)."""

    c: float  # a chain's draft cost per drafted token ÷ T(1)
    tree_c: float  # a tree's drafting time per node ÷ T(1)
    verify: Callable[[int], float]  # n drafted tokens (or tree nodes) -> T(n+1)/T(1)
    source: str  # where c and the verify cost come from, said on the plots (short)
    detail: str = ""  # which runs they come from, said under the plots
    points: tuple[dict[str, Any], ...] = ()  # the last race's methods: explain_run rows


def model_cost(context: int = DEFAULT_CONTEXT) -> PairCost:
    """The cost model's c and verify cost for the default pair's shapes on this CPU (no race needed)."""
    target, draft = (get_shape(n).with_dtype("float32") for n in (DEFAULT_TARGET, DEFAULT_DRAFT))
    hw = this_machine(target)[0]
    t1 = forward_time(target, hw, 1, 1, context)
    c = forward_time(draft, hw, 1, 1, context) / t1
    return PairCost(
        c=c,
        tree_c=0.0,
        verify=lambda n: verify_cost_ratio(target, hw, n, 1, context),
        source=f"cost model (no race yet): the default pair on this CPU, c = {c:.3f}, "
        f"T(5)/T(1) = {verify_cost_ratio(target, hw, 4, 1, context):.2f}",
    )


def measured_cost(race: Race | None) -> PairCost | None:
    """c and the verify cost measured by the last race's drafting methods; T(n+1)/T(1) = 1 + kn through their
    (n, measured verify cost) points, a forward's time on this CPU growing about linearly with its tokens.
    Runs whose timing was disturbed are left out unless every run was (then the plots say so). None when no
    drafting method finished beside the autoregressive baseline."""
    from specviz.methods import get_method
    from specviz.ui.why import explain_race

    if race is None:
        return None
    flagged = {r.name for r in race.runs if r.flags}
    drafting = [r for r in explain_race(race) if r["family"] != "parallel" and r["c"] is not None]
    rows = [r for r in drafting if r["name"] not in flagged] or drafting  # disturbed ones only when all are
    if not rows:
        return None
    disturbed = all(r["name"] in flagged for r in rows)
    # c is the draft model's time per draft over the target's step: only runs that call the draft model have one
    # (Prompt lookup's n-gram copy costs ~0 and would pull the mean below every method that runs the draft)
    drafts = [r for r in rows if get_method(r["name"]).needs_draft]
    chains = [r for r in drafts if r["family"] == "chain"]
    trees = [r for r in drafts if r["family"] != "chain"]
    k = max(0.0, sum(r["length"] * (r["verify_ratio"] - 1) for r in rows) / sum(r["length"] ** 2 for r in rows))
    c = sum(r["c"] for r in chains) / len(chains) if chains else model_cost().c
    tree_c = sum(r["c"] for r in trees) / len(trees) if trees else 0.0
    by = ", ".join(f"{r['method']} {r['verify_label']} = {r['verify_ratio']:.2f} at {r['length_text']}" for r in rows)
    source = (
        f"measured in the last race ({race.pair}): c = {c:.3f}"
        + ("" if chains else " (cost model: no chain method ran the draft model)")
        + f", verify cost 1 + {k:.3f}·γ"
        + ("<br>⚠️ its timings were disturbed by other load (see the Race tab)" if disturbed else "")
    )
    detail = f"The verify cost's line goes through {by}."
    return PairCost(c=c, tree_c=tree_c, verify=lambda n: 1.0 + k * n, source=source, detail=detail, points=tuple(rows))


def gpu_vs_cpu(context: int = DEFAULT_CONTEXT) -> str:
    """Why verifying γ drafts costs almost nothing on a GPU at batch 1, and what it costs on this CPU: timed, and
    in the cost model (intensity vs ridge)."""
    target = get_shape(DEFAULT_TARGET)
    gpu = get_hardware(GPU, None)
    cpu, _, _ = this_machine(target.with_dtype("float32"))
    i16, i32 = (arithmetic_intensity(target.with_dtype(d), 1, 5, context) for d in ("bfloat16", "float32"))
    return (
        "**Why verifying drafts is almost free on a GPU, and what it costs here.** One decoding step reads every "
        "weight once and does 2 FLOPs per weight per token; verifying γ drafts reads the same weights once for all "
        f"γ + 1 tokens. For {DEFAULT_TARGET} at 5 tokens that is {i16:.1f} FLOP per byte read in bfloat16; an {GPU} "
        f"reaches its ridge (compute time = memory time) only at {gpu.ridge_point('bfloat16'):.0f} FLOP/byte, so "
        "the pass still waits on memory and the 4 extra tokens add almost no time "
        f"(T(5)/T(1) = {verify_cost_ratio(target, gpu.ideal(), 4, 1, context):.2f} on its datasheet roofline). "
        f"This CPU in float32: {i32:.1f} FLOP/byte against a ridge of {cpu.ridge_point('float32'):.1f} "
        f"({cpu.flops_per_s('float32') / 1e9:.0f} GFLOP/s ÷ {cpu.memory_bandwidth / 1e9:.0f} GB/s): the pass "
        "waits on memory here too. "
        + measured_verify_note()
        + "The cost model adds this CPU's compute time to its memory time (its cores hide little arithmetic "
        "behind the reads, a fit to every batch size) and prices 4 drafts at "
        f"T(5)/T(1) = {verify_cost_ratio(target.with_dtype('float32'), cpu, 4, 1, context):.2f} decoding steps, "
        f"6 at {verify_cost_ratio(target.with_dtype('float32'), cpu, 6, 1, context):.2f}; once a race has run, "
        "the what-if uses the verify cost its methods measured."
    )


def measured_verify_note() -> str:
    """T(5)/T(1) as timed here on each engine (`benchmarks/fast-target/steps-*`), or nothing when not timed."""
    ratios = {}
    for engine, name in (("fast", "specviz's fast step"), ("eager", "transformers' eager forward")):
        path = STEPS / f"steps-{engine}" / "roofline.json"
        if path.exists():
            points = {
                p["n_tokens"]: p["seconds"] for p in json.loads(path.read_text())["points"] if p["batch_size"] == 1
            }
            if 1 in points and 5 in points:
                ratios[name] = points[5] / points[1]
    if not ratios:
        return ""
    timed = " and ".join(f"{r:.2f} on {name}" for name, r in ratios.items())
    return (
        f"Timed here, verifying 4 drafts costs T(5)/T(1) = {timed} (batch 1, context 256: nearly free, as the "
        "bytes say; what the two differ by is the engine's). "
    )


def explorer(
    alpha: float, gamma: int, tree_size: int, race: Race | None = None, max_gamma: int = 16
) -> tuple[go.Figure, go.Figure, str]:
    """The what-if: chain curves vs γ and tree curves vs S for a few α around the chosen one, with this
    pair's c and verify cost and the last race's methods on them, and the numbers at (α, γ, S)."""
    cost = measured_cost(race) or model_cost()
    alpha, gamma, size = round(float(alpha), 2), int(gamma), max(int(tree_size), int(gamma))
    alphas = sorted({round(a, 2) for a in (0.3, 0.5, 0.7, 0.9, alpha)})
    chain_points = [_point(r, r["length"]) for r in cost.points if r["family"] == "chain"]
    tree_points = [_point(r, r["length"]) for r in cost.points if r["family"] != "chain"]
    curves = improvement_curves_figure(
        alphas,
        cost.c,
        max_gamma,
        verify_ratio=cost.verify,
        highlight=alpha,
        cost_note=cost.source,
        points=chain_points,
    )
    tree = tree_size_figure(
        alphas,
        gamma,
        cost.tree_c,
        cost.verify,
        MAX_TREE,
        highlight=alpha,
        size=size,
        cost_note=(
            f"depth D = γ; tree drafting c = {cost.tree_c:.3f} per node"
            if cost.tree_c
            else "depth D = γ; tree drafting from n-grams (no draft model: c ≈ 0)"
        )
        + "; verify cost as on the left",
        points=tree_points,
    )
    best = optimal_gamma(alpha, cost.c, max_gamma, cost.verify)
    v = cost.verify(gamma)
    text = (
        f"**α = {alpha:.2f}, γ = {gamma}, tree size S = {size}.** c and the verify cost are this pair's, "
        f"{cost.source.replace('<br>', '; ')}. {cost.detail}\n\n"
        f"- chain: expected tokens per iteration (1−α^(γ+1))/(1−α) = **{expected_tokens(alpha, gamma):.2f}** for "
        f"γc + T(γ+1)/T(1) = {gamma}×{cost.c:.3f} + {v:.2f} = {gamma * cost.c + v:.2f} steps: "
        f"**{speedup_with_verify_cost(alpha, gamma, cost.c, v):.2f}×**; best γ for this α: **{best}** "
        f"({speedup_with_verify_cost(alpha, best, cost.c, cost.verify(best)):.2f}×).\n"
        f"- tree of {size} nodes, depth {gamma}: E[tokens](α, D) / (Sc + T(S+1)/T(1)) = "
        f"**{tree_speedup(alpha, gamma, size, cost.tree_c, cost.verify(size)):.2f}×**: a wider tree pays only when "
        "the extra branches raise α (the chance the path goes one level deeper) enough to cover its verify cost.\n\n"
        + gpu_vs_cpu()
    )
    return curves, tree, text


def _point(row: dict[str, Any], x: float) -> dict[str, Any]:
    """A race's method as a point on the what-if's curves: where it ran (γ or S) and the speedup it measured."""
    return {
        "x": x,
        "y": row["measured_speedup"],
        "label": f"{row['method']} α={row['alpha']:.2f}",
        "hover": f"{row['method']}: α = {row['alpha']:.2f}, {row['length_text']}, {c_text(row)}, "
        f"{row['verify_label']} = {row['verify_ratio']:.2f}; measured {row['measured_speedup']:.2f}×, "
        f"its formula {row['predicted_speedup']:.2f}×",
    }


# ----- 2. roofline ------------------------------------------------------------------------------


def resolve_shape(model: str, pair_name: str | None, load_pair: Callable[[str], Any] | None = None) -> ModelShape:
    """A preset shape, or the loaded pair's target (loads the pair: cached after the first time)."""
    if model == LOADED_PAIR:
        from specviz.cost.shapes import shape_from_model

        if load_pair is None:
            from specviz.models.pair import load_pair as load_any

            load_pair = load_any
        pair = load_pair(pair_name or "default")
        return shape_from_model(pair.target, name=f"{pair.name} target")
    return get_shape(model)


def roofline_view(
    hardware: str,
    model: str,
    batch_sizes: list,
    context: int,
    engine: str,
    shape: ModelShape | None = None,
    race: Race | None = None,
) -> tuple[go.Figure | None, str]:
    """Forward time vs S per batch size, the knee per B, the budget and the verify cost ratio; on this
    machine, the last race's measured verify cost beside the model's."""
    hw = get_hardware(hardware, None if engine == NO_ENGINE else engine)
    shape = shape or get_shape(model)
    measured, why = None, ""
    if hardware == THIS_MACHINE:
        shape = shape.with_dtype("float32")  # this CPU has no fast bf16 (see the preset)
        hw, measured, why = this_machine(shape, engine)
    elif shape.dtype == "float32":  # a pair loaded on this CPU: GPUs would serve it in bf16
        shape = shape.with_dtype("bfloat16")
    bs = sorted(int(b) for b in batch_sizes) or [1]
    rows = cost_curve_rows(shape, hw, bs, list(range(1, 65)), int(context))
    knees = {b: knee_tokens(shape, hw, b, int(context)) for b in bs}
    # short lines (plotly does not wrap a title; a phone's plot is ~340 px wide), each name kept whole
    subtitle = [*f"on {hw.name}".split(", ", 1)]
    if measured:
        load = measured.get("load_average_before")
        under = f", under load {load[0]:.2f}" if load else ""  # the text under the table says what it did
        subtitle += [f"× measured here at context {measured['config']['context']}{under}"]
    title = f"{shape.name} ({shape.dtype}), context {int(context)}" + "".join(
        f"<br><sub>{line}</sub>" for line in subtitle
    )
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
    if measured:
        where = f" ×: forward passes timed here at context {measured['config']['context']}"
        note += where + ("." if why else f" ({load_words(measured)}).")
    if why:
        note += "\n\n" + why
    if hardware == THIS_MACHINE and shape.name == DEFAULT_TARGET:
        note += "\n\n" + target_step_note(shape, hw)
    if hardware == THIS_MACHINE:
        note += "\n\n" + race_verify_note(race)
    else:
        note += "\n\n" + calibration_note(engine)
    return fig, "\n".join(lines) + note


def target_step_note(shape: ModelShape, hw: Hardware) -> str:
    """Why a race's decoding step of the default target takes longer than the line's T(1): the parts of one step
    timed on this CPU (`python -m specviz.tools.target_step`), against what the line prices."""
    if not TARGET_STEP.exists():
        return ""
    m = json.loads(TARGET_STEP.read_text())
    context = m["prompt_tokens"] + m["steps"] // 2  # the cache's mean length over the timed steps
    t1 = forward_time(shape, hw, 1, 1, context) * 1e3
    step, fwd, mm = m["race_step"]["cpu_ms"], m["forward"]["cpu_ms"], m["weight_matmuls"]
    weights_mb = mm["bytes"] / 1e6
    load = m["load_average_before"][0], m["load_average_after"][0]
    overhead = hw.overhead(shape.n_layers) * 1e3
    return (
        f"**Why a race's target step takes longer than T(1) here.** The line prices one decoding step of "
        f"{shape.name} at {t1:.1f} ms (context {context}): its {weights_mb:.0f} MB of weights read once at "
        f"{hw.memory_bandwidth / 1e9:.0f} GB/s and its FLOPs at {hw.flops_per_s(shape.dtype) / 1e12:.3g} TFLOP/s"
        + (f", plus {overhead:.1f} ms a pass. " if overhead >= 0.05 else ", nothing else. ")
        + f"Timed here on {m['threads']} thread{'s' if m['threads'] > 1 else ''}"
        + (f", on {m['engine']}" if "engine" in m else "")
        + f", one step of a race on the default pair took **{step:.0f} ms** of CPU time and the bare forward pass "
        f"on the same tokens {fwd:.0f} ms. Of the pass, the {mm['n_matrices']} weight matrices alone took "
        f"{mm['cpu_ms']:.0f} ms ({mm['cpu_gb_per_s']:.1f} GB/s, where a plain copy on the same thread reached "
        f"{m['copy_cpu_gb_per_s']:.0f} GB/s) and the other {fwd - mm['cpu_ms']:.0f} ms went to what the line leaves "
        "out: attention, norms, rotary embeddings, the cache's update and Python calling torch "
        f"{m['torch_calls_per_forward']} times a pass. "
        + engines_note(m)
        + (
            f"The step's other {step - fwd:.0f} ms are outside the pass (the acceptance test, the record). "
            if step - fwd >= 1
            else "What the step adds to the pass (the acceptance test, the record) is within these timings' noise. "
        )
        + f"The CPU was shared while it ran (load average {load[0]:.1f} before, {load[1]:.1f} after, on "
        f"{m['cores']} cores): the wall clock read {m['race_step']['median_ms']:.0f} ms a step. "
        "CPU time leaves out the waiting for a core, not the memory the other processes competed for, so on a "
        "quiet machine these figures may be lower. The app's races run on torch's default of "
        f"{m['default_threads']} threads. Measured with `{m['command']}`."
    )


def engines_note(m: dict[str, Any]) -> str:
    """What the engine costs beside the physics: the eager forward's step in the same timing run, if it has one."""
    eager = m.get("eager")
    if not eager or m.get("engine") == eager.get("engine"):
        return ""
    step, fwd = eager["race_step"]["cpu_ms"], eager["forward"]["cpu_ms"]
    gap = step - m["race_step"]["cpu_ms"]
    return (
        f"On {eager['engine']} (SPECVIZ_FAST=0) the same step took **{step:.0f} ms** and its pass {fwd:.0f} ms, "
        f"Python calling torch {eager['torch_calls_per_forward']} times a pass: those {gap:.0f} ms a step are the "
        "engine's, not the CPU's. "
    )


def race_verify_note(race: Race | None) -> str:
    """The verify cost the last race measured on this CPU, beside the model's T(5)/T(1) in the table, and its
    own decoding step T(1) (the autoregressive run's), beside the model's T(1)."""
    from specviz.cost.from_records import step_ms
    from specviz.methods import BASELINE

    cost = measured_cost(race)
    if race is None or cost is None:
        return "Run a race to see the verify cost T(γ+1)/T(1) its methods measured here, beside the model's."
    rows = ", ".join(
        f"{r['method']}: {r['verify_label']} = {r['verify_ratio']:.2f} at {r['length_text']}" for r in cost.points
    )
    base = next((r for r in race.runs if r.name == BASELINE and r.records), None)
    t1 = step_ms(base.records) if base is not None else None
    step = f"; its decoding step T(1) = {t1:.1f} ms (the autoregressive run's mean, wall clock)" if t1 else ""
    return f"**Measured in the last race** ({race.pair}, batch 1, context ≈ its prompt and output): {rows}{step}."


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
    text += f" (sources: {', '.join(published_sources())})."
    return text


def published_sources() -> list[str]:
    """The papers and repositories the published GPU figures come from, as links."""
    from specviz.cost.published import SOURCE_LINKS

    return [f"{name}: {link}" for name, link in SOURCE_LINKS.items()]


# ----- 3. published vs predicted ------------------------------------------------------------------


def published_view() -> tuple[go.Figure | None, str]:
    """Spec-Bench's speedups next to the cost model's predictions, the fit's summary, and which method of the
    race each published method corresponds to."""
    from specviz.cost import published
    from specviz.methods import get_method

    rows = published.comparison()
    speedups = [r for r in rows if r["kind"] == "speedup"]
    table = [
        "| GPU | model | method | τ | published | predicted | error | used for |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table += [
        f"| {r['chip']} | {r['model']} | {r['method']} | {r['mean_accepted']} | {r['published']:.2f}× | "
        f"{r['predicted']:.2f}× | {signed_percent(r['error'])} | {'fit' if r['role'] == 'fit' else 'held out'} |"
        for r in speedups
    ]
    mapping = ["| Spec-Bench method | in the race | how they relate |", "|---|---|---|"]
    for method, (name, how) in published.RACE_COUNTERPARTS.items():
        mapping.append(f"| {method} | {get_method(name).label if name else '—'} | {how} |")
    summary = published.summary(rows)
    lines = [f"- {k}: **{v}**" for k, v in summary.items() if k.startswith("Spec-Bench Vicuna-7B")]
    text = (
        "τ is the published mean accepted tokens per step; the prediction is τ · T_AR / (the step's passes), "
        "with each method's passes as Spec-Bench runs them (fp16, batch 1, greedy). Sources: "
        + "; ".join(published_sources())
        + ".\n\n"
        + "\n".join(lines)
        + "\n\n**The published methods and the race's:**\n\n"
        + "\n".join(mapping)
        + "\n\n"
        + "\n".join(table)
    )
    return published_speedups_figure(speedups), text


# ----- 4. the last race -------------------------------------------------------------------------


def race_view(race: Race) -> tuple[go.Figure | None, str]:
    """Predicted vs measured speedup for every finished method of the last race (ctx.race's value)."""
    from specviz.ui.why import explain_race, why_markdown

    if race is None:
        return None, "Run a race first (Race tab): it is explained here once it finishes."
    rows = explain_race(race)
    if not rows:
        return None, why_markdown(race)
    return predicted_vs_measured_speedup_figure(rows), why_markdown(race)


# ----- the tab ----------------------------------------------------------------------------------


def race_finished(race: Race) -> bool:
    """Whether every method of `race` has stopped (a what-if from a race still running would move under the reader)."""
    return race is not None and not any(r.status in ("queued", "waiting", "running") for r in race.runs)


def roofline_handler(ctx: TabContext) -> Callable:
    """The roofline's handler: the loaded pair's shape through `ctx.resolve`, which loads a pair not loaded yet
    only in a turn on the models (never beside a timed race)."""

    def on_roofline(
        hw: str, m: str, b: list, ctx_len: int, eng: str, pair_name: str | None, race: Race | None = None
    ) -> tuple[go.Figure | None, str]:
        try:
            shape = resolve_shape(m, pair_name, lambda n: ctx.resolve(n)[0])
            return roofline_view(hw, m, b, ctx_len, eng, shape=shape, race=race)
        except (SpecvizError, OSError, ValueError) as e:  # a user's choice (or a pair that cannot load): said here
            return None, f"**Cannot draw this:** {problem_text(e)}"

    return on_roofline


def build_tab(ctx: TabContext) -> None:
    """The Theory tab: the what-if, the roofline, the published figures and the last race through its formulas;
    each view of the last race follows it as it finishes."""
    views = [whatif_section(ctx), roofline_section(ctx)]
    published_section()
    follow_the_race(ctx, [*views, last_race_section(ctx)])


@dataclass
class RaceView:
    """A part of the tab drawn from the last race: `draw(*inputs, race)` -> the value of `outputs` (a tuple for
    several)."""

    inputs: list[Any]  # the view's own widgets; the race (ctx.race's value) is passed after them
    outputs: list[Any]
    draw: Callable[..., Any]


def whatif_section(ctx: TabContext) -> RaceView:
    """α, γ and S sliders; the speedup curves with the pair's c and verify cost (the last race's, once one ran)."""
    import gradio as gr

    gr.Markdown(
        "### What if: α, speculation length γ and tree size S, with this pair's draft cost c and verify cost "
        "(Leviathan et al.; SSSD)"
    )
    with gr.Row():
        alpha = gr.Slider(
            0.0, 0.99, value=0.7, step=0.01, label="α: chance a drafted token is accepted (see the Race glossary)"
        )
        gamma = gr.Slider(1, 16, value=4, step=1, label="speculation length γ (a tree's depth)")
        size = gr.Slider(1, MAX_TREE, value=16, step=1, label="tree size S (nodes verified in one pass)")
    first = explorer(alpha.value, gamma.value, size.value)  # drawn at build time: pure Python, a few ms
    with gr.Row():
        curves = gr.Plot(first[0], label="speedup vs γ", show_label=False, elem_id="sv-whatif-chain")
        tree = gr.Plot(first[1], label="speedup vs tree size", show_label=False, elem_id="sv-whatif-tree")
    numbers = gr.Markdown(first[2], elem_id="sv-whatif-text")
    own = [alpha, gamma, size]
    for w in own:
        w.change(explorer, [*own, ctx.race], [curves, tree, numbers], show_progress="hidden")
    return RaceView(own, [curves, tree, numbers], explorer)


def roofline_section(ctx: TabContext) -> RaceView:
    """The roofline: hardware, model, engine, batch sizes and context; its note explains the last race."""
    import gradio as gr

    gr.Markdown("### Roofline: what one forward pass costs, and how many drafted tokens ride along for free")
    # the default pair's target is a preset shape: start there (no model load), on this machine;
    # other pairs: a 7B on an H100
    on_default = getattr(ctx.pair, "value", None) in ("default", None)
    start = DEFAULT_TARGET if on_default else "Llama-2-7B"
    with gr.Row():  # wide enough for the longest choice ("This machine (2-core CPU)"), a row each on a phone
        hardware = gr.Dropdown(
            list(HARDWARE),
            value=THIS_MACHINE if on_default else "H100 SXM",
            label="hardware",
            min_width=DROPDOWN_WIDTH,
            elem_id="sv-roofline-hardware",
        )
        model = gr.Dropdown(
            [*SHAPES, LOADED_PAIR], value=start, label="model", min_width=DROPDOWN_WIDTH, elem_id="sv-roofline-model"
        )
        engine = gr.Dropdown(
            [*ENGINES, NO_ENGINE],
            value="HF eager",
            label="engine (GPUs)",
            min_width=DROPDOWN_WIDTH,
            elem_id="sv-roofline-engine",
        )
    with gr.Row():
        batch = gr.CheckboxGroup(BATCH_CHOICES, value=[1, 4, 16, 64], label="batch sizes B")
        context = gr.Slider(0, 8192, value=measured_context(), step=64, label="context length L (tokens in the cache)")
    first = roofline_view(hardware.value, model.value, batch.value, context.value, engine.value)
    roof_plot = gr.Plot(
        first[0], label="forward time vs tokens per sequence", show_label=False, elem_id="sv-roofline-plot"
    )
    roof_table = gr.Markdown(first[1], elem_id="sv-roofline-text")

    on_roofline = roofline_handler(ctx)
    own = [hardware, model, batch, context, engine, ctx.pair]
    for widget in (hardware, model, batch, context, engine):
        widget.change(on_roofline, [*own, ctx.race], [roof_plot, roof_table], show_progress="hidden")

    def note(*inputs: Any) -> str:
        """The roofline's text again: its note explains the last race (the plot does not change with it)."""
        return on_roofline(*inputs)[1]

    return RaceView(own, [roof_table], note)


def published_section() -> None:
    """Spec-Bench's published GPU speedups beside the cost model's, on a button."""
    import gradio as gr

    gr.Markdown("### Published GPU speedups vs the cost model (Spec-Bench, Vicuna, fp16, batch 1)")
    show = gr.Button("Compare with the published figures")
    published_plot = gr.Plot(label="published vs predicted speedup", show_label=False)
    published_text = gr.Markdown()
    show.click(published_view, None, [published_plot, published_text], api_visibility="private")


def last_race_section(ctx: TabContext) -> RaceView:
    """The last race's methods through their formulas: predicted vs measured speedup."""
    import gradio as gr

    gr.Markdown(
        "### The last race through its methods' formulas: measured α, speculation length, c and verify cost → "
        "predicted speedup"
    )
    explain = gr.Button("Explain the last race")
    race_plot = gr.Plot(label="predicted vs measured speedup", show_label=False, elem_id="sv-theory-race-plot")
    race_table = gr.Markdown(elem_id="sv-theory-race")
    explain.click(race_view, [ctx.race], [race_plot, race_table])  # drawn again on demand
    return RaceView([], [race_plot, race_table], race_view)


def follow_the_race(ctx: TabContext, views: list[RaceView]) -> None:
    """Redraw every view of the last race once it has ended: the Race tab puts a race's last snapshot (an
    immutable `Race`) in ctx.race when it ends, a saved race loaded is one too, and each is a change of
    ctx.race. A race that has only begun is not handed on (its views would move under the reader)."""
    import gradio as gr

    inputs = [x for v in views for x in v.inputs] + [ctx.race]
    outputs = [x for v in views for x in v.outputs]

    def redraw(*values: Any) -> tuple[Any, ...]:
        race = values[-1]
        if not race_finished(race):
            return tuple(gr.skip() for _ in outputs)
        drawn, at = [], 0
        for v in views:
            own = values[at : at + len(v.inputs)]
            at += len(v.inputs)
            value = v.draw(*own, race)
            drawn += list(value) if len(v.outputs) > 1 else [value]
        return tuple(drawn)

    ctx.race.change(redraw, inputs, outputs, show_progress="hidden", api_visibility="private")
