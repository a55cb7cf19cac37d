"""Calibration, measurement plumbing, records -> formula inputs, figures and the Theory tab's handlers
(no server, no timing asserts)."""

from __future__ import annotations

from dataclasses import replace

import plotly.graph_objects as go
import pytest

from specviz.cost import cost_curve_rows, forward_time, get_hardware, get_shape
from specviz.cost.calibrate import fit_roofline, relative_errors, split_fit_holdout
from specviz.cost.families import CHAIN
from specviz.cost.from_records import estimate_alpha, explain_run
from specviz.records import IterationRecord
from tests.conftest import tab_context

SMOL = get_shape("SmolLM2-135M").with_dtype("float32")


@pytest.mark.parametrize("overlap", [True, False])
def test_fit_recovers_a_known_machine_from_its_own_curve(overlap):
    truth = replace(
        get_hardware("This machine (2-core CPU)"), overhead_s=0.005, overhead_per_layer_s=0.0, overlap=overlap
    )
    points = [
        {"batch_size": b, "n_tokens": s, "context_len": 256, "seconds": forward_time(SMOL, truth, b, s, 256)}
        for b in (1, 4, 16)
        for s in (1, 2, 4, 8, 16, 32, 64)
    ]
    # the base is off by 2x in both directions; the fit must find e_c = 2, e_m = 0.5 and 5 ms
    base = replace(
        truth, peak_flops={k: v / 2 for k, v in truth.peak_flops.items()}, memory_bandwidth=truth.memory_bandwidth * 2
    )
    fit_pts, held = split_fit_holdout(points, fit_tokens=(1, 64))
    assert len(fit_pts) == 6 and len(held) == 15
    fit = fit_roofline(SMOL, base, fit_pts)
    assert fit.compute_efficiency == pytest.approx(2.0, rel=0.1) and fit.hardware.overlap == overlap
    if overlap:  # with a sum, the weight-read time and the overhead trade off (both constant in S)
        assert fit.memory_efficiency == pytest.approx(0.5, rel=0.1)
        assert fit.overhead_s == pytest.approx(0.005, rel=0.3)
    assert max(relative_errors(SMOL, fit.hardware, held)) < 0.05
    assert max(relative_errors(SMOL, base, held)) > 0.2  # the unfitted base really was wrong


def test_batched_cache_rolls_back_and_measurement_reports_every_point():
    import torch

    from specviz.cost.measure import measure_forward_times, random_model
    from specviz.cost.shapes import ModelShape
    from specviz.models.kv import BatchedLM

    shape = ModelShape("t", 2, 32, 2, 1, 16, 64, 100, dtype="float32")
    model = random_model(shape)
    lm = BatchedLM(model)
    lm.forward(torch.zeros(3, 5, dtype=torch.long))
    logits = lm.forward(torch.ones(3, 4, dtype=torch.long), n_logits=4)
    assert logits.shape == (3, 4, 100) and lm.cache_length() == 9
    lm.truncate(5)
    assert lm.cache_length() == 5
    again = lm.forward(torch.ones(3, 4, dtype=torch.long), n_logits=4)
    assert torch.allclose(again, logits, atol=1e-5)  # same cache after the rollback -> same logits
    timings = measure_forward_times(model, batch_sizes=(1, 2), n_tokens=(1, 3), context_len=4, repeats=2)
    assert [(t.batch_size, t.n_tokens) for t in timings] == [(1, 1), (1, 3), (2, 1), (2, 3)]
    assert all(len(t.samples) == 2 and t.seconds > 0 for t in timings)


def _rec(method, i, drafted, accepted, draft_ms, verify_ms, t_start, t_end):
    emitted = (*drafted[:accepted], 7)
    return IterationRecord(
        method=method,
        iteration=i,
        position=10 + i,
        speculation_length=len(drafted),
        drafted=tuple(drafted),
        accepted=accepted,
        emitted=emitted,
        p_target=None,
        q_draft=None,
        draft_forwards=len(drafted),
        target_forwards=1,
        t_start=t_start,
        t_end=t_end,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
    )


