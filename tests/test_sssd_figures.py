"""SSSD's tree plot and paper figures build from recorded runs, and the experiment's replay of a
drafter along a greedy reference gives exactly the iterations of a real greedy run."""

from __future__ import annotations

import dataclasses
import json

import specviz
from specviz.experiments.sssd import fig4, proposers, replay
from specviz.models.pair import encode_prompt
from specviz.plots.sssd_figures import accepted_length_figure, batch_figure
from specviz.plots.theme import OKABE_ITO, legend_names
from specviz.plots.tree import PRUNED_NAME, layout, record_tree_figure, tree_figure, visible
from specviz.records import IterationRecord
from tests.conftest import record_with


def test_layout_puts_children_right_of_parents_and_leaves_on_their_own_rows():
    where = layout([-1, 0, -1, 1, 2])
    assert [d for d, _ in where] == [1, 2, 1, 3, 2]
    leaves = [where[3][1], where[4][1]]
    assert sorted(leaves) == [0.0, 1.0] and where[1][1] == where[3][1]


def test_tree_figure_from_a_real_record_marks_the_accepted_path(perturbed_pair):
    records = specviz.generate("sssd", perturbed_pair, [5, 17, 300, 42, 5, 17, 300, 42, 5], max_new_tokens=20).records
    record = next(r for r in records if r.accepted)
    data = IterationRecord.from_dict(json.loads(json.dumps(record.to_dict())))  # as saved and replayed
    fig = record_tree_figure(data, decode=lambda t: f"<{t}>")
    nodes = [t for t in fig.data if t.name and t.name.startswith("from ")]
    assert sum(len(t.x) for t in nodes) == len(record.tree().tree_tokens)
    bold = sum(1 for t in fig.data if t.mode == "lines" and t.line.width == 4)
    assert bold == record.accepted
    assert "accepted" in fig.layout.title.text
    assert tree_figure([], []).layout.title.text == "Candidate tree"


def streaming_record(pruned: list[int] | None) -> IterationRecord:
    """A Streaming record by hand: three streams' six nodes, the path 0-2-4, and a fused
    pass of 32 layers whose pruning layer, after layer 26, dropped `pruned` (None: nothing pruned)."""
    extra = {
        "tree_tokens": [1, 2, 3, 4, 5, 6],
        "tree_parents": [-1, -1, 0, 1, 2, 3],
        "accepted_path": [0, 2, 4],
        "tree_sources": ["stream 1", "stream 1", "stream 2", "stream 2", "stream 3", "stream 3"],
        "tree_scores": [0.9, 0.1, 0.8, 0.1, 0.7, 0.1],
        "sources": ["stream 1", "stream 2", "stream 3"],
        "layers": 32,
        "stream_layers": 4,
        "gamma": 3,
        "committed_rows": 1,
    }
    if pruned is not None:
        extra |= {"pruned": pruned, "prune_layer": 26}
    return record_with(iteration=3, position=40, extra=extra)


def test_pruned_nodes_are_their_own_trace_on_dotted_edges():
    """Node 1 went with its subtree (3, 5): the three are crossed out in one trace of their own, named once
    in the legend, out of their streams' traces, their edges dotted, their hover naming the layer."""
    fig = record_tree_figure(streaming_record([1, 3, 5]), decode=str)
    where = layout([-1, -1, 0, 1, 2, 3])
    [cut] = [t for t in fig.data if t.name == PRUNED_NAME]
    assert [(x, y) for x, y in zip(cut.x, cut.y, strict=True)] == [where[i] for i in (1, 3, 5)]
    assert list(cut.text) == ["2", "4", "6"] and cut.marker.color == OKABE_ITO["reddish_purple"]
    assert all("pruned after layer 26" in h for h in cut.hovertext)
    assert "from stream 2" in cut.hovertext[1]  # the source its colour no longer shows
    nodes = [t for t in fig.data if (t.name or "").startswith("from ")]
    assert sorted(t.name for t in nodes) == ["from stream 1", "from stream 2", "from stream 3"]
    kept = {(x, y) for t in nodes for x, y in zip(t.x, t.y, strict=True)}
    assert kept == {where[i] for i in (0, 2, 4)}  # no pruned node among the streams' nodes
    assert cut.marker.symbol not in {t.marker.symbol for t in nodes}  # a shape, not only a colour (stream 4's)
    assert not any("pruned" in h for t in nodes for h in t.hovertext)
    dotted = [t for t in fig.data if t.mode == "lines" and t.line.dash == "dot"]
    assert sorted((t.x[1], t.y[1]) for t in dotted) == sorted(where[i] for i in (1, 3, 5))
    assert all(t.line.width == 1.5 for t in dotted)
    assert [t.line.width for t in fig.data if t.mode == "lines"].count(4) == 3  # the accepted path as before
    assert legend_names(fig).count(PRUNED_NAME) == 1


