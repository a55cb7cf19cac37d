"""The Streaming tab's figure of one iteration's target pass (issue 39 item 5): its rows are the fused
pass's own rows, counted on real runs of the tiny pair, coloured by what each row did; the tab's
sentence counts them. Both read the pass's shape off the record alone (no model), and say "not
recorded" for a record without it."""

from __future__ import annotations

import dataclasses
import json

import pytest

import specviz
from specviz.extras import StreamingPassExtra
from specviz.methods import streaming as streaming_method
from specviz.methods.ngram_tree import TokenTree
from specviz.models.streaming import StreamingLM
from specviz.plots.streaming_pass import ROLES, pass_shape, run_pass, streaming_pass_figure
from specviz.records import IterationRecord
from specviz.ui import streaming as tab
from tests.conftest import record_with

PROMPT = "def f(x):"
MAX_NEW = 16


def bars(fig) -> dict[str, list[int]]:
    """The rows (x, from 1) of each role's bars, by legend name."""
    return {name: [x for t in fig.data if t.name == name for x in t.x] for name, _ in ROLES.values()}


def stream_rows(fig) -> int:
    return sum(len(t.x or ()) for t in fig.data if t.name in (ROLES["next"][0], ROLES["discarded"][0]))


@pytest.fixture
def passes(monkeypatch):
    """Each fused pass's main rows (committed tokens + tree) and stream rows, as the model ran them."""
    seen: list[tuple[int, int]] = []
    fused = StreamingLM.fused_tree_pass

    def counted(self, ids, positions, mask, append, rows, gamma=None, prune=None):
        logits, streams, kept = fused(self, ids, positions, mask, append, rows, gamma, prune)
        seen.append((ids.shape[1], streams.shape[0] * streams.shape[1]))  # [rows, gamma, H]
        return logits, streams, kept

    monkeypatch.setattr(StreamingLM, "fused_tree_pass", counted)
    return seen


def run(pair):
    return tab.run_streaming("tiny-random", PROMPT, MAX_NEW, 3, 2, load_pair=lambda name: pair)


def test_the_figures_rows_are_the_rows_the_fused_pass_ran(random_pair, passes):
    state = run(random_pair)
    records = state.records
    assert len(passes) == len(records)  # one target pass per iteration
    for i, (main, streams) in enumerate(passes):
        fig = run_pass(records, i)[0]
        nodes, shape = len(records[i].tree().tree_tokens), pass_shape(records[i])
        assert stream_rows(fig) == streams == (1 + nodes) * shape.gamma  # every candidate node's γ streams
        assert sum(len(t.x or ()) for t in fig.data) - stream_rows(fig) == main
        assert fig.layout.title.text == f"Iteration {i + 1}: one pass, {main} + {streams} rows"
        assert (shape.layers, shape.stream_layers) == (4, 2)  # the untrained adapter's N and N_s
    # γ in use (3 streams, of the untrained adapter's 4), then fewer as the budget runs out, none in the last pass
    assert pass_shape(records[0]).gamma == 3 and pass_shape(records[-1]).gamma == 0


def test_main_rows_run_through_every_layer_and_stream_rows_through_the_top_ones(random_pair):
    state = run(random_pair)
    fig, shape = run_pass(state.records, 1)[0], pass_shape(state.records[1])
    for t in fig.data:
        if t.x:
            streams = t.name in (ROLES["next"][0], ROLES["discarded"][0])
            first = shape.layers - shape.stream_layers if streams else 0
            assert set(t.base) == {first} and {b + h for b, h in zip(t.base, t.y, strict=True)} == {shape.layers}
    assert fig.layout.yaxis.title.text == "decoder layers" and fig.layout.xaxis.title.text == "row of the pass"
    assert fig.layout.legend.orientation == "h"  # below the plot: a side legend takes half a phone's width