def _race_records():
    base = [_rec("autoregressive", i, (), 0, 0.0, 10.0, i * 0.01, (i + 1) * 0.01) for i in range(4)]
    spec = [
        _rec("vanilla", i, (1, 2, 3, 4), a, 4.0, 12.0, i * 0.016, (i + 1) * 0.016) for i, a in enumerate((4, 1, 2, 0))
    ]
    return base, spec


def test_explain_run_turns_records_into_the_formula_inputs():
    base, spec = _race_records()
    assert estimate_alpha(spec) == pytest.approx(7 / 10)  # 7 accepted, 3 iterations ended by a rejection
    row = explain_run(spec, base, CHAIN)
    assert (
        row["family"] == "chain"
        and row["length"] == 4
        and row["c"] == pytest.approx(0.1)
        and row["verify_ratio"] == pytest.approx(1.2)
    )
    assert row["predicted_speedup"] == pytest.approx((1 - 0.7**5) / 0.3 / (4 * 0.1 + 1.2))
    assert row["measured_speedup"] == pytest.approx((11 / 0.064) / (4 / 0.04))


def test_figures_build_without_a_server():
    from specviz.plots.roofline import budget_bars_figure, cost_curves_figure, predicted_vs_measured_figure
    from specviz.plots.speedup import (
        improvement_curves_figure,
        predicted_vs_measured_speedup_figure,
        speedup_heatmap_figure,
        speedup_vs_alpha_figure,
    )

    hw = get_hardware("H100 SXM")
    rows = cost_curve_rows(get_shape("Llama-2-7B"), hw.ideal(), (1, 64), (1, 2, 4, 8, 16, 32, 64), 1024)
    assert {r["bound"] for r in rows} == {"memory", "compute"}  # B=64 crosses the knee within S <= 64
    curves = cost_curves_figure(rows, measured=rows[:3], knees={1: None, 64: 5})
    names = [t.name for t in curves.data]
    assert "B=64 knee (S=5)" in names and "B=1 measured" in names and "B=64 compute-bound" in names
    pts = [dict(r, predicted_s=r["seconds"] * 1.1, used_for_fit=r["n_tokens"] == 1) for r in rows]
    figs = [
        curves,
        cost_curves_figure(rows, normalize=True),
        predicted_vs_measured_figure(pts),
        budget_bars_figure({"H100": {1: 200, 16: 19}}, 0.1),
        improvement_curves_figure([0.6, 0.8], 0.05, 12),
        improvement_curves_figure([0.6], 0.0, 12, verify_ratio=lambda g: 1 + 0.1 * g),
        speedup_heatmap_figure(0.05, 8, n_alpha=10),
        speedup_vs_alpha_figure([0.01, 0.1], fixed_gamma=4),
        predicted_vs_measured_speedup_figure([explain_run(*reversed(_race_records()), CHAIN)]),
    ]
    for fig in figs:
        assert isinstance(fig, go.Figure) and fig.data and fig.layout.title.text
    star = [t for t in figs[4].data if t.mode == "markers" and t.x[0] is not None]  # not the legend's key
    assert [t.x[0] for t in star] == [4, 8]  # optimal γ for α = 0.6 / 0.8 at c = 0.05 (1.92x, 3.09x)


def test_theory_handlers_and_tab():
    import gradio as gr

    from specviz.ui import theory

    curves, tree, text = theory.explorer(0.6, 4, 16)
    assert "best γ for this α" in text and curves.data and tree.data
    fig, table = theory.roofline_view("H100 SXM", "Llama-2-7B", [1, 16], 1024, "HF eager")
    assert fig.data and table.count("\n| ") == 2  # header, separator, one row per batch size
    assert "calibrated on published measurements" in table and "no GPU ran here" in table
    fig, table = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1], 256, "HF eager")
    assert "float32" in fig.layout.title.text and "calibrated" not in table  # measured here, no engine
    cpu_loaded = get_shape("SmolLM2-135M").with_dtype("float32")  # e.g. the loaded pair on this CPU
    fig, table = theory.roofline_view("A100 80GB", theory.LOADED_PAIR, [1], 256, theory.NO_ENGINE, shape=cpu_loaded)
    assert "bfloat16" in fig.layout.title.text and "312 TFLOP/s" in table and "Datasheet roofline" in table
    fig, text = theory.published_view()
    assert fig.data and "| A100 80GB | Vicuna-7B | EAGLE | 3.61 | 2.29× |" in text
    assert theory.race_view(None)[0] is None
    from specviz.serving.race import MethodRun, Race

    base, spec = _race_records()
    runs = [
        MethodRun("autoregressive", "Autoregressive", "", status="done", records=base),
        MethodRun("vanilla", "Vanilla SD", "", status="done", records=spec),
    ]
    fig, table = theory.race_view(Race("tiny", "p", [], 8, {}, runs))
    assert (
        fig.data
        and "| Vanilla SD | chain | 0.70 | γ = 4.0 | 0.100 | T(γ+1) / T(1) = 1.20 |" in table
        and "for the price of 1.60 steps (4×0.100 drafting + 1.20 verifying): 1.72× by these counts" in table
    )
    fig, table = theory.race_view(Race("tiny", "p", [], 8, {}, runs[1:]))  # no baseline: says what is missing
    assert fig is None and "include *Autoregressive*" in table
    with gr.Blocks():
        theory.build_tab(tab_context())


