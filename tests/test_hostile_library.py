"""Issue 53, third round: a user's mistake at the library or on the command line is one SpecvizError
(on the command line: one line on stderr, exit code 2, no traceback), never a bare Python error,
and nothing wrong is accepted silently."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import specviz
from specviz.errors import SpecvizError
from specviz.runner import generate_median

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def pair():
    return specviz.load_pair("tiny-random")


def refused_in_one_line(done: subprocess.CompletedProcess, *words: str) -> str:
    err = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, err[-2000:])
    assert "Traceback" not in err and "\n" not in err and err.startswith("error: "), err[-2000:]
    assert all(w in err for w in words), err
    return err


# ----- the app's command: a pair it cannot load is refused before it serves -----


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "name, why",
    [
        ("nobody/no-such-model", "unknown model pair"),  # one hub id is no pair
        ("nobody/no-such-target,nobody/no-such-draft", "not in the local Hugging Face cache"),
    ],
)
def test_the_app_refuses_to_start_with_a_pair_it_cannot_load(name, why):
    env = {**OFFLINE, "GRADIO_SERVER_PORT": str(free_port())}
    try:
        done = subprocess.run(
            [sys.executable, "app.py", "--pair", name],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the app served a pair it cannot load ({name})")
    refused_in_one_line(done, name, why)


def test_the_pair_loaded_at_start_is_the_one_its_first_visitor_gets():
    from specviz.cli import served_pair
    from specviz.models.pair import is_loaded
    from specviz.ui.pairs import Placement, resolve_pair

    for name in ("tiny-random", "tiny-self"):
        loaded, notice = served_pair(name, "auto", "auto")
        assert notice is None
        assert resolve_pair(name, None, Placement("auto", "auto"))[0] is loaded  # no second load
    assert is_loaded("tiny-random")
    with pytest.raises(SpecvizError, match="unknown model pair 'nobody/x'"):
        served_pair("nobody/x", "auto", "auto")


# ----- the library: bare Python errors become one SpecvizError -----


def test_a_pair_that_is_no_pair_is_refused(pair):
    for call in (
        lambda: list(specviz.run("vanilla", None, "hi")),
        lambda: specviz.generate("vanilla", None, "hi"),
        lambda: generate_median("vanilla", "tiny-random", "hi"),
        lambda: specviz.encode_prompt(None, "hi"),
    ):
        with pytest.raises(SpecvizError, match="load_pair"):
            call()


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ((5,), {}, "pair name must be text"),
        ((["tiny-random"],), {}, "pair name must be text"),
        ((), {"target": 5, "draft": "x"}, "target must be"),
        (("tiny-random",), {"device": 5}, "device must be"),
        (("tiny-random",), {"dtype": 5}, "dtype"),
        (("tiny-random",), {"device_map": 5}, "device_map must be"),
        (("tiny-random",), {"trust_remote_code": "yes"}, "trust_remote_code must be True or False"),
    ],
)
def test_load_pair_refuses_arguments_of_the_wrong_kind(args, kwargs, words):
    with pytest.raises(SpecvizError, match=words):
        specviz.load_pair(*args, **kwargs)


@pytest.mark.parametrize(
    "method, options, words",
    [
        ("sssd", {"datastore": 5}, "datastore must be text"),
        ("eagle", {"head": 5}, "head must be text"),
        ("disco", {"classifier": None}, "classifier must be text"),
        ("pearl", {"executor": object()}, "executor must"),
        ("prompt_lookup", {"min_ngram": 5, "max_ngram": 2}, r"min_ngram \(5\) must be at most max_ngram \(2\)"),
    ],
)
def test_wrong_options_are_refused_before_the_first_step(pair, method, options, words):
    with pytest.raises(SpecvizError, match=words):
        specviz.run(method, pair, "hi", max_new_tokens=4, **options)  # not a step taken


@pytest.mark.parametrize("prompt", [123, 1.5, {"prompt": "hi"}, [["hi"]], ["hi"], torch.tensor(5), None, [True]])
def test_a_prompt_that_is_neither_text_nor_token_ids_is_refused(pair, prompt):
    with pytest.raises(SpecvizError, match=r"prompt|token ids"):
        specviz.run("vanilla", pair, prompt, max_new_tokens=4)
    with pytest.raises(SpecvizError, match=r"prompt|token ids"):
        specviz.encode_prompt(pair, prompt)


@pytest.mark.parametrize(
    "options",
    [
        {"speculation_length": 16.7},
        {"speculation_length": 4.0},
        {"max_new_tokens": 16.7},
        {"top_k": 2.5},
        {"seed": 1.5},
    ],
)
def test_a_fraction_where_a_count_goes_is_refused_not_truncated(pair, options):
    with pytest.raises(SpecvizError, match="must be an integer"):
        specviz.run("vanilla", pair, "hi", **{"max_new_tokens": 4, **options})


def test_valid_options_still_run(pair):
    """The new checks refuse nothing a run took before: equal n-gram bounds, a lent executor, no datastore."""
    with ThreadPoolExecutor(1) as lane:
        assert list(specviz.run("pearl", pair, "hi", max_new_tokens=3, executor=lane))
    assert list(specviz.run("prompt_lookup", pair, "hi", max_new_tokens=3, min_ngram=2, max_ngram=2))
    assert list(specviz.run("sssd", pair, "hi", max_new_tokens=3, datastore="none"))
    assert list(specviz.run("vanilla", pair, torch.tensor([1, 2, 3]), max_new_tokens=3))


# ----- the benchmark's command line -----


def bench(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    tiny = ["--pair", "tiny-random", "--max-new-tokens", "2", "--limit", "1", "--no-warmup", "--quiet"]
    return subprocess.run(
        [sys.executable, "-m", "specviz.bench", *tiny, *argv],
        cwd=ROOT,
        env=OFFLINE,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--suite", "", "--methods", "autoregressive"], "--suite names no suite"),
        (["--suite", " , ", "--methods", "autoregressive"], "--suite names no suite"),
        (["--suite", "gsm8k,gsm8k", "--methods", "autoregressive"], "--suite lists gsm8k more than once"),
        (["--suite", "specbench", "--category", "qa,qa", "--methods", "autoregressive"], "--category lists qa"),
        (["--methods", "autoregressive,autoregressive"], "--methods lists autoregressive more than once"),
        (
            ["--methods", "prompt_lookup", "--option", "prompt_lookup.min_ngram=5"],
            "min_ngram (5) must be at most max_ngram (3)",
        ),
        (
            [
                "--methods",
                "vanilla",
                "--option",
                "vanilla.speculation_length=3",
                "--option",
                "vanilla.speculation_length=4",
            ],
            "vanilla.speculation_length is set twice",
        ),
    ],
)
def test_the_bench_refuses_a_listing_that_is_empty_repeated_or_contradictory(argv, words):
    refused_in_one_line(bench(*argv), words)


def test_a_report_that_fails_to_write_leaves_the_old_files_whole(tmp_path):
    """A write that fails (here: files past 1000 bytes, as on a full disk) replaces nothing: the old
    results.json stays as it was, no half-written file or temporary is left, and the command says so in one line."""
    import resource

    old = json.dumps({"old": True})
    (tmp_path / "results.json").write_text(old)

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # python ignores SIGXFSZ: a write past it is EFBIG

    done = bench("--prompt", "hi", "--methods", "autoregressive", "--report", str(tmp_path), preexec_fn=small_files)
    refused_in_one_line(done, "could not write the results")
    assert (tmp_path / "results.json").read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