@pytest.fixture
def oracle_trees(random_pair, monkeypatch):
    """Trees that hold the target's own next tokens (its greedy continuation) beside a wrong sibling,
    so the fused pass verifies trees the target accepts: the untrained streams of the tiny pair never
    guess right."""
    out = specviz.generate("autoregressive", random_pair, PROMPT, max_new_tokens=MAX_NEW + 4)
    continuation = list(out.summary.output_ids)
    prompt_len = out.records[0].position

    def propose(self, context, budget):
        k = len(context.ids) - prompt_len  # tokens emitted so far
        if self.streams is None or context.depth < 2:
            return TokenTree()
        right, nxt = continuation[k], continuation[k + 1]
        wrong = right ^ 1  # another token, within the (even-sized) vocabulary
        return TokenTree([right, wrong, nxt], [-1, -1, 0], [0.9, 0.1, 0.8], ["stream 1", "stream 1", "stream 2"])

    monkeypatch.setattr(streaming_method.StreamDrafter, "propose", propose)
    return continuation


def test_the_accepted_paths_rows_and_the_accepted_nodes_streams_are_coloured_as_such(random_pair, passes, oracle_trees):
    state = run(random_pair)
    records = state.records
    assert [t for r in records for t in r.emitted] == oracle_trees[:MAX_NEW]  # still the target's output
    checked = 0
    for i, r in enumerate(records):
        tree = r.tree()
        if not tree.tree_tokens:
            continue
        fig, gamma = run_pass(records, i)[0], pass_shape(r).gamma
        rows = bars(fig)
        committed = passes[i][0] - len(tree.tree_tokens)
        path = tree.accepted_path
        assert len(path) == r.accepted  # no cut at EOS or the budget in these runs
        assert rows[ROLES["accepted"][0]] == [committed + 1 + n for n in path]
        assert sorted(rows[ROLES["accepted"][0]] + rows[ROLES["rejected"][0]]) == list(
            range(committed + 1, committed + 1 + len(tree.tree_tokens))
        )
        kept = len(set(records[i + 1].tree().tree_sources)) if i + 1 < len(records) else 0
        node = path[-1] if path else -1  # the accepted node: stream rows are node-major from the last committed token
        main = committed + len(tree.tree_tokens)
        first = main + (1 + node) * gamma + 1
        assert rows[ROLES["next"][0]] == list(range(first, first + kept))
        assert stream_rows(fig) == passes[i][1]
        checked += bool(path)
    assert checked >= 3  # iterations whose tree the target accepted in part


def test_the_tabs_sentence_counts_the_rows_of_the_pass(random_pair, passes, oracle_trees):
    state = run(random_pair)
    records = state.records
    i = next(i for i, r in enumerate(records) if r.accepted and i + 1 < len(records))
    fig, line = tab.show_pass(state, i + 1)  # iterations count from 1
    nodes = len(records[i].tree().tree_tokens)
    kept = len(set(records[i + 1].tree().tree_sources))
    assert line == (
        f"one target pass: {1 + nodes} rows verify the tree, {passes[i][1]} stream rows ran; {kept} of them "
        "(the accepted node's) draft the next tree."
    )
    assert 0 < kept < passes[i][1]  # only the accepted node's streams draft: the sentence must not say all do
    assert fig.layout.title.text.startswith(f"Iteration {i + 1}: one pass")
    first = tab.show_pass(state, 1)[1]
    assert first.startswith(f"one target pass: no tree yet ({passes[0][0]} rows of committed tokens), ")
    last = tab.show_pass(state, len(records))[1]
    assert last.endswith(": the run ended.")
    assert tab.show_pass(None, 1) == (None, "")


def test_a_run_without_streams_says_so_in_every_pass(random_pair, passes):
    """speculation_length 0: no pass runs a stream, so none builds a tree; the sentence says the streams
    are not in use, not that the output budget leaves no room."""
    state = tab.run_streaming("tiny-random", PROMPT, 6, 0, 2, load_pair=lambda name: random_pair)
    records = state.records
    assert len(records) == 6 and all(pass_shape(r).gamma == 0 for r in records)
    lines = [tab.show_pass(state, i + 1)[1] for i in range(len(records))]
    committed = pass_shape(records[1]).committed_rows
    assert lines[1] == f"one target pass: no tree ({committed} row of committed tokens), no streams in use."
    assert lines[-1].endswith("no streams in use: the run ended.")
    assert not any("budget" in line or "yet" in line for line in lines)


