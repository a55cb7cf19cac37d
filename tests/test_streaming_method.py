"""Speculative streaming is lossless w.r.t. the tuned model (base + LoRA): its greedy output equals
autoregressive decoding of that same model (speculation_length=0), on accept and reject paths."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import specviz
from specviz.errors import SpecvizError
from specviz.methods.streaming import streaming_model
from tests.test_streaming_model import tuned_lm

PROMPTS = ["def fibonacci(n):", [5, 17, 300, 42, 42, 42, 7]]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A tiny adapter with nonzero LoRA, tagged for the tiny pair's target."""
    path = tmp_path_factory.mktemp("streaming") / "tiny.safetensors"
    tuned_lm().save_adapter(path)
    return str(path)


def output(pair, prompt, **kw):
    return specviz.generate("streaming", pair, prompt, **kw).summary.output_ids


def test_tuned_greedy_output_equals_autoregressive_of_the_tuned_model(random_pair, adapter):
    for prompt in PROMPTS:
        ar_tuned = output(random_pair, prompt, max_new_tokens=30, adapter=adapter, speculation_length=0)
        ar_base = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=30).summary.output_ids
        assert ar_tuned != ar_base  # the LoRA changes the model, so this comparison means something
        for gamma in (1, 3):
            assert output(random_pair, prompt, max_new_tokens=30, adapter=adapter, speculation_length=gamma) == ar_tuned


def test_right_and_wrong_streams_keep_the_output(random_pair, monkeypatch):
    """Streams forced to predict the true continuation except stream 2 every other node: full
    acceptances, partial acceptances, EOS and the token budget inside drafts all keep AR's output."""
    prompt = PROMPTS[1]
    lm = streaming_model(random_pair.target, "untrained")
    ref = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=40).summary.output_ids
    full = list(prompt) + list(ref) + [0] * 10
    V = random_pair.vocab_size

    def oracle_streams(h, position, layer_kv):
        future = [full[position + 1 + j] for j in range(1, lm.cfg.gamma + 1)]
        if position % 2:
            future[1] = (future[1] + 1) % V
        return torch.nn.functional.one_hot(torch.tensor(future), V).float()

    monkeypatch.setattr(lm, "stream_logits", oracle_streams)
    for max_new in (1, 7, 40):
        run = specviz.generate("streaming", random_pair, prompt, max_new_tokens=max_new, adapter="untrained")
        assert run.summary.output_ids == ref[:max_new]
    accepted = [r.accepted for r in run.records]
    assert max(accepted) == lm.cfg.gamma and 1 in accepted  # both paths taken
    assert run.summary.target_forwards < 40 / 2
    eos = ref[12]
    stopped = specviz.generate("streaming", dataclasses.replace(random_pair, eos_token_ids=(eos,)), prompt, max_new_tokens=40, adapter="untrained")
    assert stopped.summary.output_ids == ref[: ref.index(eos) + 1] and stopped.summary.stop_reason == "eos"


def test_bad_adapter_is_a_clear_error(random_pair, tmp_path):
    with pytest.raises(SpecvizError, match="no streaming adapter"):
        output(random_pair, "x", max_new_tokens=2, adapter=str(tmp_path / "missing.safetensors"))
    with pytest.raises(SpecvizError, match="non-negative"):
        output(random_pair, "x", max_new_tokens=2, speculation_length=-1)
