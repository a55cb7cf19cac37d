"""What one request may ask for: the bounds the library, the app and the bench CLI check.

Two sets. The library refuses only values that can be nothing but mistakes (a speculation length
of a million drafts tokens no target checks; a temperature of infinity decodes uniform noise).
`app_limits()` is what the app grants one visitor of a public page; a private deployment changes
any of them with an environment variable named after the field, e.g.

    SPECVIZ_LIMIT_MAX_NEW_TOKENS=1024 SPECVIZ_LIMIT_OSD_REQUESTS=400 python app.py

Every refusal is one SpecvizError naming the limit, so a user knows what to change.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from specviz.errors import SpecvizError

# Library-wide sanity bounds (not configurable: beyond them a value is an error, not a choice).
MAX_SPECULATION_LENGTH = 64  # draft tokens, tree nodes or n-gram length one iteration may use
MAX_TEMPERATURE = 100.0  # softmax(logits / T) is uniform to float precision long before this
MAX_SEED = 2**63 - 1  # torch generators take a signed 64-bit seed

ENV_PREFIX = "SPECVIZ_LIMIT_"


@dataclass(frozen=True)
class AppLimits:
    """What one visitor of the app may ask for (defaults suit a public Hugging Face Space)."""

    prompt_tokens: int = 1024  # tokens of one prompt after the chat template
    max_new_tokens: int = 512  # tokens one method generates for one prompt
    speculation_length: int = 16  # draft tokens per iteration
    tree_nodes: int = 64  # nodes of one verification tree (SSSD's S)
    methods_per_race: int = 13  # methods in one race, each listed once
    osd_requests: int = 100  # requests in one Online-learning stream
    adapted_drafts: int = 4  # online learners holding their own draft weights at once, all visitors (~440 MB each on the default pair)
    queue_size: int = 32  # visitors waiting for the models; more are asked to come back later
    admitted_runs: int = 8  # runs in the models' line at once (they take turns); later ones wait in gradio's queue
    sessions: int = 64  # visitors whose session is kept (~1 MB each on the tiny pair); beyond this the least recently active are dropped
    session_ttl_s: int = 3600  # a visitor's state (races, learners) and session are dropped this long after their last change or event
    # Only the preset pairs in the pair field (no hub ids, no local paths). Set by SPECVIZ_PRESETS_ONLY
    # (1 or 0); on by default on a Hugging Face Space (SPACE_ID set), off elsewhere.
    presets_only: bool = False

    @staticmethod
    def env_names() -> list[str]:
        """The environment variable of every limit (the README's hosting table lists them all)."""
        return [_env_name(f.name) for f in dataclasses.fields(AppLimits)]


def app_limits(env: dict[str, str] | None = None) -> AppLimits:
    """The app's limits: the defaults, each overridden by SPECVIZ_LIMIT_<FIELD> when set."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {"presets_only": bool(env.get("SPACE_ID"))}
    for field in dataclasses.fields(AppLimits):
        name, raw = _env_name(field.name), env.get(_env_name(field.name), "").strip()
        if not raw:
            continue
        if field.name == "presets_only":
            if raw not in ("0", "1"):
                raise SpecvizError(f"{name} must be 1 or 0, got {raw!r}")
            values[field.name] = raw == "1"
            continue
        try:
            value = int(raw)
        except ValueError:
            raise SpecvizError(f"{name}={raw!r} is not a whole number") from None
        if not value > 0:
            raise SpecvizError(f"{name} must be positive, got {raw!r}")
        values[field.name] = value
    return AppLimits(**values)


def _env_name(field: str) -> str:
    return "SPECVIZ_PRESETS_ONLY" if field == "presets_only" else ENV_PREFIX + field.upper()


def check_count(name: str, value: Any, most: int = MAX_SPECULATION_LENGTH, least: int = 1) -> int:
    """`value` as an int in [least, most], or a SpecvizError that names the bound."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise SpecvizError(f"{name} must be an integer, got {value!r}")
    if not least <= value <= most:
        raise SpecvizError(f"{name} must be from {least} to {most}, got {value}")
    return int(value)


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
