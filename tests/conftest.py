"""Shared fixtures: the tiny pairs (seeded random weights, offline), on the CPU in float32; on
another device or dtype with SPECVIZ_TEST_DEVICE=cuda SPECVIZ_TEST_DTYPE=bfloat16, say (what
`python -m specviz.gpucheck tests` runs on a GPU)."""

from __future__ import annotations

import os

# Tiny models gain nothing from a second thread, and spinning OpenMP threads slow everything
# down by an order of magnitude when another process holds the other core (seen on CI-sized
# 2-core machines). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import functools
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from specviz.models import tiny

# Property tests draw the same examples on every run, so a run passes or fails by the code, never by
# chance (a crash found once is pinned as an @example next to its test); HYPOTHESIS_PROFILE=explore
# (or pytest --hypothesis-profile=explore) draws fresh ones to hunt for new failures.
settings.register_profile("deterministic", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def own_methods() -> list:
    """The registry's methods that specviz decodes itself: vLLM's rows run in vLLM's servers, on a model whose heads
    vLLM's CPU attention runs (tests/test_vllm.py), not on the tiny pairs here."""
    from specviz.methods import all_methods

    return [s for s in all_methods() if not s.engine]


tiny_pair = functools.partial(
    tiny.tiny_pair,
    device=torch.device(os.environ.get("SPECVIZ_TEST_DEVICE", "cpu")),
    dtype=getattr(torch, os.environ.get("SPECVIZ_TEST_DTYPE", "float32")),
)


@pytest.fixture(scope="session")
def random_pair():
    """Independent random draft: almost everything rejected."""
    return tiny_pair(draft="random")


@pytest.fixture(scope="session")
def self_pair():
    """The target drafts for itself: everything accepted."""
    return tiny_pair(draft="self")


@pytest.fixture(scope="session")
def perturbed_pair():
    """A noisy copy of the target: some drafts accepted, some rejected."""
    return tiny_pair(draft="perturbed")


@pytest.fixture(scope="session")
def reduced_pair():
    """A noisy copy of the target whose head leaves out a quarter of the vocabulary (q = 0 there),
    drafting through its lean decoding pass, as the default draft does."""
    return tiny_pair(draft="reduced")


@pytest.fixture(scope="session")
def tiny_pairs(random_pair, self_pair, perturbed_pair, reduced_pair):
    return {"random": random_pair, "self": self_pair, "perturbed": perturbed_pair, "reduced": reduced_pair}


def tab_context(pair_name: str = "tiny-random", **overrides):
    """The TabContext a tab is built with, inside `with gr.Blocks():` (overrides: e.g. load_pair)."""
    import gradio as gr

    from specviz.ui.blocks import TabContext

    ctx = TabContext(pair=gr.Dropdown([pair_name], value=pair_name), pair_status=gr.Markdown(), race=gr.State(None))
    for name, value in overrides.items():
        setattr(ctx, name, value)
    return ctx


# The files holding the longest tests of a `pytest --durations=30` run, started first: pytest-xdist
# hands a whole file to a worker, and such a file begun last kept one worker busy for minutes after
# the other had finished.
LONGEST_FIRST = (
    "test_sampling_methods.py",
    "test_space.py",
    "test_load.py",
    "test_theory_browser.py",
    "test_animation_browser.py",
    "test_app_browser.py",
    "test_pearl.py",
    "test_cli.py",
    "test_streaming_pruning.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each file's tests in their own order, the longest files first."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


@pytest.fixture
def watch_forwards(monkeypatch):
    """watch(models, note): note() before every forward pass of `models`, on either engine: a module hook
    sees transformers' forward, a wrapper of CachedLM.forward the fast step's (which calls no module)."""
    from specviz.models import kv

    hooks = []

    def watch(models, note) -> None:
        hooks.extend(m.register_forward_pre_hook(lambda module, args: note()) for m in models)
        original = kv.CachedLM.forward

        def forward(self, new_tokens, n_logits=1):
            if self.fast is not None and any(self.model is m for m in models):
                note()
            return original(self, new_tokens, n_logits)

        monkeypatch.setattr(kv.CachedLM, "forward", forward)

    yield watch
    for hook in hooks:
        hook.remove()


def leaderboard_of_two_runs(folder: Path):
    """The Leaderboard's rows over two runs whose suites differ, built from the shipped run (which reads one
    run for every method): that run without PEARL, and PEARL's rows of it without MBPP as a run of its own,
    its declaration written under `folder`."""
    import gzip
    import json

    from specviz.leaderboard import DECLARATION, leaderboard_rows

    shipped = DECLARATION.parent / "fast-target" / "leaderboard" / "results.json.gz"
    with gzip.open(shipped, "rt") as f:
        run = json.load(f)
    own = [r for r in run["runs"] if r["method"] in ("autoregressive", "pearl") and r["suite"] != "mbpp"]
    (folder / "pearl.json").write_text(json.dumps({**run, "runs": own}))
    (first,) = [s for s in json.loads(DECLARATION.read_text())["runs"] if s["path"].startswith("fast-target/")]
    declaration = {
        "runs": [
            {
                "path": str(shipped),
                "title": first["title"],
                "take": {m: v for m, v in first["take"].items() if m != "pearl"},
            },
            {"path": str(folder / "pearl.json"), "title": "PEARL without MBPP", "take": {"pearl": None}},
        ]
    }
    (folder / "leaderboard.json").write_text(json.dumps(declaration))
    return leaderboard_rows(folder / "leaderboard.json")


def record_with(**fields):
    """An IterationRecord with `fields` and zeros elsewhere: a figure's input built by hand, as plots and
    tabs take records only. `extra` may be given in its wire form, a dict of the families' fields."""
    from specviz.extras import parse
    from specviz.records import IterationRecord

    if isinstance(fields.get("extra"), dict):
        fields["extra"] = parse(fields["extra"])
    zeros = dict.fromkeys(("iteration", "position", "speculation_length", "accepted", "draft_forwards"), 0)
    zeros.update(drafted=(), emitted=(), p_target=None, q_draft=None, target_forwards=1)
    zeros.update(dict.fromkeys(("t_start", "t_end", "draft_ms", "verify_ms"), 0.0))
    return IterationRecord(method="test", **{**zeros, **fields})
