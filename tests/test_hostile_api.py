"""What a stranger can send the app's API, third round (issue 53): every value typed at the edge,
every refusal one line, the prompt limits on every tab that runs a model."""

from __future__ import annotations

import re
import socket

import gradio as gr
import httpx
import pytest

from specviz.errors import SpecvizError
from specviz.serving.limits import AppLimits
from specviz.ui import build_app, launch


@pytest.fixture(scope="module")
def app():
    return build_app(pair="tiny-random", limits=AppLimits())


def component(app, label: str):
    return next(b for b in app.blocks.values() if getattr(b, "label", None) == label)


def pair_box(app):
    return next(b for b in app.blocks.values() if getattr(b, "elem_id", None) == "sv-pair")


@pytest.mark.parametrize(
    ("label", "value", "message"),
    [
        ("Prompt", 123, "'Prompt' must be text, got int"),  # became the text "123"
        ("Prompt", ["a"], "'Prompt' must be text, got list"),
        ("Prompt", {"a": 1}, "'Prompt' must be text, got dict"),
        ("Max new tokens", 16.7, "'Max new tokens' must be a whole number, got 16.7"),  # truncated to 16
        ("Seed", 1.5, "'Seed' must be a whole number, got 1.5"),  # truncated to 1
        ("Methods", None, "'Methods' must be a list of choices, got null"),  # a TypeError's 19-line traceback
        ("Threads: draft and target truly at the same time", "yes", "must be true or false, got 'yes'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_at_the_edge_in_one_line(app, label, value, message):
    with pytest.raises(gr.Error) as refused:
        component(app, label).preprocess(value)
    assert message in refused.value.message and refused.value.print_exception is False
    assert "\n" not in refused.value.message


@pytest.mark.parametrize("name", [5, None, 1.5, ["default"]])
def test_a_pair_name_that_is_not_text_is_refused_not_read_as_the_default(app, name):
    """`5` and `null` loaded and raced the default pair, outside the models' turns."""
    with pytest.raises(gr.Error, match="must be text"):
        pair_box(app).preprocess(name)


def test_resolving_a_pair_name_that_is_not_text_is_refused():
    from specviz.ui.pairs import resolve_pair

    with pytest.raises(SpecvizError, match="the model pair must be a name"):
        resolve_pair(5)


def test_a_choice_sent_as_the_text_the_api_advertises_is_taken(app):
    """/on_roofline's schema lists batch sizes as text (gradio's), then refused ['1', '4']."""
    batch = component(app, "batch sizes B")
    assert batch.preprocess(["1", "4"]) == [1, 4]
    assert batch.preprocess([1, 16]) == [1, 16]
    with pytest.raises(gr.Error, match="must be one of"):
        batch.preprocess(["3"])


def test_the_whole_numbers_of_the_race_settings_are_not_truncated():
    from specviz.ui.race import settings_from_widgets

    with pytest.raises(SpecvizError, match=re.escape("max new tokens must be a whole number, got 16.7")):
        settings_from_widgets("hi", ["vanilla"], {}, 16.7, 0.0, 1.0, 0)
    with pytest.raises(SpecvizError, match=re.escape("seed must be a whole number, got 1.5")):
        settings_from_widgets("hi", ["vanilla"], {}, 16, 0.0, 1.0, 1.5)
    assert settings_from_widgets("hi", ["vanilla"], {}, 16.0, 0.0, 1.0, 2.0).max_new_tokens == 16  # a slider's 16.0


def test_an_option_past_the_apps_bound_names_the_method_and_the_apps_range():
    """{"vanilla.speculation_length": 0} said 'from 1 to 64', the library's range, naming no method."""
    from specviz.serving.racing import app_options

    with pytest.raises(SpecvizError, match=re.escape("vanilla.speculation_length must be from 1 to 16, got 0")):
        app_options("vanilla", {"speculation_length": 0})
    with pytest.raises(SpecvizError, match=re.escape("vanilla.speculation_length must be from 1 to 16, got 40")):
        app_options("vanilla", {"speculation_length": 40})


@pytest.mark.parametrize("tab", ["sssd_tree", "streaming"])
def test_the_tree_tabs_keep_the_prompt_limits(random_pair, tab):
    """The SSSD and Streaming tree tabs ran a 3,000-token prompt (11.1 s on the default pair) and
    tokenised a 1 MB one before the model refused it."""
    from specviz.ui import sssd_tree, streaming

    limits = AppLimits(prompt_tokens=16)
    if tab == "sssd_tree":
        run = lambda text: sssd_tree.run_sssd("tiny-random", text, 8, 4, "both", lambda n: random_pair, limits)  # noqa: E731
    else:
        run = lambda text: streaming.run_streaming("tiny-random", text, 8, 2, 2, 0.0, lambda n: random_pair, limits)  # noqa: E731
    with pytest.raises(SpecvizError, match="tokens long; a prompt here takes at most 16"):
        run("def add(a, b): return a + b " * 10)
    with pytest.raises(SpecvizError, match="characters long; a prompt here is at most 512 characters"):
        run("x" * 600)


@pytest.fixture(scope="module")
def served():
    demo = build_app(pair="tiny-random", limits=AppLimits())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/gradio_api/"
    demo.close()


def call(url: str, api: str, data: list) -> str:
    """A raw call (each a new gradio session, as curl sends it): what its event stream said."""
    posted = httpx.post(f"{url}call/{api}", json={"data": data}, timeout=60)
    assert posted.status_code == 200, posted.text
    return httpx.get(f"{url}call/{api}/{posted.json()['event_id']}", timeout=120).text


def error_of(stream: str) -> str:
    import json

    assert "event: error" in stream, stream[:300]
    return json.loads(stream.split("event: error\ndata: ", 1)[1].split("\n", 1)[0])["error"]


def test_an_unknown_endpoint_is_404_in_one_line(served):
    """`POST /gradio_api/call/nosuch` was an HTTP 500 and a traceback in the log."""
    answer = httpx.post(f"{served}call/nosuch", json={"data": []}, timeout=30)
    assert answer.status_code == 404
    assert answer.json()["detail"] == "this app has no endpoint 'nosuch': /gradio_api/info lists them"


def test_a_call_with_too_few_values_is_one_line(served):
    """gradio said `{"error": null}` and logged 20 lines."""
    assert error_of(call(served, "race", ["tiny-random"])) == "'race' takes 10 values, got 1: send one for each input"


@pytest.mark.parametrize("path", ["/etc/hosts", "README.md"])
def test_a_saved_race_named_by_a_server_path_is_one_line(served, path):
    """Refused by gradio, but as `{"error": null}` and a logged fault."""
    stream = call(served, "load_race", [{"path": path, "meta": {"_type": "gradio.FileData"}}])
    assert error_of(stream) == "a file must be uploaded to this app before a call names it"


def test_a_race_with_no_methods_list_is_one_line(served):
    stream = call(served, "race", ["tiny-random", "hi", None, {}, 8, 0.0, 1.0, 0])
    assert error_of(stream) == "'Methods' must be a list of choices, got null"
