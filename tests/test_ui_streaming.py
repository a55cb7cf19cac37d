"""The Streaming tree tab: its handlers on the tiny pair, without a server."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from specviz.plots.streaming_pass import pass_shape
from specviz.plots.tree import PRUNED_NAME, record_tree_figure
from specviz.ui import streaming as tab
from tests.conftest import record_with, tab_context


def test_run_and_inspect_a_tree(random_pair):
    state = tab.run_streaming("tiny-random", "def f(x):", 12, 3, 2, load_pair=lambda name: random_pair)
    records = state.records
    assert sum(len(r.emitted) for r in records) == 12
    assert records[0].tree().tree_tokens == ()  # no node before the first forward
    later = records[1].tree()
    assert later.tree_tokens and set(later.tree_sources) <= {"stream 1", "stream 2", "stream 3"}
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
        dataclasses.replace(state, against="its own fine-tuned target")
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
    record = record_with(
        iteration=3,
        position=40,
        extra={
            "tree_tokens": [1, 2, 3, 4, 5, 6],
            "tree_parents": [-1, -1, 0, 1, 2, 3],
            "accepted_path": [0, 2, 4],
            "tree_sources": ["stream 1", "stream 1", "stream 2", "stream 2", "stream 3", "stream 3"],
            "tree_scores": [0.9, 0.1, 0.8, 0.1, 0.7, 0.1],
            "sources": ["stream 1", "stream 2", "stream 3"],
        },
    )
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


# -- the tree-pruning layer (section 3.2.3) --------------------------------------------------------

PRUNE_LAYER = 1  # below the tiny adapter's stream layers
THRESHOLD = 0.002  # with the random pruner of test_streaming_pruning: some trees lose nodes, some none


@pytest.fixture
def pruning_pair(random_pair, tmp_path, monkeypatch):
    """The tiny pair whose "auto" adapter carries a (random) pruning layer at PRUNE_LAYER."""
    from specviz.methods import streaming as streaming_method
    from tests.test_streaming_pruning import pruning_adapter

    path = pruning_adapter(tmp_path, PRUNE_LAYER)
    monkeypatch.setattr(streaming_method, "shipped_adapter", lambda target: path)
    monkeypatch.setitem(streaming_method._LOADED, random_pair.target, {})  # "auto" loads it afresh
    return random_pair


def run_pruned(pair, threshold: float) -> tab.StreamingRun:
    return tab.run_streaming("tiny-random", "def f(x):", 30, 3, 2, threshold, load_pair=lambda name: pair)


def test_the_threshold_reaches_the_method_and_the_lines_count_pruned_nodes(pruning_pair, monkeypatch):
    import specviz

    asked: list[dict] = []
    real_run = specviz.run

    def spied(method, pair, prompt, **options):
        asked.append({"method": method, **options})
        return real_run(method, pair, prompt, **options)

    monkeypatch.setattr(specviz, "run", spied)
    state = run_pruned(pruning_pair, THRESHOLD)
    assert asked[-1]["method"] == "streaming" and asked[-1]["prune_threshold"] == THRESHOLD
    assert state.prune_threshold == THRESHOLD and state.has_pruner is True
    records = state.records
    pruned = [len(pass_shape(r).pruned or ()) for r in records]
    assert any(pruned), "nothing was pruned: raise THRESHOLD"
    assert not all(pruned[1:]), "every tree was pruned"
    for i, (r, n) in enumerate(zip(records, pruned, strict=True), start=1):
        fig, line = tab.show_iteration(state, i)
        nodes = len(r.tree().tree_tokens)
        cut = [len(t.x) for t in fig.data if t.name == PRUNED_NAME]  # the tree figure crosses them out
        if n:
            assert f"{nodes} tree nodes from the streams, {n} pruned after layer {PRUNE_LAYER}, " in line
            assert cut == [n]
        else:
            assert "pruned" not in line and not cut
    total = sum(len(r.tree().tree_tokens) for r in records)
    summary = tab.summary_line(state)
    assert (
        f"The pruning layer (threshold {THRESHOLD:g}) dropped {sum(pruned)} of the {total} tree nodes "
        f"after layer {PRUNE_LAYER}." in summary
    )
    assert "no pruning layer" not in summary


def test_at_threshold_zero_nothing_is_pruned_or_said(pruning_pair):
    state = run_pruned(pruning_pair, 0.0)
    assert state.has_pruner is True and state.prune_threshold == 0.0
    assert not any(pass_shape(r).pruned for r in state.records)
    lines = [tab.show_iteration(state, i)[1] for i in range(1, len(state.records) + 1)]
    assert not any("prun" in line for line in lines)
    assert "prun" not in tab.summary_line(state)


def test_a_threshold_without_a_pruning_layer_says_so(random_pair):
    """The tiny pair's "auto" adapter is untrained: no pruning layer, so a threshold prunes nothing."""
    state = tab.run_streaming("tiny-random", "def f(x):", 12, 3, 2, 0.05, load_pair=lambda name: random_pair)
    assert state.has_pruner is False and not any(pass_shape(r).pruned for r in state.records)
    summary = tab.summary_line(state)
    assert "Pruning threshold 0.05: no pruning layer in this adapter, so no tree nodes were pruned." in summary
    assert "dropped" not in summary
    off = tab.run_streaming("tiny-random", "def f(x):", 12, 3, 2, 0.0, load_pair=lambda name: random_pair)
    assert "prun" not in tab.summary_line(off)  # no threshold: nothing to say
    assert "no pruning layer" not in tab.summary_line(dataclasses.replace(state, has_pruner=True))


def test_the_slider_sits_with_the_run_controls_and_reaches_run_streaming(monkeypatch):
    from specviz.methods.streaming import StreamingOptions

    with gr.Blocks() as demo:
        tab.build_tab(tab_context())
    sliders = {b.label: b for b in demo.blocks.values() if isinstance(b, gr.Slider)}
    prune = sliders["pruning threshold (0: off)"]
    assert (prune.minimum, prune.maximum, prune.step) == (0, 0.1, 0.001)
    assert prune.value == StreamingOptions().prune_threshold == 0
    assert prune.parent is sliders["tree width (top tokens per stream)"].parent
    (run,) = [f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == "on_run"]
    assert prune in run.inputs
    given: list[tuple] = []

    def fake(*args, load_pair=None, limits=None):
        given.append(args)
        return tab.StreamingRun((), {}, against="", prune_threshold=args[5], has_pruner=False)

    monkeypatch.setattr(tab, "run_streaming", fake)
    values = {prune: 0.004, sliders["tree width (top tokens per stream)"]: 3}
    run.fn(*[values.get(c, getattr(c, "value", None)) for c in run.inputs])
    assert given == [("tiny-random", run.inputs[1].value, 64, 3, 3, 0.004)]


def test_a_refused_run_says_why_in_the_output_box_as_html():
    """The output box is HTML: a refusal was Markdown there ("**Cannot run:**" with its asterisks shown)."""
    with gr.Blocks() as demo:
        tab.build_tab(tab_context())
    (run,) = [f for f in demo.fns.values() if getattr(f.fn, "__name__", None) == "on_run"]
    state, output, *_ = run.fn("tiny-random", "x" * 40_000, 8, 2, 2, 0.0)
    assert state is None and output.startswith("<p><b>Cannot run:</b> the prompt is 40000 characters long")
