"""The GPU engines fit to published measurements: the data file, the recipes, the fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specviz.cost import ENGINES, forward_time, get_hardware, get_shape
from specviz.cost import published as pub


def test_every_row_names_its_source_and_a_number():
    rows = pub.load_rows()
    assert len(rows) > 300 and all(r["source"] and r["where"] for r in rows)
    assert all(float(r["value"]) > 0 for r in rows)
    overall = [r for r in rows if r["source"].startswith("Spec-Bench") and r["category"] == "Overall"]
    assert {(r["chip"], r["shape"]) for r in overall} == {
        ("RTX 3090", "Vicuna-7B"),
        ("A100 80GB", "Vicuna-7B"),
        ("A100 80GB", "Vicuna-13B"),
        ("A100 80GB", "Vicuna-33B"),
    }
    assert all(float(r["mean_accepted"]) >= 1 for r in overall)


def test_a_forward_row_is_predicted_as_the_roofline_of_its_engine():
    """The fit's vectorised evaluation and specviz.cost.forward_time are the same formula."""
    row = next(
        r for r in pub.load_rows() if r["kind"] == "forward" and r["shape"] == "Llama-2-7B" and r["stack"] == "HF eager"
    )
    hw = get_hardware(row["chip"], "HF eager")
    expected = forward_time(get_shape("Llama-2-7B").with_dtype("bfloat16"), hw, 1, 1, pub.context_of(row))
    assert pub.predict(row) == pytest.approx(expected, rel=1e-9)


def test_the_heuristic_schedule_grows_gamma_with_acceptance():
    low, high = pub.heuristic_schedule(0.3), pub.heuristic_schedule(0.9)
    assert 1 < low[0] < high[0] and low[1] < high[1]
    tau = 2.28
    alpha_gamma = pub.sps_gamma(tau)
    assert 1 <= alpha_gamma <= 64


def test_the_fit_recovers_known_engine_parameters_from_synthetic_rows():
    """Rows whose published values are the model's own predictions under a known engine: the fit
    finds that engine again (to its grid's resolution)."""
    truth = replace(
        ENGINES["HF eager"],
        memory_efficiency=0.8,
        overlap_exponent=3.0,
        overhead_s=1e-3,
        overhead_per_layer_s=0.2e-3,
        step_overhead_per_layer_s=0.1e-3,
    )
    rows = [r for r in pub.load_rows() if r["stack"] == "HF eager" and pub.role(r) in ("fit", "test")]
    synthetic = []
    for r in rows:
        value = pub.predict(r, truth)
        synthetic.append({**r, "value": str(1 / value if r["kind"] == "forward" else value)})
    fit = pub.fit_engine(ENGINES["HF eager"], synthetic)
    assert fit.memory_efficiency == pytest.approx(0.8, rel=0.1)
    assert fit.overhead_per_layer_s == pytest.approx(0.2e-3, rel=0.15)
    assert fit.step_overhead_per_layer_s == pytest.approx(0.1e-3, rel=0.2)
    assert fit.overlap_exponent == pytest.approx(3.0, rel=0.15)
    assert max(abs(pub.predict(r, fit) / float(pub.predict(r, truth)) - 1) for r in synthetic) < 0.03


def test_the_shipped_engines_are_the_fit_of_the_published_rows():
    fitted = pub.calibrate()
    for name, engine in ENGINES.items():
        assert pub.round_engine(fitted[name]) == engine


def test_the_comparison_reports_held_out_rows():
    rows = pub.comparison()
    summary = pub.summary(rows)
    assert {r["role"] for r in rows} == {"fit", "test"}
    held = [r for r in rows if r["kind"] == "speedup" and r["role"] == "test"]
    assert {r["model"] for r in held} == {"Vicuna-7B"} and len(held) == 12
    assert summary["forward, every held-out GPU row: median |error|"] is not None
    md = pub.report_markdown(ENGINES, rows)
    assert "| EAGLE | 3.61 |" in md and "| test |" in md
    assert "overlap exponent" in md and "| inf |" in md  # the sensitivity to the loosely pinned p


def test_the_compute_rate_is_the_chips_measured_gemm_rate_not_a_fit():
    """An engine computes at the chip's published torch.mm rate (the fit rows are all memory-bound and
    cannot tell a rate); the datasheet roofline (ideal) keeps the datasheet peak. A GeForce card
    beats its datasheet figure (boost clock), a datacenter part falls short of it."""
    from specviz.cost.hardware import PRESETS

    for name in ("RTX 3090", "A100 80GB"):
        chip, hw = PRESETS[name], get_hardware(name, "HF eager")
        assert hw.flops_per_s("float16") == pytest.approx(
            chip.gemm_flops["float16"] * ENGINES["HF eager"].compute_efficiency
        )
        assert hw.flops_per_s("int8") == hw.flops_per_s("bfloat16")  # weight-only int8 multiplies in 16-bit
        assert hw.ideal().flops_per_s("float16") == chip.peak_flops["float16"]
    assert PRESETS["RTX 3090"].gemm_flops["float16"] > PRESETS["RTX 3090"].peak_flops["float16"]
    assert PRESETS["A100 80GB"].gemm_flops["float16"] < PRESETS["A100 80GB"].peak_flops["float16"]
    assert PRESETS["L4"].gemm_flops_per_s("float16") == PRESETS["L4"].peak_flops["float16"]  # none published: datasheet
    assert "compute_efficiency" not in pub.FITTED


def test_the_held_out_speedups_meet_the_issue_goal_on_both_gpus():
    """Issue 20: at least 5 of the 6 Spec-Bench methods within 15 % on the held-out Vicuna-7B rows,
    A100 and RTX 3090, and neither chip's errors all on one side."""
    rows = [r for r in pub.comparison() if r["kind"] == "speedup" and r["role"] == "test"]
    for chip in ("A100 80GB", "RTX 3090"):
        errors = [r["error"] for r in rows if r["chip"] == chip]
        assert len(errors) == 6 and sum(abs(e) <= 0.15 for e in errors) >= 5
    rtx = [r["error"] for r in rows if r["chip"] == "RTX 3090"]
    assert min(rtx) < 0 < max(rtx)
    within = pub.held_out_within(pub.comparison())
    assert {chip: len(methods) for chip, (methods, _) in within.items()} == {
        chip: sum(abs(e["error"]) <= 0.15 for e in rows if e["chip"] == chip) for chip in ("A100 80GB", "RTX 3090")
    }
    from specviz.ui.theory import calibration_note

    note = calibration_note("HF eager")  # the Theory tab says the same, computed, not read from a report
    assert all(f"{chip} {len(methods)} of {held}" in note for chip, (methods, held) in within.items())
