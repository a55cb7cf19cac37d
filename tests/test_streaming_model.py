"""Multi-stream attention on a tiny Llama: streams see exactly what the paper says and nothing later;
the main stream is the (LoRA-tuned) model itself; decoding's cached streams equal training's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.models.kv import CachedLM
from specviz.models.streaming import (
    StreamingConfig,
    StreamingLM,
    load_adapter,
    read_adapter_meta,
    stream_mask,
    trained_for,
    untrained,
)
from specviz.models.tiny import TARGET_CONFIG, tiny_model

CFG = StreamingConfig(stream_layers=2, gamma=3, lora_rank=4, eta_rank=4)
IDS = torch.tensor([[5, 17, 300, 42, 42, 7, 99, 12, 401, 3]])


def tuned_lm(seed: int = 0, lora_main: bool = True) -> StreamingLM:
    """A tiny MSA model whose LoRA and f_eta are not zero (as after training)."""
    torch.manual_seed(seed)
    return perturbed(StreamingLM(tiny_model(seed=1, **TARGET_CONFIG), dataclasses.replace(CFG, lora_main=lora_main)))


def perturbed(lm: StreamingLM) -> StreamingLM:
    """`lm` with every adapter weight moved off its initial value (LoRA B off zero)."""
    with torch.no_grad():
        for p in lm.adapter_state().values():
            p.add_(torch.randn_like(p) * 0.05)
    return lm


def test_mask_is_exactly_the_papers():
    node_pos = torch.tensor([0, 2, 3])
    gamma, n_main = 2, 4
    mask = stream_mask(node_pos, n_main, gamma)
    assert mask.shape == (6, 4 + 6)
    for t, p in enumerate(node_pos.tolist()):
        for j in range(gamma):
            row = mask[t * gamma + j]
            assert row[:n_main].tolist() == [m <= p for m in range(n_main)]  # main stream up to its position
            want = [(t2 == t and i <= j) for t2 in range(3) for i in range(gamma)]  # streams <= j at that position
            assert row[n_main:].tolist() == want


@torch.no_grad()
def test_zero_lora_main_stream_is_the_original_model():
    base = tiny_model(seed=1, **TARGET_CONFIG)
    lm = untrained(base, CFG)
    want = base(input_ids=IDS).logits
    torch.testing.assert_close(lm.tuned(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)
    main, _ = lm(IDS)
    torch.testing.assert_close(lm.logits(main), want, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_own_attention_equals_hugging_face_with_lora():
    lm = tuned_lm()
    base = tiny_model(seed=1, **TARGET_CONFIG)
    hf = lm.tuned(input_ids=IDS).logits
    assert not torch.allclose(hf, base(input_ids=IDS).logits, atol=1e-3)  # the LoRA does something
    main, _ = lm(IDS)
    torch.testing.assert_close(lm.logits(main), hf, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_streams_see_nothing_later():
    lm = tuned_lm()
    _, s = lm(IDS)
    t = 4
    later = IDS.clone()
    later[0, t + 1 :] = 11  # change every token after t
    _, s2 = lm(later)
    torch.testing.assert_close(s2[0, : t + 1], s[0, : t + 1])
    assert not torch.allclose(s2[0, t + 1 :], s[0, t + 1 :])
    # stream j sees streams <= j only: moving P_3 changes stream 3 and no other
    lm.stream_embed[2] += 1.0
    _, s3 = lm(IDS)
    torch.testing.assert_close(s3[:, :, :2], s[:, :, :2])
    assert not torch.allclose(s3[:, :, 2], s[:, :, 2])
    lm.stream_embed[0] += 1.0  # P_1 reaches streams 2 and 3 too
    _, s4 = lm(IDS)
    assert all(not torch.allclose(s4[:, :, j], s3[:, :, j]) for j in range(3))


@torch.no_grad()
def test_streams_of_some_positions_equal_those_of_all():
    lm = tuned_lm()
    main, s = lm(IDS)
    nodes = torch.tensor([1, 4, 8])
    main2, s2 = lm(IDS, nodes=nodes)
    torch.testing.assert_close(main2, main)
    torch.testing.assert_close(s2[0], s[0, nodes])


@torch.no_grad()
def test_stream_initialisation():
    lm = tuned_lm()
    h = torch.randn(2, 5, lm.tuned.config.hidden_size)
    s = lm.init_streams(h)
    assert s.shape == (2, 5, CFG.gamma, h.shape[-1])
    f = h + lm.eta_up(lm.eta_down(h))
    for j in range(CFG.gamma):
        torch.testing.assert_close(s[:, :, j], f + lm.stream_embed[j])


@torch.no_grad()
def test_streams_only_lora_leaves_the_main_stream_the_original_model():
    """lora_main=False: the same LoRA weights change the streams and nothing of the main stream."""
    base = tiny_model(seed=1, **TARGET_CONFIG)
    lm, both = tuned_lm(lora_main=False), tuned_lm(lora_main=True)  # same seed: same adapter values
    want = base(input_ids=IDS).logits
    torch.testing.assert_close(lm.tuned(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)
    main, s = lm(IDS)
    torch.testing.assert_close(lm.logits(main), want, rtol=1e-5, atol=1e-5)
    for name, p in lm.adapter_state().items():  # LoRA off: the streams change, so it acted on them
        if name.endswith("lora_B"):
            p.zero_()
    _, s_no_lora = lm(IDS)
    assert not torch.allclose(s, s_no_lora, atol=1e-4)
    assert not torch.allclose(both.tuned(input_ids=IDS).logits, want, atol=1e-3)
    assert (
        both.changes_main_stream() and not lm.changes_main_stream() and not untrained(base, CFG).changes_main_stream()
    )


@pytest.mark.parametrize("lora_main", [True, False])
def test_cached_streams_equal_training_streams(lora_main):
    """Decoding runs the streams of one node from the KV cache; they must equal the full pass."""
    lm = tuned_lm(lora_main=lora_main)
    with torch.no_grad():
        _, s = lm(IDS)
        want = lm.logits(s[0])  # [T, gamma, V]
    cached = CachedLM(lm.tuned)
    ids = IDS[0].tolist()
    # tokens 1..5 as a one-path tree hung on token 0: hidden rows for tokens 0..5
    _, h = cached.forward_tree_hidden(ids[:1], ids[1:6], [-1, 0, 1, 2, 3], layer=lm.first_stream_layer)
    for t in (5, 2):  # the last node, then an earlier one after rolling the cache back
        cached.truncate(t + 1)
        got = lm.stream_logits(h[t], t, cached.layer_kv)
        torch.testing.assert_close(got, want[t], rtol=1e-4, atol=1e-4)


def test_adapter_round_trip(tmp_path):
    lm = tuned_lm()
    path = tmp_path / "adapter.safetensors"
    lm.save_adapter(path)
    again = load_adapter(tiny_model(seed=1, **TARGET_CONFIG), path)
    with torch.no_grad():
        torch.testing.assert_close(again.tuned(input_ids=IDS).logits, lm.tuned(input_ids=IDS).logits)
        torch.testing.assert_close(again(IDS)[1], lm(IDS)[1])
    assert lm.extra_parameters() == again.extra_parameters() > 0
    # the same target in bfloat16 still matches; another target does not
    meta = read_adapter_meta(path)
    assert trained_for(meta, tiny_model(seed=1, **TARGET_CONFIG).to(torch.bfloat16))
    assert not trained_for(meta, tiny_model(seed=2, **TARGET_CONFIG))
    with pytest.raises(ValueError, match="another target"):
        load_adapter(tiny_model(seed=2, **TARGET_CONFIG), path)