def test_a_stream_all_of_whose_nodes_were_pruned_has_no_legend_entry():
    fig = record_tree_figure(streaming_record([4, 5]))
    assert [t.name for t in fig.data if t.name] == [
        "committed context",
        "from stream 1",
        "from stream 2",
        PRUNED_NAME,
    ]


def test_a_tree_without_pruning_draws_as_before():
    """No pruned nodes: the six edges, the context and one trace per stream, nothing dotted; a pass that
    pruned nothing (an empty `pruned`) and a record with no pass shape at all draw the same figure."""
    fig = record_tree_figure(streaming_record(None), decode=str)
    assert [t.name for t in fig.data] == [None] * 6 + [
        "committed context",
        "from stream 1",
        "from stream 2",
        "from stream 3",
    ]
    assert not any(t.mode == "lines" and t.line.dash for t in fig.data)
    assert sum(len(t.x) for t in fig.data if (t.name or "").startswith("from ")) == 6
    whole = streaming_record(None)
    bare = dataclasses.replace(whole, extra=(whole.tree(),))  # a tree, no pass shape at all
    assert record_tree_figure(bare, decode=str) == fig
    assert record_tree_figure(streaming_record([]), decode=str) == fig


def test_replay_matches_real_greedy_runs_and_figures_build(perturbed_pair):
    pair = perturbed_pair
    prompt = encode_prompt(pair, [5, 17, 300, 42, 5, 17, 300, 42, 5, 17])
    real = specviz.generate("sssd", pair, prompt, max_new_tokens=30, sources="input", speculation_length=6)
    ref = list(specviz.generate("autoregressive", pair, prompt, max_new_tokens=30).summary.output_ids)
    out = replay(prompt, ref, proposers(None)["input only"](), 6)
    assert out["steps"] == len(real.records) and out["tokens"] == 30
    rows = fig4([{"suite": "toy", "prompt_ids": prompt, "output_ids": ref}], None, [1, 6])
    assert {r["drafter"] for r in rows} == {"input only", "prompt lookup"}
    assert all(r["mean_accepted_length"] >= 1 for r in rows)
    assert len(accepted_length_figure(rows).data) == 2
    batch = [
        {"batch_size": b, "variant": v, "mean_latency_s": 1.0 * b, "throughput_tokens_per_s": 10.0 * b}
        for b in (1, 2)
        for v in ("AR", "SSSD")
    ]
    assert len(batch_figure(batch).data) == 2


def test_tab_handlers_run_and_show_trees(perturbed_pair):
    from specviz.ui import sssd_tree

    state = sssd_tree.run_sssd(
        "tiny", [5, 17, 300, 42, 5, 17, 300, 42, 5], 16, 8, "input", load_pair=lambda name: perturbed_pair
    )
    assert len(state.records) >= 1 and sum(len(r.emitted) for r in state.records) == 16
    html_text = sssd_tree.coloured_output(state)
    assert html_text.count("<span") >= 16 and "input" in html_text
    fig, line = sssd_tree.show_iteration(state, 0)
    assert fig is not None and "candidate nodes" in line
    assert sssd_tree.show_iteration(None, 0)[0] is None
    assert visible("\n") == "⏎" and visible(" ") == "·" and visible(" the") == "·the" and visible("") == "∅"
    assert visible("<|im_start|>") == "&lt;|im_start|&gt;"


def test_tab_run_reports_bad_input_instead_of_raising(perturbed_pair):
    from specviz.ui import sssd_tree

    state, out, _first, fig, _line, count = sssd_tree.run_and_show(
        "tiny", [5, 17, 300], 10**9, 8, "input", load_pair=lambda name: perturbed_pair
    )
    assert (
        state is None
        and fig is None
        and out.startswith("<p><b>Cannot run:</b>")
        and "max_new_tokens must be from 1 to" in out
    )
    state, out, _first, fig, _line, count = sssd_tree.run_and_show(
        "tiny", [5, 17, 300, 5, 17], 12, 8, "input", load_pair=lambda name: perturbed_pair
    )
    assert count == len(state.records) >= 1 and fig is not None and "<span" in out


def test_references_by_batched_ar_equal_those_by_trees(perturbed_pair):
    """--reference-tree 0 (batched AR) gives the same greedy references as tree decoding and as AR."""
    from specviz.experiments.sssd import references
    from specviz.prompts import Prompt

    prompts = [Prompt("toy", "a", "the cat sat on the mat"), Prompt("toy", "b", "one two three one two")]
    by_ar = references(perturbed_pair, prompts, 12, False, tree_size=0)
    by_tree = references(perturbed_pair, prompts, 12, False, tree_size=6)
    assert [r["output_ids"] for r in by_ar] == [r["output_ids"] for r in by_tree]
    for r in by_ar:
        ar = specviz.generate("autoregressive", perturbed_pair, r["prompt_ids"], max_new_tokens=12).summary.output_ids
        assert r["output_ids"] == list(ar) and len(ar) == 12
