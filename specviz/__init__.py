"""specviz: speculative decoding methods from five papers, raced side by side on real models.

    import specviz
    pair = specviz.load_pair("tiny-random")
    for record in specviz.run("vanilla", pair, "def fib(n):", max_new_tokens=32):
        print(record.accepted, record.emitted)

Importing specviz is light: torch and transformers load on first use of these names.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run": "specviz.runner",
    "generate": "specviz.runner",
    "RunResult": "specviz.runner",
    "load_pair": "specviz.models.pair",
    "ModelPair": "specviz.models.pair",
    "encode_prompt": "specviz.models.pair",
    "IterationRecord": "specviz.records",
    "RunSummary": "specviz.records",
    "SpecvizError": "specviz.errors",
    "ModelNotAvailable": "specviz.errors",
    "all_methods": "specviz.methods",
    "method_names": "specviz.methods",
    "summarize": "specviz.metrics",
    "fill_oracle_sl": "specviz.oracle",
}

__all__ = [  # the names of _EXPORTS, spelled out so that static tools read them
    "IterationRecord",
    "ModelNotAvailable",
    "ModelPair",
    "RunResult",
    "RunSummary",
    "SpecvizError",
    "all_methods",
    "encode_prompt",
    "fill_oracle_sl",
    "generate",
    "load_pair",
    "method_names",
    "run",
    "summarize",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")
