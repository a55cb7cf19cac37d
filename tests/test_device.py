"""Device placement: every tensor a method makes lives on the models' device.

On a GPU a tensor made without `device=` lands on the CPU while the models sit on CUDA, and the
first operation that mixes the two fails (PEARL's draws, DISCO's classifier and Speculative
Streaming's LoRA once did). This CPU has no second device, so the tests make one: while a method
loads its parts and runs, torch's default device is `meta`. Anything made without an explicit device
then lands on `meta`, and mixing it with the CPU models fails the same way a CPU tensor fails beside
CUDA ones. Each run uses fresh pairs, so that parts a method loads once per model (the classifier,
the adapter, packed draft weights) are loaded inside that context too.

With `SPECVIZ_TEST_DEVICE=cuda` (and `SPECVIZ_TEST_DTYPE=bfloat16`, say) the same tests build their
pairs on that device instead: what the GPU check (`python -m specviz.gpucheck`) runs there.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

import specviz
from specviz.methods import get_method
from specviz.models.tiny import tiny_pair
from tests.conftest import own_methods

DEVICE = torch.device(os.environ.get("SPECVIZ_TEST_DEVICE", "cpu"))
DTYPE = getattr(torch, os.environ.get("SPECVIZ_TEST_DTYPE", "float32"))
PROMPT = "def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)"


@contextlib.contextmanager
def strays_on_meta():
    """Tensors made without a device land on `meta` (on a real second device: nothing to do)."""
    if DEVICE.type != "cpu":
        yield
        return
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_a_stray_tensor_fails_beside_the_models():
    """The check itself: a tensor made without a device cannot meet a model's tensor."""
    weight = torch.ones(3, device=DEVICE)
    with strays_on_meta(), pytest.raises(RuntimeError):
        weight + torch.ones(3)
        if DEVICE.type != "cpu":
            raise RuntimeError("on a real second device a stray tensor is a CPU tensor: nothing to check here")


@pytest.mark.parametrize(
    ("method", "temperature"), [(s.name, t) for s in own_methods() for t in (0.0, 0.8) if not t or s.supports_sampling]
)
def test_every_method_keeps_its_tensors_on_the_models_device(method, temperature):
    spec = get_method(method)
    options = spec.select({"speculation_length": 4})
    ref_pair = tiny_pair(device=DEVICE, dtype=DTYPE, draft="perturbed")
    reference = specviz.generate("autoregressive", ref_pair, PROMPT, max_new_tokens=24).summary.output_ids
    reference = list(reference)
    for kind in ("perturbed", "reduced"):
        pair = tiny_pair(device=DEVICE, dtype=DTYPE, draft=kind)  # fresh: its method parts load below
        with strays_on_meta():
            records = list(
                specviz.run(method, pair, PROMPT, max_new_tokens=24, temperature=temperature, seed=3, **options)
            )
        emitted = [t for r in records for t in r.emitted]
        assert emitted and (len(emitted) == 24 or records[-1].stop == "eos")
        if not temperature and torch.float32 == DTYPE:
            assert emitted == reference, f"{method} on the {kind} pair"


def test_a_draft_moved_to_another_device_makes_its_packed_weights_again():
    """The lean draft packs its weights and rotary tables for the device it runs on; moved after a
    run, it must make them again there (keyed by device, not only by dtype and version): a stale
    CPU pack beside `meta` inputs fails as it would beside CUDA ones."""
    pair = tiny_pair(draft="reduced")
    list(specviz.run("vanilla", pair, PROMPT, max_new_tokens=8))
    pair.draft.to("meta")
    logits = pair.draft.step([1, 2], pair.draft.new_cache(capacity=16))
    assert logits.device.type == "meta"


def test_auto_dtype_is_float32_unless_the_pair_is_too_big():
    from specviz.models.devices import resolve_dtype

    cpu, mps = torch.device("cpu"), torch.device("mps")
    assert resolve_dtype("auto", cpu, 70_000_000_000) == torch.float32  # a CPU always computes in float32
    assert resolve_dtype("auto", mps, 135_000_000) == torch.float32
    assert resolve_dtype("auto", mps, 1_900_000_000) == torch.float32  # a 1.7B target and its draft
    assert resolve_dtype("auto", mps, 7_600_000_000) == torch.bfloat16
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert specviz.load_pair("tiny-random", device="cpu").info["dtype"] == "float32"


def test_in_bfloat16_every_greedy_difference_is_a_tie():
    """In bfloat16 some methods part from autoregressive decoding; `specviz.parity` must call each
    such position a tie (the dtype's, not the method's fault), and a real difference must not be."""
    from specviz.parity import compare

    pair = tiny_pair(dtype=torch.bfloat16, draft="perturbed")
    verdicts = []
    for prompt in ("Janet's ducks lay 16 eggs", "x", "import numpy as np", "Once upon a time"):
        ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=64)
        for method in ("vanilla", "heuristic", "streaming", "pearl-no-pre"):
            out = specviz.generate(
                method, pair, prompt, max_new_tokens=64, **get_method(method).select({"speculation_length": 4})
            )
            verdicts.append(compare(pair, ref.prompt_ids, ref.summary.output_ids, out.summary.output_ids).verdict)
        wrong = list(ref.summary.output_ids)
        wrong[5] = (wrong[5] + 1) % pair.vocab_size  # not what the target would pick: a real difference
        assert compare(pair, ref.prompt_ids, ref.summary.output_ids, wrong).verdict == "differs"
    assert "tie" in verdicts and "differs" not in verdicts, verdicts
