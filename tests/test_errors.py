"""Bad input gives one clear SpecvizError at once: never a hang or a bare traceback."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

import specviz
from specviz.errors import ModelNotAvailable, SpecvizError


@pytest.mark.parametrize(
    "prompt,kwargs,message",
    [
        ("", {}, "prompt is empty"),
        ("   \n", {}, "prompt is empty"),
        ([], {}, "prompt is empty"),
        ([1, 2.5, 3], {}, "token ids must be integers"),
        ([1, "a"], {}, "token ids must be integers"),
        ([1, 10**9], {}, "token ids must be integers"),
        ([1, 10**30], {}, "token ids must be integers"),
        ([1, 1e30], {}, "token ids must be integers"),
        ([1, -1], {}, "token ids must be integers"),
        ("hi", {"max_new_tokens": 0}, "max_new_tokens must be from 1 to"),
        ("hi", {"max_new_tokens": -5}, "max_new_tokens must be from 1 to"),
        ("hi", {"max_new_tokens": 10**30}, "max_new_tokens must be from 1 to"),
        ("hi", {"max_new_tokens": 2.0}, "max_new_tokens must be an integer"),
        ("hi", {"max_new_tokens": 10**6}, "max_new_tokens must be from 1 to"),
        ("hi " * 1100, {"max_new_tokens": 1000}, "exceeds the model's context"),
        ("hi", {"temperature": -1}, "temperature"),
        ("hi", {"temperature": float("inf")}, "temperature must be from 0 to 100"),
        ("hi", {"temperature": float("nan")}, "temperature must be from 0 to 100"),
        ("hi", {"temperature": "abc"}, "temperature must be a number"),
        ("hi", {"top_p": 0}, "top_p"),
        ("hi", {"top_k": "x"}, "top_k .* must be an integer"),
        ("hi", {"seed": 2**70}, "seed must be from 0 to"),
        ("hi", {"seed": -1}, "seed must be from 0 to"),
        ("hi", {"seed": "x"}, "seed must be an integer"),
        ("hi", {"seed": 1.5}, "seed must be an integer"),
        ("hi", {"temperature": 1e-45}, "temperature must be 0 .greedy. or at least 1e-30"),
        ("hi", {"chat": "yes"}, "chat must be True, False or None"),
        ("abc\ud800", {}, "not valid Unicode text"),
        (None, {}, "must be text or a list of token ids, got NoneType"),
        (7, {}, "must be text or a list of token ids, got int"),
        (b"hi", {}, "must be text or a list of token ids, got bytes"),
    ],
)
def test_bad_prompt_or_settings(prompt, kwargs, message, random_pair):
    with pytest.raises(SpecvizError, match=message):
        specviz.run("autoregressive", random_pair, prompt, **kwargs)


def test_a_token_id_past_the_vocabulary(random_pair):
    import numpy as np

    size = random_pair.vocab_size
    for ids in ([1, size], np.array([1, size]), np.array([[1, 2]])):
        with pytest.raises(SpecvizError, match=re.escape(f"token ids must be integers in [0, {size})")):
            specviz.run("vanilla", random_pair, ids)
    assert specviz.run("vanilla", random_pair, np.array([1, size - 1]), max_new_tokens=2)


@pytest.mark.parametrize("gamma", [0, -3, 2.5, True, "4", 10**6])
@pytest.mark.parametrize("method", ["vanilla", "heuristic", "sssd", "prompt_lookup", "osd"])
def test_bad_speculation_length(gamma, method, random_pair):
    with pytest.raises(SpecvizError, match=r"speculation_length must be (an integer|from 1 to 64)"):
        specviz.run(method, random_pair, "hi", speculation_length=gamma)


def test_a_file_that_is_not_a_datastore_is_one_line(tmp_path, random_pair):
    """`--option sssd.datastore=/etc/passwd` once ended in a 32-line numpy traceback; arrays that do not
    fit together once loaded silently (SSSD then drafted from nothing)."""
    import numpy as np

    from specviz.datastore import Datastore, tokenizer_fingerprint

    good = Datastore.build([[1, 2, 3, 4], [2, 3, 4, 5]], tokenizer_fingerprint(random_pair.tokenizer))
    text = tmp_path / "notes.txt"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    one = tmp_path / "one.npy"
    np.save(one, good.tokens)
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, tokens=np.array([{"a": 1}], dtype=object), meta=np.zeros(2, dtype=np.uint8))
    flat = Datastore(good.tokens.reshape(2, -1), good.sa, good.separator, good.fingerprint, good.info)
    past_the_end = Datastore(good.tokens, good.sa + 100, good.separator, good.fingerprint, good.info)
    cases = {
        text: "not a readable .npz archive",
        tmp_path: "not a readable .npz archive",
        one: "one numpy array",
        other: "no readable tokens and meta",
        pickled: "no readable tokens and meta",
        flat.save(tmp_path / "flat.npz"): "its tokens are not one row of integer ids",
        past_the_end.save(tmp_path / "past.npz"): "its suffix array does not index its tokens",
    }
    for path, words in cases.items():
        with pytest.raises(SpecvizError, match=re.escape(f"{path} is not a datastore ({words}")):
            Datastore.load(path)
    with pytest.raises(SpecvizError, match=r"notes\.txt is not a datastore"):
        list(specviz.run("sssd", random_pair, [1, 2, 3, 4], max_new_tokens=4, datastore=str(text)))
    assert Datastore.load(good.save(tmp_path / "good.npz")).fingerprint == good.fingerprint


def test_unknown_method_and_option(random_pair):
    with pytest.raises(SpecvizError, match=r"unknown method 'medusa'.*vanilla"):
        specviz.run("medusa", random_pair, "hi")
    with pytest.raises(SpecvizError, match="has no option gamma"):
        specviz.run("vanilla", random_pair, "hi", gamma=3)


def test_a_method_name_reads_the_same_with_hyphens_or_underscores():
    from specviz.methods import get_method

    assert get_method("vllm-ngram").name == "vllm_ngram" and get_method("prompt-lookup").name == "prompt_lookup"
    assert get_method("pearl_no_pre").name == "pearl-no-pre"
    with pytest.raises(SpecvizError, match="unknown method 'vllm ngram'"):
        get_method("vllm ngram")


def test_unavailable_model_fails_fast_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from specviz.models import hub

    hub.hub_reachable.cache_clear()
    start = time.perf_counter()
    with pytest.raises(ModelNotAvailable, match=r"not-a-real-org/not-a-model.*hf download"):
        specviz.load_pair(target="not-a-real-org/not-a-model", draft="not-a-real-org/other")
    assert time.perf_counter() - start < 10
    hub.hub_reachable.cache_clear()
    with pytest.raises(SpecvizError, match="unknown model pair 'nope'"):
        specviz.load_pair("nope")


def test_bench_cli_reports_errors_without_a_traceback():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "specviz.bench",
            "--pair",
            "tiny-random",
            "--methods",
            "vanilla,medusa",
            "--prompt",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    assert "error: unknown method 'medusa'" in out.stderr
    assert "Traceback" not in out.stderr


def test_experiment_subcommand_reports_a_user_error_in_one_line(capsys):
    from specviz import bench

    code = bench.main(["sssd", "--pair", "tiny-random", "--stages", "grid", "--limit", "1", "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err


def test_without_autograd_steps_a_run_unchanged_and_outside_autograd(random_pair):
    import torch

    from specviz.runner import without_autograd

    plain = [r.emitted for r in specviz.run("vanilla", random_pair, "abc", max_new_tokens=12)]
    seen = [r.emitted for r in without_autograd(specviz.run("vanilla", random_pair, "abc", max_new_tokens=12))]
    assert seen == plain and not torch.is_inference_mode_enabled()
