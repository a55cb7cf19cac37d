"""SSSD's tree plot and paper figures build from recorded runs, and the experiment's replay of a
drafter along a greedy reference gives exactly the iterations of a real greedy run."""

from __future__ import annotations

import json

import specviz
from specviz.experiments.sssd import fig4, proposers, replay
from specviz.models.pair import encode_prompt
from specviz.plots.sssd_figures import accepted_length_figure, batch_figure
from specviz.plots.tree import layout, record_tree_figure, tree_figure, visible


def test_layout_puts_children_right_of_parents_and_leaves_on_their_own_rows():
    where = layout([-1, 0, -1, 1, 2])
    assert [d for d, _ in where] == [1, 2, 1, 3, 2]
    leaves = [where[3][1], where[4][1]]
    assert sorted(leaves) == [0.0, 1.0] and where[1][1] == where[3][1]


def test_tree_figure_from_a_real_record_marks_the_accepted_path(perturbed_pair):
    records = specviz.generate("sssd", perturbed_pair, [5, 17, 300, 42, 5, 17, 300, 42, 5], max_new_tokens=20).records
    record = next(r for r in records if r.accepted)
    data = json.loads(json.dumps(record.to_dict()))  # as saved and replayed
    fig = record_tree_figure(data, decode=lambda t: f"<{t}>")
    nodes = [t for t in fig.data if t.name and t.name.startswith("from ")]
    assert sum(len(t.x) for t in nodes) == len(record.extra["tree_tokens"])
    bold = sum(1 for t in fig.data if t.mode == "lines" and t.line.width == 4)
    assert bold == record.accepted
    assert "accepted" in fig.layout.title.text
    assert tree_figure([], []).layout.title.text == "Candidate tree"


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
    assert len(state["records"]) >= 1 and sum(len(r["emitted"]) for r in state["records"]) == 16
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
    assert count == len(state["records"]) >= 1 and fig is not None and "<span" in out


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
