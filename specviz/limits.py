"""The library's sanity bounds: values that can be nothing but mistakes, refused whatever the caller.

A speculation length of a million drafts tokens no target checks; a temperature of infinity decodes
uniform noise. Every refusal is one SpecvizError naming the bound, so a user knows what to change.
What the app grants one visitor of a public page (`AppLimits`, the SPECVIZ_LIMIT_* environment
variables) is a serving concern: `specviz.serving.limits`.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from specviz.errors import SpecvizError

# Library-wide sanity bounds (not configurable: beyond them a value is an error, not a choice).
MAX_SPECULATION_LENGTH = 64  # draft tokens, tree nodes or n-gram length one iteration may use
MAX_TEMPERATURE = 100.0  # softmax(logits / T) is uniform to float precision long before this
# Sampling divides float32 logits by T; a logit beyond FLT_MAX * T (3.4e38 * T) becomes inf and softmax
# gives NaN. The default target's logits reach |47.4| (every position of 3 HumanEval and 3 GSM8K
# prompts), so they overflow below T = 1.4e-37; at 1e-30 a logit of up to 3.4e8 stays finite, 7 million
# times that. 1e-30 is also a normal float32, not a subnormal that a GPU may flush to zero.
MIN_TEMPERATURE = 1e-30
MAX_SEED = 2**63 - 1  # torch generators take a signed 64-bit seed


def check_count(name: str, value: Any, most: int | None = MAX_SPECULATION_LENGTH, least: int = 1) -> int:
    """`value` as an int in [least, most] (most None: no upper bound), or a SpecvizError that names the bound."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise SpecvizError(f"{name} must be an integer, got {value!r}")
    value = int(value)  # numpy and other Integral types as a plain int
    if most is None and value < least:
        raise SpecvizError(f"{name} must be at least {least}, got {value}")
    if most is not None and not least <= value <= most:
        raise SpecvizError(f"{name} must be from {least} to {most}, got {value}")
    return value


def check_unique(what: str, names: Any) -> None:
    """Refuse a list that names something twice (a method listed 50 times is a mistake, not a request)."""
    repeated = sorted({n for n in names if list(names).count(n) > 1})
    if repeated:
        raise SpecvizError(f"{what} lists {', '.join(repeated)} more than once: list each once")


def check_number(name: str, value: Any, least: float, most: float) -> float:
    """`value` as a finite float in [least, most], or a SpecvizError that names the bound."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise SpecvizError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and least <= value <= most):
        raise SpecvizError(f"{name} must be from {least:g} to {most:g}, got {value}")
    return value


def check_temperature(value: Any, name: str = "temperature") -> float:
    """`value` as 0 (greedy) or a float in [MIN_TEMPERATURE, MAX_TEMPERATURE], or a SpecvizError
    that names the bound (below the floor, logits / T overflows float32 and sampling meets NaN)."""
    temperature = check_number(name, value, 0.0, MAX_TEMPERATURE)
    if 0 < temperature < MIN_TEMPERATURE:
        raise SpecvizError(
            f"{name} must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {temperature:g}: "
            f"below {MIN_TEMPERATURE:g} the logits divided by it overflow float32"
        )
    return temperature
