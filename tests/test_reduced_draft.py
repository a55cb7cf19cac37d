"""The reduced-vocabulary draft: its head gives q = 0 outside its tokens, and its lean decoding pass
(`step`, int8 weights with bfloat16 activations on a CPU, a static cache) computes what its
Hugging Face forward computes, through cache growth, rollback and weight updates."""

from __future__ import annotations

import pytest
import torch

from specviz.models.draft import grouped_attention
from specviz.models.kv import CachedLM

IDS = [5, 17, 300, 42, 5, 17, 99, 100, 101, 7, 250, 3]


def hf_logits(draft, ids):
    with torch.no_grad():
        return draft(input_ids=torch.tensor([ids])).logits[0]  # [T, V]


def test_the_head_scores_only_its_tokens(reduced_pair):
    draft = reduced_pair.draft
    logits = hf_logits(draft, IDS)
    head = draft.lm_head.vocab_ids
    inside = torch.zeros(logits.shape[-1], dtype=torch.bool)
    inside[head] = True
    assert torch.isfinite(logits[:, inside]).all() and torch.isneginf(logits[:, ~inside]).all()
    q = torch.softmax(logits, -1)
    assert (q[:, ~inside] == 0).all()
    index = draft.lm_head.index_of()
    assert torch.equal(index[head], torch.arange(len(head))) and (index[~inside] == -1).all()


def test_the_lean_pass_matches_the_hugging_face_forward(reduced_pair):
    draft = reduced_pair.draft
    ref = hf_logits(draft, IDS)
    lm = CachedLM(draft)
    assert lm.lean
    got = torch.cat([lm.forward(IDS[:5], n_logits=5), lm.forward(IDS[5:6]), lm.forward(IDS[6:], n_logits=len(IDS) - 6)])
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), finite)
    scale = ref[finite].abs().max()
    assert (got[finite] - ref[finite]).abs().max() < 0.05 * scale  # int8 weights, bfloat16 products
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_rollback_and_growth_of_the_static_cache(reduced_pair):
    draft = reduced_pair.draft
    whole = CachedLM(draft).forward(IDS, n_logits=len(IDS))
    lm = CachedLM(draft)
    lm.cache = draft.new_cache(capacity=4)  # grows by doubling as tokens arrive
    lm.forward(IDS[:6], n_logits=1)
    lm.forward([1, 2, 3])  # a refused draft
    lm.truncate(6)
    assert lm.cache.get_seq_length() == len(lm) == 6
    rest = lm.forward(IDS[6:], n_logits=len(IDS) - 6)
    assert torch.allclose(rest, whole[6:], atol=1e-4, equal_nan=True)


def test_a_changed_weight_is_packed_again(reduced_pair):
    import copy

    draft = copy.deepcopy(reduced_pair.draft)
    before = CachedLM(draft).forward(IDS)
    with torch.no_grad():
        draft.lm_head.proj.weight.mul_(2.0)  # an optimiser step or load_state_dict changes weights in place
    after = CachedLM(draft).forward(IDS)
    finite = torch.isfinite(before)
    assert torch.allclose(after[finite], 2 * before[finite], rtol=0.05, atol=0.05)
    # a parameter replaced, then a whole submodule: each packed again too
    draft.lm_head.proj.weight = torch.nn.Parameter(draft.lm_head.proj.weight.detach() / 2)
    assert torch.allclose(CachedLM(draft).forward(IDS)[finite], before[finite], rtol=0.05, atol=0.05)
    head = draft.lm_head.proj
    draft.lm_head.proj = torch.nn.Linear(head.in_features, head.out_features, bias=False)
    with torch.no_grad():
        draft.lm_head.proj.weight.copy_(head.weight * 3)
    assert torch.allclose(CachedLM(draft).forward(IDS)[finite], 3 * before[finite], rtol=0.05, atol=0.05)


def test_grouped_attention_equals_repeated_key_value_heads():
    torch.manual_seed(0)
    H, Hkv, T, S, hd = 6, 2, 3, 7, 8
    q, k, v = torch.randn(H, T, hd), torch.randn(Hkv, S, hd), torch.randn(Hkv, S, hd)
    start = S - T
    k_rep, v_rep = k.repeat_interleave(H // Hkv, 0), v.repeat_interleave(H // Hkv, 0)  # HF's repeat_kv
    visible = torch.ones(T, S, dtype=torch.bool).tril(start)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=visible, scale=0.3)
    got = grouped_attention(q, k, v, 0.3, start)
    assert torch.allclose(got, ref.transpose(0, 1).reshape(T, H * hd), atol=1e-5)


def test_per_layer_cache_reads_say_a_lean_model_has_none(reduced_pair):
    """A lean draft decodes over its own StaticKV: asking for a Hugging Face cache layer is a ValueError
    that says so (it was an AttributeError on StaticKV)."""
    lm = CachedLM(reduced_pair.draft)
    lm.forward(IDS[:4])
    with pytest.raises(ValueError, match="not on a lean-decoding model"):
        lm.layer_kv(0)