def test_roofline_experiment_end_to_end_on_a_tiny_shape(tmp_path, monkeypatch):
    import json

    from specviz.cost import SHAPES
    from specviz.cost.shapes import ModelShape
    from specviz.experiments import roofline

    monkeypatch.setitem(SHAPES, "tiny-test", ModelShape("tiny-test", 2, 32, 2, 1, 16, 64, 100))
    fake = get_hardware("This machine (2-core CPU)")  # the micro-benchmark takes seconds: tested on its own
    monkeypatch.setattr("specviz.cost.measure_this_machine", lambda **kw: replace(fake, name=kw.get("name", "fake")))
    out = tmp_path / "roof"
    assert (
        roofline.main(
            [
                "--shape",
                "tiny-test",
                "--batch-sizes",
                "1,2",
                "--tokens",
                "1,2,4",
                "--fit-tokens",
                "1,4",
                "--context",
                "8",
                "--repeats",
                "1",
                "--draft-shape",
                "tiny-test",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "roofline.json").read_text())
    s = result["summary"]
    assert (s["fit_points"], s["held_out_points"]) == (4, 2) and s["held_out_median_rel_error"] >= 0
    assert len(result["points"]) == 6 and all("predicted_s" in p for p in result["points"])
    budget = result["theory"]["Llama-2-7B"]["ideal"]["H100 SXM"]["budget"]  # JSON keys: batch sizes as strings
    assert budget["1"] > budget["16"] > budget["64"]
    for name in (
        "cost_curves.html",
        "predicted_vs_measured.html",
        "speedup_measured_cost_B2.html",
        "budget_Llama-2-7B.html",
    ):
        assert (out / name).stat().st_size > 1000
    assert roofline.main(["--from-json", str(out / "roofline.json"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "cost_ratio.html").exists()


def test_theory_tab_overlays_this_machines_measurements_with_their_fit(tmp_path, monkeypatch):
    import json

    from specviz.ui import theory

    hw = get_hardware(theory.THIS_MACHINE)
    points = [
        {"batch_size": b, "n_tokens": s, "context_len": 256, "seconds": forward_time(SMOL, hw, b, s, 256)}
        for b in (1, 4)
        for s in (1, 8, 64)
    ]
    result = {
        "shape": {"name": "SmolLM2-135M", "dtype": "float32"},
        "config": {"context": 256},
        "points": points,
        "load_average_before": [0.5, 0.4, 0.3],
        "summary": {
            "fitted_flops_per_s": 1e10,
            "fitted_bandwidth": 2e9,
            "overhead_ms": 3.0,
            "fit_points": 2,
            "held_out_median_rel_error": 0.1,
        },
    }
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps(result))
    monkeypatch.setattr(theory, "MEASURED", path)
    fig, table = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1, 4], 256, "HF eager")
    assert (
        "B=4 measured" in [t.name for t in fig.data]
        and "fit to SmolLM2-135M (measured at load 0.5)" in fig.layout.title.text
    )
    assert "10 GFLOP/s" not in table and "0.01 TFLOP/s float32, 2 GB/s, overhead 3.0 ms" in table
    fig, _ = theory.roofline_view(theory.THIS_MACHINE, "Llama-2-7B", [1], 256, "HF eager")  # another model: no overlay
    assert not [t for t in fig.data if "measured" in (t.name or "")]


