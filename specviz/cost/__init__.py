"""Cost model: why speculation is (not) free, on any hardware.

Counting is separate from costing: methods record what they did (forward passes, tokens,
milliseconds); this package turns counts into predicted time (roofline) and speedups (formulas).
Pure Python + numpy; torch only inside `measure_this_machine` and `specviz.cost.measure`.

    from specviz.cost import get_shape, get_hardware, forward_time, speculation_budget
    forward_time(get_shape("Llama-2-7B"), get_hardware("H100 SXM"), batch_size=16, n_tokens=5, context_len=1024)
"""

from specviz.cost.formulas import (
    alpha_from_tokens_per_iteration,
    expected_tokens,
    improvement_factor,
    optimal_gamma,
    osd_speedup,
    pearl_speedup,
    pearl_tokens_per_step,
    pearl_window,
    speedup_curve,
    speedup_with_verify_cost,
    tree_budget,
)
from specviz.cost.hardware import (
    ENGINES,
    THIS_MACHINE,
    Engine,
    Hardware,
    get_hardware,
    measure_this_machine,
    preset_for,
)
from specviz.cost.hardware import (
    PRESETS as HARDWARE,
)
from specviz.cost.roofline import (
    OperatorCost,
    cost_curve_rows,
    forward_breakdown,
    forward_time,
    knee_tokens,
    operator_costs,
    optimal_speculation_length,
    speculation_budget,
    verify_cost_ratio,
)
from specviz.cost.shapes import SHAPES, ModelShape, get_shape, shape_from_config, shape_from_model

__all__ = [
    "ENGINES",
    "HARDWARE",
    "SHAPES",
    "THIS_MACHINE",
    "Engine",
    "Hardware",
    "ModelShape",
    "OperatorCost",
    "alpha_from_tokens_per_iteration",
    "cost_curve_rows",
    "expected_tokens",
    "forward_breakdown",
    "forward_time",
    "get_hardware",
    "get_shape",
    "improvement_factor",
    "knee_tokens",
    "measure_this_machine",
    "operator_costs",
    "optimal_gamma",
    "optimal_speculation_length",
    "osd_speedup",
    "pearl_speedup",
    "pearl_tokens_per_step",
    "pearl_window",
    "preset_for",
    "shape_from_config",
    "shape_from_model",
    "speculation_budget",
    "speedup_curve",
    "speedup_with_verify_cost",
    "tree_budget",
    "verify_cost_ratio",
]
