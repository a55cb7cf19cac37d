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