def test_nodes_off_the_accepted_path_are_not_called_rejected():
    """Most nodes off the accepted path were never tested (verification stops at the first mismatch)."""
    assert ROLES["rejected"][0] == "node not accepted"
    assert not any("rejected" in name for name, _ in ROLES.values())


def test_a_pass_without_streams_draws_main_rows_only():
    record = record_with(
        iteration=0,
        position=5,
        accepted=0,
        emitted=(1,),
        extra={
            "tree_tokens": [],
            "tree_parents": [],
            "tree_scores": [],
            "tree_sources": [],
            "accepted_path": [],
            "sources": [],
            "layers": 30,
            "stream_layers": 4,
            "gamma": 0,
            "committed_rows": 5,
        },
    )
    fig = streaming_pass_figure(record)
    assert stream_rows(fig) == 0 and bars(fig)[ROLES["committed"][0]] == [1, 2, 3, 4, 5]
    assert "no streams run" in fig.layout.title.subtitle.text


def test_saved_records_alone_draw_the_pass_and_older_ones_say_not_recorded(random_pair, passes):
    """The tab's state rebuilt from the records' JSON (no model, no adapter) draws the same passes; a
    record saved before records carried the pass's shape draws a note, not a guess."""
    state = run(random_pair)
    saved = tab.TreeRun(
        tuple(IterationRecord.from_dict(json.loads(json.dumps(r.to_dict()))) for r in state.records), {}
    )
    for i in range(len(saved.records)):
        fig, line = tab.show_pass(saved, i + 1)
        assert stream_rows(fig) == passes[i][1] and line.startswith("one target pass: ")
    bare = [  # without their StreamingPassExtra, as records saved before they carried it
        dataclasses.replace(r, extra=tuple(e for e in r.extra if not isinstance(e, StreamingPassExtra)))
        for r in saved.records
    ]
    old = tab.TreeRun(tuple(bare), {})
    fig, line = tab.show_pass(old, 2)
    assert fig.layout.title.text == "Iteration 2: pass not recorded" and not fig.data
    assert "Not recorded" in fig.layout.annotations[0].text
    assert line == "one target pass: not recorded (this record does not carry the pass's shape)."


def pass_record(pruned: bool, iteration: int = 0) -> IterationRecord:
    """A record by hand: 1 committed row, a 6-node tree (root 0 -> 2 accepted; node 1 and its child 4
    pruned after layer 26 when `pruned`), N = 30, N_s = 4, γ = 3; as a run records it."""
    extra = {
        "tree_tokens": [10, 11, 12, 13, 14, 15],
        "tree_parents": [-1, -1, 0, 0, 1, 2],
        "tree_scores": [0.9, 0.1, 0.8, 0.1, 0.1, 0.5],
        "tree_sources": ["stream 1", "stream 1", "stream 2", "stream 2", "stream 2", "stream 3"],
        "accepted_path": [0, 2],
        "sources": ["stream 1", "stream 2"],
        "layers": 30,
        "stream_layers": 4,
        "gamma": 3,
        "committed_rows": 1,
    }
    if pruned:
        extra |= {"prune_layer": 26, "pruned": [1, 4]}
    return record_with(iteration=iteration, position=5, accepted=2, emitted=(10, 12, 7), extra=extra)


def next_record() -> IterationRecord:
    """The pass after: its tree came from the accepted node's streams 1 and 2 (2 kept streams)."""
    r = pass_record(False, iteration=1)
    return record_with(
        iteration=1,
        position=5,
        accepted=2,
        emitted=(10, 12, 7),
        extra={**r.to_dict()["extra"], "tree_sources": ["stream 1", "stream 2"] * 3},
    )


def tops(fig, role: str) -> set[int]:
    """Where a role's bars end (base + height)."""
    return {b + h for t in fig.data if t.name == ROLES[role][0] for b, h in zip(t.base, t.y, strict=True)}


