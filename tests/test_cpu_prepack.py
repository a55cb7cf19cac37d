"""Packed oneDNN weights for CPU linear layers (specviz.models.cpu): same numbers, never stale."""

from __future__ import annotations

import copy
import gc
import weakref

import torch

from specviz.models.cpu import EXACT_ROWS, packed_rows, prepack_linears


def test_the_pinned_torch_has_onednn():  # without it the packed path is off and nothing below is exercised
    assert torch.backends.mkldnn.is_available()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8, bias=False))


def test_packed_layers_compute_what_dense_ones_do():
    dense, packed = _model(), _model()
    assert prepack_linears(packed) == 2
    for shape in ((1, 1, 16), (1, 5, 16), (3, 7, 16)):
        x = torch.randn(shape)
        with torch.inference_mode():
            torch.testing.assert_close(packed(x), dense(x), rtol=1e-5, atol=1e-5)
    assert packed[0]._specviz_packed.weight is not None and packed[0]._specviz_packed.weight.is_mkldnn


def test_long_inputs_are_padded_to_few_shapes_and_compute_the_same():
    """oneDNN keeps a kernel per input shape: a prompt's many lengths meet few padded shapes."""
    sizes = [packed_rows(m) for m in range(1, 2049)]
    assert sizes[:EXACT_ROWS] == list(range(1, EXACT_ROWS + 1))  # decoding and short verification: as they are
    assert all(m <= p <= 1.25 * m for m, p in zip(range(1, 2049), sizes, strict=True)) and sizes == sorted(sizes)
    assert len(set(sizes)) <= 40
    dense, packed = _model(), _model()
    prepack_linears(packed)
    for rows in (EXACT_ROWS + 1, 19, 37, 100):
        x = torch.randn(1, rows, 16)
        with torch.inference_mode():
            out = packed(x)
            assert out.shape == (1, rows, 8)
            torch.testing.assert_close(out, dense(x), rtol=1e-5, atol=1e-5)


def test_a_weight_changed_in_place_is_packed_again():
    model = _model()
    prepack_linears(model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        model(x)
        model[2].weight.mul_(-2.0)  # an optimiser step or load_state_dict changes weights in place
        expected = torch.nn.functional.linear(model[1](model[0](x)), model[2].weight)
        torch.testing.assert_close(model(x), expected)


def test_training_takes_the_ordinary_path_and_copies_pack_their_own_weights():
    model = _model()
    prepack_linears(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        model(x)
    twin = copy.deepcopy(model)  # OSD's learner copies the draft it serves
    assert twin[0].forward.__self__ is twin[0] and twin[0]._specviz_packed.weight is None
    loss = twin(x).square().mean()
    loss.backward()  # autograd on: dense path, gradients reach the weights
    assert twin[0].weight.grad is not None and model[0].weight.grad is None
    with torch.no_grad():
        twin[0].weight -= 0.1 * twin[0].weight.grad
        torch.testing.assert_close(
            twin(x), torch.nn.functional.linear(twin[1](twin[0](x)), twin[2].weight), rtol=1e-5, atol=1e-5
        )


def test_a_packed_model_is_freed_as_soon_as_it_is_dropped():
    """No reference cycle: a released learner's packed draft goes at once, not at the next cyclic collection."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    assert prepack_linears(model) == 1 and isinstance(model[0], torch.nn.Linear)
    with torch.inference_mode():
        model(torch.randn(2, 8))
    layer = weakref.ref(model[0])
    gc.disable()
    try:
        del model
        assert layer() is None
    finally:
        gc.enable()
