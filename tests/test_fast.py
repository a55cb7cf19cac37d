"""The fast target step (`specviz.models.fast`, issue 51) is the same model as transformers' eager
forward: the same logits on every kind of pass a method makes (a prompt, a chain, a token tree, a
kept path, hidden states, cached keys), every method's greedy output the same on both engines, and
the eager forward wherever the fast one does not compute the model exactly."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

import specviz
from specviz.methods import get_method
from specviz.models import fast
from specviz.models.kv import BatchedLM, CachedLM
from specviz.models.tiny import tiny_pair
from tests.conftest import own_methods

PROMPT = "def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)"
TREE, PARENTS = [11, 12, 13, 14, 15, 16], [-1, 0, 0, 1, -1, 4]


def passes(model, tokens: list[int]) -> list[torch.Tensor]:
    """Every kind of pass the methods make, in a row on one CachedLM, and what each returns."""
    lm = CachedLM(model)
    out = [lm.forward(tokens, n_logits=3), lm.forward(tokens[:5], n_logits=5)]
    lm.truncate(len(tokens))  # a rejected chain rolled back
    out.append(lm.forward(tokens[7:8]))
    out.append(lm.forward_tree([tokens[20]], TREE, PARENTS))
    lm.keep_path(len(tokens) + 2, [0, 1, 3])  # the accepted path of the tree
    out.append(lm.forward(tokens[30:32], n_logits=2))
    out += lm.forward_tree_hidden(tokens[1:3], TREE, PARENTS, layer=2, all_rows=True)
    out += lm.forward_tree_hidden(tokens[3:4], TREE[:2], [-1, 0], layer=model.config.num_hidden_layers)
    out += lm.layer_kv(1)
    assert len(lm) == lm.cache_length()
    return out


def qwen2_model() -> Qwen2ForCausalLM:
    """A tiny random Qwen2: q|k|v biases, grouped queries, tied embeddings."""
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    for layer in model.model.layers:  # biases start at zero: make them matter
        torch.nn.init.normal_(layer.self_attn.q_proj.bias, std=0.5)
        torch.nn.init.normal_(layer.self_attn.k_proj.bias, std=0.5)
    return model


@pytest.mark.parametrize("make", [lambda: tiny_pair().target, qwen2_model], ids=["llama", "qwen2"])
def test_every_pass_gives_transformers_logits(make, monkeypatch):
    model = make()
    tokens = torch.randint(1, model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    assert CachedLM(model).engine == fast.engine_name(model) and CachedLM(model).fast is not None
    got = passes(model, tokens)
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    assert CachedLM(model).fast is None
    want = passes(model, tokens)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_batched_passes_give_transformers_logits(monkeypatch):
    """The cost model times [B, T] passes through the same forward a race runs."""
    model = tiny_pair().target
    ids = torch.randint(1, model.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(2))

    def run() -> list[torch.Tensor]:
        lm = BatchedLM(model)
        out = [lm.forward(ids[:, :8], n_logits=2), lm.forward(ids[:, 8:], n_logits=4)]
        lm.truncate(8)
        return [*out, lm.forward(ids[:, 8:9])]

    got = run()
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    for g, w in zip(got, run(), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", [s.name for s in own_methods()])
def test_every_method_emits_the_same_tokens_on_both_engines(method, monkeypatch):
    options = get_method(method).select({"speculation_length": 4})
    outputs = {}
    for engine in ("1", "0"):
        monkeypatch.setenv("SPECVIZ_FAST", engine)
        pair = tiny_pair(draft="perturbed")  # fresh: parts a method builds per model are built on this engine
        assert (CachedLM(pair.target).fast is not None) == (engine == "1")
        outputs[engine] = list(specviz.generate(method, pair, PROMPT, max_new_tokens=24, **options).summary.output_ids)
        reference = specviz.generate("autoregressive", pair, PROMPT, max_new_tokens=24).summary.output_ids
        assert outputs[engine] == list(reference), f"{method} is not lossless on engine {engine}"
    assert outputs["1"] == outputs["0"]


def test_a_weight_changed_in_place_is_read_again():
    model = tiny_pair().target
    first = fast.decoder(model)
    assert first is fast.decoder(model)  # built once per model
    before = CachedLM(model).forward([5, 6, 7])
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)  # tied to the embedding: both change
    assert fast.decoder(model) is not first
    torch.testing.assert_close(CachedLM(model).forward([5, 6, 7]), model(torch.tensor([[5, 6, 7]])).logits[0, -1:])
    assert not torch.allclose(before, CachedLM(model).forward([5, 6, 7]))


def test_models_it_does_not_compute_exactly_keep_the_eager_forward():
    llama = tiny_pair().target
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100)).eval()
    half = tiny_pair(dtype=torch.bfloat16).target
    for model in (gpt2, half):
        assert fast.decoder(model) is None and CachedLM(model).fast is None
        assert CachedLM(model).engine == "transformers' eager forward"
    assert fast.supports(llama)
    llama.model.layers[0].mlp.down_proj = torch.nn.Sequential(llama.model.layers[0].mlp.down_proj)  # an adapter
    assert not fast.supports(llama)
