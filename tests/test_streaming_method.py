"""Speculative streaming is lossless w.r.t. the tuned model (base + LoRA): its greedy output equals
autoregressive decoding of that same model (speculation_length=0), on accept and reject paths."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import specviz
from specviz.errors import SpecvizError
from specviz.methods.streaming import StreamDrafter, stream_tree, streaming_model
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
        for gamma, width in ((1, 1), (3, 1), (3, 3)):
            got = output(
                random_pair,
                prompt,
                max_new_tokens=30,
                adapter=adapter,
                speculation_length=gamma,
                tree_width=width,
                tree_nodes=8,
            )
            assert got == ar_tuned, (gamma, width)


def test_streams_only_adapter_reproduces_the_original_target(random_pair, tmp_path):
    """An adapter whose LoRA acts on the streams only: streaming's greedy output is the target's own."""
    path = tmp_path / "streams-only.safetensors"
    tuned_lm(lora_main=False).save_adapter(path)
    for prompt in PROMPTS:
        ar = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=30).summary.output_ids
        for gamma, width in ((1, 1), (3, 3)):
            got = output(
                random_pair,
                prompt,
                max_new_tokens=30,
                adapter=str(path),
                speculation_length=gamma,
                tree_width=width,
                tree_nodes=8,
            )
            assert got == ar, (gamma, width)


def test_right_and_wrong_streams_keep_the_output(random_pair, monkeypatch):
    """Streams forced to predict the true continuation, except that at every other node stream 2
    ranks a wrong token first and the right one second: a single path is then cut there, a tree of
    width 2 still finds the right branch. Full and partial acceptances, EOS and the token budget
    inside drafts all keep AR's output."""
    prompt = PROMPTS[1]
    lm = streaming_model(random_pair.target, "untrained")
    ref = specviz.generate("autoregressive", random_pair, prompt, max_new_tokens=40).summary.output_ids
    full = list(prompt) + list(ref) + [0] * 10
    V = random_pair.vocab_size

    def oracle_streams(drafter, context):
        if drafter.streams is None:  # no pass has run yet
            return None
        position = len(context.ids) - 2  # the accepted node (the last committed id is the target's own)
        logits = torch.zeros(lm.cfg.gamma, V)
        for j in range(lm.cfg.gamma):
            right = full[position + 2 + j]
            logits[j, right] = 5.0
            if j == 1 and position % 2:
                logits[j, (right + 1) % V] = 6.0
        return logits

    monkeypatch.setattr(StreamDrafter, "stream_logits", oracle_streams)
    forwards = {}
    for width in (1, 2):
        for max_new in (1, 7, 40):
            run = specviz.generate(
                "streaming", random_pair, prompt, max_new_tokens=max_new, adapter="untrained", tree_width=width
            )
            assert run.summary.output_ids == ref[:max_new], (width, max_new)
        forwards[width] = run.summary.target_forwards
        accepted = [r.accepted for r in run.records]
        assert max(accepted) == lm.cfg.gamma
        if width == 1:
            assert 1 in accepted  # cut at the wrong stream-2 token
    assert forwards[2] < forwards[1] < 40 / 2
    eos = ref[12]
    stopped = specviz.generate(
        "streaming",
        dataclasses.replace(random_pair, eos_token_ids=(eos,)),
        prompt,
        max_new_tokens=40,
        adapter="untrained",
        tree_width=2,
    )
    assert stopped.summary.output_ids == ref[: ref.index(eos) + 1] and stopped.summary.stop_reason == "eos"


def test_stream_tree():
    probs = torch.tensor([[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.0, 0.4], [0.0, 0.0, 0.9, 0.1]])
    tree = stream_tree(probs, width=2, max_nodes=5)
    # level 1: 1 (0.6), 2 (0.3); level 2 under 1: 0 (0.30), 3 (0.24); under 2: 0 (0.15), 3 (0.12);
    # level 3 under 1-0: 2 (0.27). Best five: 0.6, 0.3, 0.30, 0.27, 0.24.
    assert tree.tokens == [1, 2, 0, 3, 2]
    assert tree.parents == [-1, -1, 0, 0, 2]
    assert tree.sources == ["stream 1", "stream 1", "stream 2", "stream 2", "stream 3"]
    assert stream_tree(probs, width=1, max_nodes=16).tokens == [1, 0, 2]  # a single path


def test_bad_adapter_is_a_clear_error(random_pair, tmp_path):
    with pytest.raises(SpecvizError, match="no streaming adapter"):
        output(random_pair, "x", max_new_tokens=2, adapter=str(tmp_path / "missing.safetensors"))
    with pytest.raises(SpecvizError, match="must be from 0 to 64"):
        output(random_pair, "x", max_new_tokens=2, speculation_length=-1)


def test_fused_records_carry_the_shape_of_their_pass_and_two_pass_records_do_not(random_pair, adapter):
    """N, N_s, γ in use and m are on each fused record (what the pass figure draws, with no model);
    the two-pass build's records leave them unset."""
    from specviz.extras import StreamingPassExtra

    run = specviz.generate(
        "streaming", random_pair, PROMPTS[1], max_new_tokens=20, adapter=adapter, speculation_length=2
    )
    prompt = len(PROMPTS[1])
    for i, r in enumerate(run.records):
        shape = r.extras(StreamingPassExtra)
        assert shape is not None
        assert (shape.layers, shape.stream_layers) == (random_pair.target.config.num_hidden_layers, 2)
        assert shape.gamma == min(2, max(0, 20 - (r.position - prompt) - 2))  # γ in use, fewer at the end
        before = run.records[i - 1] if i else None
        # m: the whole prompt first (the cache starts empty), then the target's own token of the last iteration
        assert shape.committed_rows == (prompt if before is None else len(before.emitted) - before.accepted)
    assert (
        run.records[0].extras(StreamingPassExtra).gamma == 2 and run.records[-1].extras(StreamingPassExtra).gamma == 0
    )
    alone = specviz.generate("streaming", random_pair, PROMPTS[1], max_new_tokens=4, speculation_length=0)
    assert all(r.extras(StreamingPassExtra).gamma == 0 for r in alone.records)  # the tuned model alone: no streams
    two = specviz.generate("streaming", random_pair, PROMPTS[1], max_new_tokens=8, adapter=adapter, passes="two-pass")
    assert all(r.extras(StreamingPassExtra) is None for r in two.records)