def test_pruned_nodes_stop_at_the_pruning_layer_and_carry_no_streams():
    """The pruning layer's nodes are main rows that ran layers 1-26 only, drawn as pruned (never accepted
    nor "not accepted"), and only the kept candidates (the last committed token, nodes 1, 3, 4, 6) ran
    streams: (1 + 6 - 2) * 3 stream rows, node-major, the accepted node's first two drafting the next tree."""
    fig, counts = run_pass([pass_record(True), next_record()], 0)
    rows = bars(fig)
    assert rows[ROLES["pruned"][0]] == [3, 6]  # nodes 1 and 4 (0-based), after the committed row
    assert rows[ROLES["accepted"][0]] == [2, 4] and rows[ROLES["rejected"][0]] == [5, 7]
    assert tops(fig, "pruned") == {26} and tops(fig, "accepted") == tops(fig, "rejected") == {30}
    assert stream_rows(fig) == (1 + 6 - 2) * 3 == 15
    streams = [h for t in fig.data if t.name in (ROLES["next"][0], ROLES["discarded"][0]) for h in t.hovertext]
    assert not any(f"of node {n}" in h for h in streams for n in (2, 5))  # 1-based: the pruned nodes
    assert sum(f"of node {n}<" in h for h in streams for n in (1, 3, 4, 6)) == 12  # the kept nodes' γ each
    # the accepted node (0-based 2) is the third kept candidate: its streams are rows 8 + 2 * 3 on
    assert rows[ROLES["next"][0]] == [14, 15]
    pruned_hover = next(t.hovertext for t in fig.data if t.name == ROLES["pruned"][0])
    assert all("layers 1-26: pruned after layer 26" in h for h in pruned_hover)
    assert fig.layout.title.text == "Iteration 1: one pass, 7 + 15 rows"
    assert "the 2 pruned nodes' through the first 26" in fig.layout.title.subtitle.text.replace(" <br>", " ")
    lines = [s for s in fig.layout.shapes if s.y0 == s.y1]  # horizontal: where the streams start, where pruning was
    assert sorted(s.y0 for s in lines) == [26, 26] and {s.line.color for s in lines} == {"#888888", ROLES["pruned"][1]}
    assert any(a.text == "pruned after layer 26" for a in fig.layout.annotations)
    assert (counts.nodes, counts.pruned, counts.prune_layer, counts.stream_rows, counts.kept) == (6, 2, 26, 15, 2)
    assert list(ROLES).index("pruned") == list(ROLES).index("rejected") + 1  # the legend: after "not accepted"
    assert ROLES["pruned"][1] not in {c for k, (_, c) in ROLES.items() if k != "pruned"}


def test_a_pass_without_pruning_draws_every_row_to_the_top_and_every_candidates_streams():
    fig, counts = run_pass([pass_record(False), next_record()], 0)
    assert not bars(fig)[ROLES["pruned"][0]] and counts.pruned == 0 and counts.prune_layer is None
    assert tops(fig, "accepted") == tops(fig, "rejected") == tops(fig, "committed") == {30}
    assert stream_rows(fig) == (1 + 6) * 3 and bars(fig)[ROLES["next"][0]] == [17, 18]  # node 3's streams
    assert [s.y0 for s in fig.layout.shapes if s.y0 == s.y1] == [26]  # where the streams start, no pruning line
    assert not fig.layout.annotations
    assert "prun" not in fig.layout.title.subtitle.text


def test_the_sentence_counts_pruned_nodes_only_when_some_were():
    pruned = tab.pass_sentence(run_pass([pass_record(True), next_record()], 0)[1])
    assert pruned == (
        "one target pass: 5 rows verify the tree, 15 stream rows ran; 2 of them (the accepted node's) draft the"
        " next tree. The pruning layer dropped 2 of the tree's 6 nodes after layer 26: they ran no layer above"
        " it and no streams."
    )
    whole = tab.pass_sentence(run_pass([pass_record(False), next_record()], 0)[1])
    assert whole == (
        "one target pass: 7 rows verify the tree, 21 stream rows ran; 2 of them (the accepted node's) draft the"
        " next tree."
    )