def _race(runs=None):
    from specviz.serving.race import MethodRun, Race

    base, spec = _race_records()
    runs = runs or [
        MethodRun("autoregressive", "Autoregressive", "", status="done", records=base),
        MethodRun("vanilla", "Vanilla SD", "", status="done", records=spec),
    ]
    return Race("tiny-random", "p", [], 8, {}, runs)


def test_this_machines_line_is_not_a_fit_to_timings_taken_under_load(tmp_path, monkeypatch):
    """Issue 38 (7): a fit timed under load (the committed one was, at 1.77) prices verification by the other
    processes' time; the lines use the same run's micro-benchmark rates and the table says why."""
    import json

    from specviz.cost.calibrate import fit_disturbed, hardware_from_result, load_words, roofline_from_result
    from specviz.cost.roofline import verify_cost_ratio
    from specviz.ui import theory

    result = json.loads(theory.MEASURED.read_text())
    result["load_average_before"] = [1.77, 1.2, 1.0]
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps(result))
    monkeypatch.setattr(theory, "MEASURED", path)
    assert fit_disturbed(result) and "1-minute load average 1.77" in load_words(result)
    context = theory.measured_context()
    fig, table = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1], context, "HF eager")
    shape = get_shape("SmolLM2-135M").with_dtype("float32")
    ratio = float(table.split("\n")[2].split("|")[3])  # B = 1's T(5)/T(1)
    assert ratio == pytest.approx(verify_cost_ratio(shape, roofline_from_result(result), 4, 1, context), abs=0.006)
    fitted = verify_cost_ratio(shape, hardware_from_result(result), 4, 1, context)
    assert "timed under load" in table and f"T(5)/T(1) = {fitted:.2f}" in table
    assert "micro-benchmark" in fig.layout.title.text
    assert "Run a race to see the verify cost" in table
    _, table = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1], 256, "HF eager", race=_race())
    assert "**Measured in the last race** (tiny-random" in table and "T(γ+1)/T(1) = 1.20 at γ = 4.0" in table


def test_roofline_starts_at_the_context_its_crosses_were_measured_at():
    import gradio as gr

    from specviz.ui import theory

    assert theory.measured_context() == 256  # benchmarks/roofline/roofline.json's config
    with gr.Blocks() as demo:
        theory.build_tab(tab_context("default"))
    sliders = [b for b in demo.blocks.values() if isinstance(b, gr.Slider) and "context" in (b.label or "")]
    assert [s.value for s in sliders] == [256]


def test_roofline_resolves_the_loaded_pair_through_the_models_line():
    """Issue 41: the loaded pair's shape comes through ctx.resolve (a load waits for a turn on the models),
    never through ctx.load_pair (which loads right away, beside a timed race)."""
    from types import SimpleNamespace

    from specviz.cost import SHAPES
    from specviz.ui import theory

    asked = []

    def resolve(name):
        asked.append(name)
        return SimpleNamespace(name=name, target=None), None

    def load_now(name):
        raise AssertionError("loaded outside the models' line")

    ctx = SimpleNamespace(resolve=resolve, load_pair=load_now)
    shape = SHAPES["SmolLM2-135M"].with_dtype("float32")
    import specviz.cost.shapes as shapes

    original = shapes.shape_from_model
    shapes.shape_from_model = lambda model, name=None: shape
    try:
        fig, table = theory.roofline_handler(ctx)("H100 SXM", theory.LOADED_PAIR, [1], 256, "HF eager", "tiny-random")
    finally:
        shapes.shape_from_model = original
    assert asked == ["tiny-random"] and fig is not None and "| 1 |" in table


