"""The Streaming tree tab: its handlers on the tiny pair, without a server."""

from __future__ import annotations

import gradio as gr

from specviz.plots.tree import record_tree_figure
from specviz.ui import streaming as tab
from tests.conftest import tab_context


def test_run_and_inspect_a_tree(random_pair):
    state = tab.run_streaming("tiny-random", "def f(x):", 12, 3, 2, load_pair=lambda name: random_pair)
    records = state["records"]
    assert sum(len(r["emitted"]) for r in records) == 12
    assert records[0]["extra"]["tree_tokens"] == []  # no node before the first forward
    later = records[1]["extra"]
    assert later["tree_tokens"] and set(later["tree_sources"]) <= {"stream 1", "stream 2", "stream 3"}
    fig, line = tab.show_iteration(state, 2)  # iterations count from 1
    assert line.startswith(f"iteration 2 of {len(records)}:")
    assert fig.data and "tree nodes from the streams" in line
    nodes = {t.name: t for t in fig.data if (t.name or "").startswith("from stream")}
    assert nodes and all(t.marker.color == tab.stream_colour(name.removeprefix("from ")) for name, t in nodes.items())
    assert all(t.text and all(t.text) for t in nodes.values())  # every node labelled with its token
    html = tab.coloured_output(state)
    assert "target" in html and html.count("<span") >= 12
    assert "12 tokens in" in tab.summary_line(state)
    assert "Lossless against the target itself" in tab.summary_line(state)  # the untrained adapter tunes nothing
    assert "Lossless against its own fine-tuned target" in tab.summary_line(
        {**state, "against": "its own fine-tuned target"}
    )
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


def test_tree_labels_are_readable_and_each_stream_keeps_its_colour():
    """Labels large and unclipped with their whitespace shown, each stream's nodes in its colour (the
    text's), the accepted path in a colour no stream has (it was stream 3's green), the legend below
    the tree, a row of height per leaf."""
    record = {
        "iteration": 3,
        "position": 40,
        "extra": {
            "tree_tokens": [1, 2, 3, 4, 5, 6],
            "tree_parents": [-1, -1, 0, 1, 2, 3],
            "accepted_path": [0, 2, 4],
            "tree_sources": ["stream 1", "stream 1", "stream 2", "stream 2", "stream 3", "stream 3"],
            "tree_scores": [0.9, 0.1, 0.8, 0.1, 0.7, 0.1],
            "sources": ["stream 1", "stream 2", "stream 3"],
        },
    }
    text = {1: " def", 2: "\n", 3: " is", 4: "_", 5: "pal", 6: "\t"}
    fig = record_tree_figure(record, decode=text.get, colour_of=tab.stream_colour)
    nodes = {t.name: t for t in fig.data if (t.name or "").startswith("from stream")}
    assert set(nodes) == {"from stream 1", "from stream 2", "from stream 3"}
    for name, trace in nodes.items():
        assert trace.marker.color == tab.stream_colour(name.removeprefix("from "))
        assert trace.textfont.size >= 14 and trace.cliponaxis is False
    assert list(nodes["from stream 1"].text) == ["·def", "⏎"] and list(nodes["from stream 3"].text) == ["pal", "⇥"]
    path = {t.line.color for t in fig.data if t.mode == "lines" and t.line.width == 4}
    assert len(path) == 1 and path.isdisjoint(tab.STREAM_COLOURS)
    assert fig.layout.legend.orientation == "h" and fig.layout.height >= 52 * 4
    assert (
        fig.layout.title.text == "Iteration 4: 6 nodes, 3 accepted" and "position 40" in fig.layout.title.subtitle.text
    )
