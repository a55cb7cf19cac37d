"""The Streaming tree tab: its handlers on the tiny pair, without a server."""

from __future__ import annotations

import gradio as gr

from specviz.ui import streaming as tab
from tests.conftest import tab_context


def test_run_and_inspect_a_tree(random_pair):
    state = tab.run_streaming("tiny-random", "def f(x):", 12, 3, 2, load_pair=lambda name: random_pair)
    records = state["records"]
    assert sum(len(r["emitted"]) for r in records) == 12
    assert records[0]["extra"]["tree_tokens"] == []  # no node before the first forward
    later = records[1]["extra"]
    assert later["tree_tokens"] and set(later["tree_sources"]) <= {"stream 1", "stream 2", "stream 3"}
    fig, line = tab.show_iteration(state, 1)
    assert fig.data and "tree nodes from the streams" in line
    nodes = {t.name: t for t in fig.data if (t.name or "").startswith("from stream")}
    assert nodes and all(t.marker.color == tab.stream_colour(name.removeprefix("from ")) for name, t in nodes.items())
    assert all(t.text and all(t.text) for t in nodes.values())  # every node labelled with its token
    html = tab.coloured_output(state)
    assert "target" in html and html.count("<span") >= 12
    assert "12 tokens in" in tab.summary_line(state)
    assert "Lossless against the target itself" in tab.summary_line(state)  # the untrained adapter tunes nothing
    assert "Lossless against its own fine-tuned target" in tab.summary_line({**state, "against": "its own fine-tuned target"})
    assert tab.show_iteration(None, 0)[0] is None


def test_stream_colours():
    assert tab.stream_colour("stream 1") != tab.stream_colour("stream 2")
    assert tab.stream_colour("target") == tab.TARGET_COLOUR


def test_the_tab_says_what_it_is_lossless_against_and_offers_its_options():
    with gr.Blocks() as demo:
        tab.build_tab(tab_context())
    texts = " ".join(b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown) and isinstance(b.value, str))
    assert "Lossless against the target itself when the adapter's LoRA acts on the streams only" in texts
    sliders = {b.label: b for b in demo.blocks.values() if isinstance(b, gr.Slider)}
    assert sliders["streams used (at most the adapter's)"].value == 3
    assert sliders["tree width (top tokens per stream)"].value == 2
