"""The Theory tab's roofline without a server: its x axis and the notes that follow the last race (issue 38, 7)."""

from __future__ import annotations

import math

from specviz.cost import get_hardware, get_shape
from specviz.cost.roofline import cost_curve_rows
from specviz.plots.roofline import cost_curves_figure


def test_the_roofline_x_axis_starts_at_one_token():
    """Nothing runs a forward pass with fewer than one token: no tick below S = 1 (the axis showed 0.8, 0.9)."""
    shape = get_shape("SmolLM2-135M")
    rows = cost_curve_rows(shape, get_hardware("H100 SXM"), [1, 16], list(range(1, 65)), 256)
    measured = [{"batch_size": 1, "n_tokens": s, "seconds": 0.01 * s} for s in (1, 2, 64)]
    fig = cost_curves_figure(rows, measured=measured, knees={1: 1, 16: 3})
    axis = fig.layout.xaxis
    assert axis.type == "log" and axis.range[0] == 0.0  # log10(1): the axis starts at S = 1
    assert 10 ** axis.range[1] >= 64  # the last point is on the plot
    assert min(axis.tickvals) == 1 and list(axis.ticktext) == [str(t) for t in axis.tickvals]
    assert all(t.cliponaxis is False for t in fig.data)  # markers at S = 1 drawn whole, not cut at the axis
    assert math.isclose(10 ** axis.range[1], 64 * 1.1)


STEP = {  # a `python -m specviz.tools.target_step` result (made-up numbers, all in one place)
    "command": "python -m specviz.tools.target_step --threads 1 --max-new-tokens 64",
    "pair": "default",
    "threads": 1,
    "default_threads": 2,
    "cores": 2,
    "load_average_before": [0.4, 0.3, 0.2],
    "load_average_after": [1.1, 0.5, 0.3],
    "prompt_tokens": 44,
    "steps": 63,
    "race_step": {"median_ms": 95.0, "mean_ms": 97.0, "cpu_ms": 87.0},
    "forward": {"median_ms": 88.0, "mean_ms": 90.0, "cpu_ms": 80.0},
    "torch_calls_per_forward": 1234,
    "weight_matmuls": {
        "median_ms": 52.0,
        "mean_ms": 53.0,
        "best_ms": 50.0,
        "cpu_ms": 50.0,
        "n_matrices": 211,
        "bytes": 537_919_488,
        "gb_per_s": 10.8,
        "cpu_gb_per_s": 10.8,
    },
    "copy_gb_per_s": 22.0,
    "copy_cpu_gb_per_s": 22.0,
    "engine": "specviz's fast Llama step",
    "eager": {
        "engine": "transformers' eager forward",
        "race_step": {"median_ms": 125.0, "mean_ms": 126.0, "cpu_ms": 120.0},
        "forward": {"median_ms": 118.0, "mean_ms": 119.0, "cpu_ms": 112.0},
        "torch_calls_per_forward": 2798,
    },
}


