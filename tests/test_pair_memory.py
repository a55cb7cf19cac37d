"""What the server may hold of model pairs: presets listed only where their weights fit in the
memory free here, at most one hub pair loaded at a time, and a load in a turn on the models (issue 41)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from specviz.models import pair as pairs
from specviz.models.presets import PRESETS

GB = 2**30


@pytest.fixture
def sizes(monkeypatch):
    """Two presets given sizes near their published ones (target + draft parameters), the others
    none (as on a machine that cannot read their configs), without the hub."""
    counted = {
        "qwen2.5-7b/0.5b": 7_615_616_512 + 494_032_768,
        "smollm2-360m/135m": 361_821_120 + 134_515_008,
    }
    monkeypatch.setattr(pairs, "preset_params", counted.get)
    return counted


def test_a_preset_fits_where_its_float32_weights_fit_in_free_memory(sizes):
    assert not pairs.fits_here("qwen2.5-7b/0.5b", "cpu", free=64 * GB)  # ~30 GB in float32, and its packed copy
    assert pairs.fits_here("qwen2.5-7b/0.5b", "cpu", free=96 * GB)
    assert pairs.fits_here("smollm2-360m/135m", "cpu", free=16 * GB)  # ~2 GB, twice
    assert not pairs.fits_here("qwen2.5-1.5b/0.5b", "cpu", free=64 * GB)  # size unknown here: not offered
    assert pairs.fits_here("default", "cpu", free=0) and pairs.fits_here("tiny-random", "cpu", free=0)


def test_the_pair_list_offers_only_what_this_machine_can_hold(sizes, monkeypatch):
    from specviz.ui.pairs import pair_choices

    monkeypatch.setattr(pairs, "free_memory", lambda device: 16 * GB)
    choices = pair_choices("default")
    assert "smollm2-360m/135m" in choices and "qwen2.5-7b/0.5b" not in choices
    assert {"default", "tiny-random", "tiny-self", "tiny-perturbed"} <= set(choices)
    assert set(choices) < {"default", "tiny-random", "tiny-self", "tiny-perturbed", *PRESETS}


def test_free_memory_is_measured():
    import torch

    free = pairs.free_memory(torch.device("cpu"))
    assert free is not None and free > 0


class FakePair:
    def __init__(self, name: str):
        self.name, self.target, self.draft, self.info = name, None, None, {}


def test_at_most_one_hub_pair_stays_loaded(monkeypatch):
    monkeypatch.setattr(pairs, "_build_pair", lambda name, *rest: FakePair(name))
    monkeypatch.setattr("specviz.models.cpu.prepack_linears", lambda model: None)
    loaded = pairs.LoadedPairs()
    monkeypatch.setattr(pairs, "_load_pair", loaded)
    first = pairs.load_pair("org/target-a,org/draft-a")
    gone = weakref.ref(first)
    tiny = pairs.load_pair("tiny-random")
    del first
    second = pairs.load_pair("smollm2-360m/135m")
    gc.collect()
    assert gone() is None  # let go before the second loaded, not kept as one of four
    assert loaded.loaded() == ["tiny-random", "smollm2-360m/135m"]
    assert pairs.load_pair("tiny-random") is tiny and pairs.load_pair("smollm2-360m/135m") is second
    assert pairs.is_loaded("smollm2-360m/135m") and not pairs.is_loaded("org/target-a,org/draft-a")


def test_a_pair_not_loaded_yet_is_loaded_in_a_turn_on_the_models(monkeypatch):
    import gradio as gr

    from specviz.serving.turns import TURNS
    from specviz.ui import blocks
    from tests.conftest import tab_context

    loads: list[str] = []
    monkeypatch.setattr(blocks, "resolve_pair", lambda name, *where: (loads.append(name), None))
    monkeypatch.setattr(blocks, "read_notes", lambda pair: None)  # no pair was loaded to read them from
    monkeypatch.setattr(pairs, "is_loaded", lambda name, device="auto", dtype="auto": name in loads)
    with gr.Blocks():
        ctx = tab_context()
    holder = TURNS.join()  # a timed run holds the models
    worker = threading.Thread(target=ctx.resolve, args=("smollm2-360m/135m",))
    try:
        worker.start()
        time.sleep(0.5)
        assert loads == []  # waits for its turn
    finally:
        TURNS.leave(holder)
        worker.join(30)
    assert loads == ["smollm2-360m/135m"]
    holder = TURNS.join()
    try:
        ctx.resolve("smollm2-360m/135m")  # loaded now: no turn needed to look it up
    finally:
        TURNS.leave(holder)
    assert loads == ["smollm2-360m/135m"] * 2


def test_a_model_call_holding_its_turn_loads_without_joining_the_line(monkeypatch):
    """A race's method asks for its pair inside its turn (on the handler's thread): if another
    visitor's hub pair took its place meanwhile, it loads there, never waiting behind itself."""
    import gradio as gr

    from specviz.serving.turns import TURNS
    from specviz.ui import blocks
    from tests.conftest import tab_context

    loads: list[str] = []
    monkeypatch.setattr(blocks, "resolve_pair", lambda name, *where: (loads.append(name), None))
    monkeypatch.setattr(blocks, "read_notes", lambda pair: None)  # no pair was loaded to read them from
    monkeypatch.setattr(pairs, "is_loaded", lambda name, device="auto", dtype="auto": False)
    with gr.Blocks():
        ctx = tab_context()
    mine = TURNS.join()  # this race's method holds the models
    try:
        worker = threading.Thread(target=ctx.load_pair, args=("smollm2-360m/135m",))
        worker.start()
        worker.join(10)
        assert not worker.is_alive() and loads == ["smollm2-360m/135m"]
    finally:
        TURNS.leave(mine)
        worker.join(30)
