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
    star = [t for t in figs[4].data if t.mode == "markers"]
    assert [t.x[0] for t in star] == [4, 8]  # optimal γ for α = 0.6 / 0.8 at c = 0.05 (1.92x, 3.09x)


def test_theory_handlers_and_tab():
    import gradio as gr

    from specviz.ui import theory

    curves, heat, text = theory.explorer(0.6, 4, 0.05)
    assert "Best γ for this α and c: **4**" in text and curves.data and heat.data
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
    from specviz.ui.panels import MethodRun, Race

    base, spec = _race_records()
    runs = [
        MethodRun("autoregressive", "Autoregressive", "", status="done", records=base),
        MethodRun("vanilla", "Vanilla SD", "", status="done", records=spec),
    ]
    fig, table = theory.race_view(Race("tiny", "p", [], 8, {}, runs))
    assert (
        fig.data
        and "| Vanilla SD | chain | 0.70 | γ = 4.0 | 0.100 | T(γ+1)/T(1) = 1.20 |" in table
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
    assert "B=4 measured" in [t.name for t in fig.data] and "fit to SmolLM2-135M (load 0.5)" in fig.layout.title.text
    assert "10 GFLOP/s" not in table and "0.01 TFLOP/s float32, 2 GB/s, overhead 3.0 ms" in table
    fig, _ = theory.roofline_view(theory.THIS_MACHINE, "Llama-2-7B", [1], 256, "HF eager")  # another model: no overlay
    assert not [t for t in fig.data if "measured" in (t.name or "")]