def test_the_page_says_what_the_line_leaves_out_of_a_race_step(tmp_path, monkeypatch):
    """Issue 38 (7): the line's T(1) read ~27.5 ms while a race measured ~85 ms a target step, and the page
    never said why; it now gives the step's timed parts and what the machine was doing."""
    import json

    from specviz.cost.roofline import forward_time
    from specviz.ui import theory

    path = tmp_path / "target_step.json"
    path.write_text(json.dumps(STEP))
    monkeypatch.setattr(theory, "TARGET_STEP", path)
    _, text = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1], 256, "HF eager")
    note = next(p for p in text.split("\n\n") if p.startswith("**Why a race's target step"))
    shape = get_shape("SmolLM2-135M").with_dtype("float32")
    hw = theory.this_machine(shape)[0]
    t1 = forward_time(shape, hw, 1, 1, 44 + 63 // 2) * 1e3
    assert f"at {t1:.1f} ms (context 75)" in note  # the line's own T(1), at the timed steps' mean context
    assert "on specviz's fast Llama step, one step of a race" in note
    assert "took **87 ms** of CPU time and the bare forward pass on the same tokens 80 ms" in note
    assert "On transformers' eager forward (SPECVIZ_FAST=0) the same step took **120 ms** and its pass 112 ms" in note
    assert "torch 2798 times a pass: those 33 ms a step are the engine's, not the CPU's" in note
    assert (
        "211 weight matrices alone took 50 ms (10.8 GB/s, where a plain copy on the same thread reached 22 GB/s)"
        in note
    )
    assert f"{hw.memory_bandwidth / 1e9:.0f} GB/s and its FLOPs at" in note and "the other 30 ms" in note  # 80 - 50
    assert "The step's other 7 ms are outside the pass" in note  # 87 - 80
    assert "on 2 cores" in note and "torch's default of 2 threads" in note
    assert "torch 1234 times a pass" in note and "load average 0.4 before, 1.1 after" in note
    assert "wall clock read 95 ms a step" in note and STEP["command"] in note
    _, other = theory.roofline_view(theory.THIS_MACHINE, "Llama-2-7B", [1], 256, "HF eager")
    assert "Why a race's target step" not in other  # the timing is the default target's only
    _, gpu = theory.roofline_view("H100 SXM", "SmolLM2-135M", [1], 256, "HF eager")
    assert "Why a race's target step" not in gpu


def test_the_committed_step_timing_is_on_the_page():
    """The shipped benchmarks/roofline/target_step.json is the one the page reads, with its parts consistent."""
    import json

    from specviz.ui import theory

    m = json.loads(theory.TARGET_STEP.read_text())
    assert m["pair"] == "default" and m["threads"] == 1
    assert m["weight_matmuls"]["cpu_ms"] <= m["forward"]["cpu_ms"] * 1.05  # the matmuls are part of the pass
    _, text = theory.roofline_view(theory.THIS_MACHINE, "SmolLM2-135M", [1], 256, "HF eager")
    assert f"took **{m['race_step']['cpu_ms']:.0f} ms** of CPU time" in text


def test_the_race_note_gives_the_races_own_decoding_step():
    from specviz.ui import theory
    from tests.test_cost_tools import _race

    note = theory.race_verify_note(_race())
    assert "its decoding step T(1) = 10.0 ms (the autoregressive run's mean, wall clock)" in note


def test_the_step_timing_runs_on_a_tiny_pair():
    """The timing script's parts on the offline tiny pair (structure only: timings are the benchmark's)."""
    from specviz.tools.target_step import measure

    m = measure("tiny-random", max_new_tokens=4, threads=1, repeats=1)
    assert m["pair"] == "tiny-random" and m["threads"] == 1 and m["steps"] == 3
    assert m["weight_matmuls"]["n_matrices"] > 0 and m["torch_calls_per_forward"] > m["weight_matmuls"]["n_matrices"]
    assert all(m[k]["cpu_ms"] > 0 for k in ("race_step", "forward", "weight_matmuls"))


def test_the_roofline_fits_a_phone():
    """At 390x844 the roofline's title ran off the plot and its side legend took half the plot's width."""
    import re

    from specviz.plots.theme import PHONE_CHARS
    from specviz.ui import theory

    for hardware in (theory.THIS_MACHINE, "H100 SXM"):
        fig, _ = theory.roofline_view(hardware, "SmolLM2-135M", [1, 4, 16, 64], 256, "HF eager")
        lines = [re.sub(r"<[^>]+>", "", line) for line in fig.layout.title.text.split("<br>")]
        assert all(len(line) <= PHONE_CHARS for line in lines), lines
        assert len(fig.layout.xaxis.title.text) <= PHONE_CHARS and fig.layout.legend.orientation == "h"
        assert fig.layout.margin.t >= 56 + 22 * (len(lines) - 1)  # the subtitle lines above the plot, not on it