def test_whatif_uses_the_races_measured_cost_and_draws_its_methods():
    from specviz.ui import theory

    curves, tree, text = theory.explorer(0.7, 4, 16)  # no race: the cost model, said so
    assert "cost model (no race yet)" in curves.layout.title.subtitle.text
    assert "c = 0.05" not in text and "ridge" in text and "FLOP/byte" in text
    curves, tree, text = theory.explorer(0.7, 4, 16, race=_race())
    subtitle = curves.layout.title.subtitle.text.replace("<br>", "")  # wrapped into lines a phone shows whole
    assert "measured in the last race (tiny-random): c = 0.100" in subtitle and "1 + 0.050·γ" in subtitle
    assert "through Vanilla SD T(γ+1)/T(1) = 1.20 at γ = 4.0" in text
    (race,) = [t for t in curves.data if t.name == "race: Vanilla SD α=0.70"]  # the race's point, named in the legend
    assert list(race.x) == [4.0] and race.y[0] == pytest.approx((11 / 0.064) / (4 / 0.04))
    # the numbers use the measured c = 0.1 and verify cost 1 + 0.05·4 = 1.2 (the chain family's formula)
    assert "4×0.100 + 1.20 = 1.60 steps" in text and f"**{(1 - 0.7**5) / 0.3 / 1.6:.2f}×**" in text
    assert tree.data and "Tree speedup vs size S (depth 4)" in tree.layout.title.text
    running = _race()
    running = running.with_run(replace(running.runs[1], status="running"))
    assert not theory.race_finished(running) and theory.race_finished(_race())


def test_published_view_maps_methods_links_sources_and_labels_do_not_overlap():
    from specviz.cost.families import CHAIN, TREE
    from specviz.cost.published import RACE_COUNTERPARTS
    from specviz.methods import get_method
    from specviz.ui import theory

    fig, text = theory.published_view()
    assert "| SpS | Dynamic (heuristic) |" in text and "| PLD | Prompt lookup |" in text
    assert "| REST | SSSD (n-gram tree) |" in text and "| EAGLE | — |" in text
    assert get_method(RACE_COUNTERPARTS["SpS"][0]).family is CHAIN  # a chain of drafts, as Spec-Bench's SpS
    assert get_method(RACE_COUNTERPARTS["REST"][0]).family is TREE  # a tree verified in one pass, as REST
    assert "https://arxiv.org/abs/2408.11850" in text and "specviz/" not in text and ".csv" not in text
    assert "specviz/" not in theory.calibration_note("HF eager")
    assert not [t for t in fig.data if "text" in (t.mode or "")]  # no labels on the points: shapes say the method
    assert {"SpS", "PLD", "REST", "EAGLE"} <= {t.name for t in fig.data}


def test_race_view_labels_are_not_clipped():
    from specviz.ui import theory

    fig, _ = theory.race_view(_race())
    (predicted,) = [t for t in fig.data if t.name == "predicted"]
    assert predicted.cliponaxis is False and fig.layout.yaxis.range[1] > 1.3 * max(predicted.y)


def test_default_draft_shape_is_the_shipped_drafts():
    import json
    from types import SimpleNamespace

    from specviz.cost.shapes import shape_from_config
    from specviz.paths import ASSETS

    config = json.loads((ASSETS / "drafts" / "smollm2-135m-draft-v2" / "config.json").read_text())
    shipped = shape_from_config(SimpleNamespace(**config), name="SmolLM2-135M draft (4 layers)", dtype="bfloat16")
    assert shipped == get_shape("SmolLM2-135M draft (4 layers)")


def test_measured_c_averages_only_methods_that_run_the_draft_model():
    """Review fault 2: Prompt lookup has no draft model (c ≈ 0.001); averaging it in gave a c below every
    method that runs the draft. c is the mean over the chain methods that call the pair's draft model."""
    from specviz.serving.race import MethodRun
    from specviz.ui import theory

    base, spec = _race_records()
    lookup = [
        _rec("prompt_lookup", i, (1, 2, 3, 4), a, 0.0, 12.0, i * 0.012, (i + 1) * 0.012)
        for i, a in enumerate((1, 0, 2, 0))
    ]
    runs = [
        MethodRun("autoregressive", "Autoregressive", "", status="done", records=base),
        MethodRun("vanilla", "Vanilla SD", "", status="done", records=spec),
        MethodRun("prompt_lookup", "Prompt lookup", "", status="done", records=lookup),
    ]
    cost = theory.measured_cost(_race(runs))
    assert cost is not None and cost.c == pytest.approx(0.1)  # Vanilla SD's c alone, not (0.1 + 0) / 2
    assert "c = 0.100" in cost.source
    assert "Prompt lookup" in cost.detail  # its verify cost still counts: it verifies like the others
