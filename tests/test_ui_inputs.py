"""What a stranger can send the app's inputs: every refusal one line (an INFO line in the log, a
message naming the field), uploads bounded in size (issue 41)."""

from __future__ import annotations

import logging
import socket

import gradio as gr
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.serving.limits import AppLimits
from specviz.ui import build_app


@pytest.fixture(scope="module")
def app():
    return build_app(pair="tiny-random", limits=AppLimits())


def component(app, label: str):
    return next(b for b in app.blocks.values() if getattr(b, "label", None) == label)


@pytest.mark.parametrize(
    ("label", "value", "message"),
    [
        ("Seed", "abc", "'Seed' must be a number, got 'abc'"),  # gradio's generic error before
        ("max new tokens per request", 1000, "'max new tokens per request' must be from 8 to 256, got 1000"),
        ("max new tokens per request", "abc", "'max new tokens per request' must be a number, got 'abc'"),
        ("learning rate", 1e308, "'learning rate' must be from 1e-07 to 0.01, got 1e+308"),
        (
            "distillation loss (p: target, q: draft)",
            "xyz",
            "'distillation loss (p: target, q: draft)' must be one of fkl, rkl, jsd, got 'xyz'",
        ),
    ],
)
def test_a_value_a_component_refuses_is_one_line_in_the_log(app, caplog, label, value, message):
    caplog.set_level(logging.INFO)
    with pytest.raises(gr.Error) as refused:
        component(app, label).preprocess(value)
    assert refused.value.message.startswith(message) and refused.value.print_exception is False
    assert [r.levelname for r in caplog.records] == ["INFO"] and message in caplog.records[0].getMessage()


def test_a_value_within_bounds_passes(app):
    assert component(app, "max new tokens per request").preprocess(64) == 64
    assert component(app, "Seed").preprocess(None) is None


def test_an_upload_past_the_saved_race_bound_is_refused():
    """`/gradio_api/upload` took 200 MB in 0.6 s and served it back (issue 41)."""
    import httpx

    from specviz.serving.saved import MAX_FILE_BYTES
    from specviz.ui import launch

    demo = build_app(pair="tiny-random", limits=AppLimits())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        url = f"http://127.0.0.1:{port}/gradio_api/upload"
        small = httpx.post(url, files={"files": ("race.json", b"{}")}, timeout=60)
        assert small.status_code == 200
        big = httpx.post(url, files={"files": ("race.json", b" " * (MAX_FILE_BYTES + 1))}, timeout=60)
        assert big.status_code == 413
    finally:
        demo.close()


def _tab_handlers(module, **ctx_overrides):
    from tests.conftest import tab_context

    with gr.Blocks() as demo:
        module.build_tab(tab_context(**ctx_overrides))
    return {f.fn.__name__: f.fn for f in demo.fns.values() if f.fn is not None}


def test_a_megabyte_prompt_is_refused_before_it_waits_for_the_models(random_pair):
    """The DISCO tab tokenised a 1 MB prompt in the models' turn (8.4 s) before refusing it (issue 41)."""
    import threading

    from specviz.serving.turns import TURNS
    from specviz.ui import disco

    loads: list[str] = []
    run = _tab_handlers(disco, load_pair=lambda name: loads.append(name) or random_pair)["run"]
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            run("tiny-random", "x " * 500_000, True, 0.5, 8, 8, 1)
        except gr.Error as e:
            outcome.append(e)

    holder = TURNS.join()  # the models are busy: a handler that waits for them does not return
    try:
        worker = threading.Thread(target=call)
        worker.start()
        worker.join(10)
        assert outcome and "the prompt is 1000000 characters long; a prompt here is at most 32768" in str(outcome[0])
        assert not loads
    finally:
        TURNS.leave(holder)
        worker.join(60)


def test_a_prompt_past_the_token_limit_is_refused_in_one_line(random_pair):
    from specviz.ui import disco

    run = _tab_handlers(disco, load_pair=lambda name: random_pair, limits=AppLimits(prompt_tokens=16))["run"]
    with pytest.raises(gr.Error, match="tokens long; a prompt here takes at most 16"):
        run("tiny-random", "def add(a, b): return a + b " * 10, True, 0.5, 8, 8, 1)


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(which=st.integers(min_value=0), value=NUMBERS)
def test_any_value_sent_to_a_number_box_or_slider_is_taken_within_bounds_or_refused_in_one_line(app, which, value):
    """Every number box and slider of the app, any JSON-ish value: within its bounds, or one gr.Error
    that names the field and prints no traceback (issue 41: 20-27 lines of gradio's per value)."""
    boxes = sorted((b for b in app.blocks.values() if isinstance(b, (gr.Number, gr.Slider))), key=lambda b: b._id)
    box = boxes[which % len(boxes)]
    try:
        taken = box.preprocess(value)
    except gr.Error as e:
        assert e.print_exception is False and "\n" not in e.message and str(box.label) in e.message
        return
    if taken is not None:
        assert box.minimum is None or taken >= box.minimum
        assert box.maximum is None or taken <= box.maximum


def test_the_online_and_disco_sliders_stop_at_the_apps_limits(random_pair):
    """A deployment's lower limits bound the tabs' own sliders, and their handlers refuse past them."""
    from specviz.ui import disco, online

    limits = AppLimits(speculation_length=4, max_new_tokens=64)
    for module, labels in (
        (online, {"max new tokens per request": 64, "speculation length γ": 4}),
        (disco, {"Max new tokens": 64, "SL_max: most draft tokens per iteration": 4}),
    ):
        from tests.conftest import tab_context

        with gr.Blocks() as demo:
            module.build_tab(tab_context(limits=limits, load_pair=lambda name: random_pair))
        widgets = {getattr(b, "label", None): b for b in demo.blocks.values()}
        assert {label: widgets[label].maximum for label in labels} == labels
    run = _tab_handlers(disco, load_pair=lambda name: random_pair, limits=limits)["run"]
    with pytest.raises(gr.Error, match="SL_max must be from 1 to 4, got 8"):
        run("tiny-random", "def f(x):", False, 0.5, 8, 8, 1)
    serve = _tab_handlers(online, load_pair=lambda name: random_pair, limits=limits)["on_serve"]
    with pytest.raises(gr.Error, match="speculation length γ must be from 1 to 4, got 8"):
        list(serve("tiny-random", ["gsm8k"], 2, 0, False, 1, 8, 8, 1, 3e-5, "fkl", False, 5, None))
