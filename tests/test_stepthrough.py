"""The step-through of one iteration: it states the test each draft met exactly as the run applied it,
and its recomputed distributions reproduce the run's own p(x) and q(x), for every method."""

from __future__ import annotations

import dataclasses

import pytest

import specviz
from specviz.errors import SpecvizError
from specviz.methods import get_method
from specviz.plots.animation import iteration_animation
from specviz.plots.step import panel_grid, step_distributions
from specviz.plots.tree import record_tree_figure
from specviz.stepthrough import explain_iteration, recompute_for
from specviz.ui.stepthrough import step_html
from tests.conftest import own_methods, record_with

PROMPT = "def fibonacci(n):"


def run(pair, method, **kw):
    ids = specviz.encode_prompt(pair, PROMPT)
    return ids, list(specviz.run(method, pair, ids, max_new_tokens=24, **kw))


@pytest.mark.parametrize("method", [s.name for s in own_methods()])
def test_every_iteration_of_every_method_is_explained_as_it_ran(perturbed_pair, method):
    ids, records = run(perturbed_pair, method)
    mode = recompute_for(get_method(method), perturbed_pair, {})
    for i, r in enumerate(records):
        step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute=mode)
        assert step.accepted == r.accepted and len(step.checks) == len(r.drafted)
        assert [c.p for c in step.checks] == list(r.p_target or [None] * len(r.drafted))
        assert [c.accepted for c in step.checks] == [j < r.accepted for j in range(len(r.drafted))]
        if step.p_check is not None:
            assert step.p_check < 1e-3, (method, i, step.p_check)  # the rerun reproduces the run
        for c in step.checks:  # greedy: accepted exactly when the draft is the target's most likely token
            if c.tested and mode:
                assert (c.p_top[0][0] == c.token) == c.accepted, (method, i, c)
        if len(r.emitted) > r.accepted and mode:  # the target's own token is its argmax
            assert step.target_top[0][0] == step.target_token_id
        if mode == "target+draft" and r.drafted:
            assert all(c.q_top for c in step.checks) and step.source == "recomputed"
        if not mode:  # a method verifying with another model than the target: explained from the record
            assert step.source.startswith("from the record only") and not any(c.p_top for c in step.checks)
        html = step_html(step)
        assert f"Accepted {r.accepted} of {len(r.drafted)}" in html
        step_distributions(step)


def test_sampling_shows_the_uniform_each_draft_was_tested_with(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla", temperature=1.0, seed=3)
    corrections = 0
    for i in range(len(records)):
        step = explain_iteration(records, i, ids, {"temperature": 1.0}, pair=perturbed_pair, recompute="target+draft")
        for c in step.checks:
            if c.tested:  # the rule as specviz.verify applied it: u < min(1, p/q) accepts
                assert c.u is not None and (c.u * c.q < c.p) == c.accepted
                assert ("<" if c.accepted else "≥") in c.rule
                assert f"min(1, {c.p:.3g}/{c.q:.3g})" in c.rule  # p and q to 3 digits, not 0.002/0.002
                assert f"<td>{c.p:.3g}</td><td>{c.q:.3g}</td>" in step_html(step)
        if step.target_role == "correction":
            corrections += 1
            assert "norm(max(0, p − q))" in step.target_from
            assert 0 < sum(v for _, _, v in step.target_top) <= 1.0 + 1e-6
    assert corrections > 0


def test_a_race_from_elsewhere_is_explained_from_its_records(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla")
    step = explain_iteration(records, 1, ids, {"temperature": 0.0}, token_text=lambda t: f"<{t}>")
    assert step.source.startswith("from the record only")
    assert [c.text for c in step.checks] == [f"<{t}>" for t in records[1].drafted]
    assert "rollback" in " ".join(step.cache)
    assert "record only" in step_distributions(step).layout.annotations[0].text.replace("<br>", "")


def test_an_iteration_that_does_not_exist_is_one_clear_error(perturbed_pair):
    ids, records = run(perturbed_pair, "vanilla")
    with pytest.raises(SpecvizError, match="iterations 0 to"):
        explain_iteration(records, len(records), ids, {}, pair=perturbed_pair, recompute="target")
    with pytest.raises(SpecvizError, match="do not follow"):
        explain_iteration(records[1:], 0, ids, {}, pair=perturbed_pair, recompute="target")


@pytest.mark.parametrize("method", ["vanilla", "sssd"])
def test_the_cache_story_names_the_draft_models_cache_only_where_one_ran(perturbed_pair, method):
    """SSSD drafts from text: its step-through said "the draft's cache is cut" (issue 38, item 8)."""
    ids, records = run(perturbed_pair, method)
    i = next(i for i, r in enumerate(records) if r.drafted)
    mode = recompute_for(get_method(method), perturbed_pair, {})
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute=mode)
    rollback = next(line for line in step.cache if line.startswith("rollback"))
    assert ("draft model's cache is cut" in rollback) == (method == "vanilla")
    assert ("no draft model ran" in rollback) == (method == "sssd")
    shown = step_html(step, method)
    assert f"iteration {i + 1} of" in shown and "within 0.0e+00" not in shown
    assert "equal the run's" in shown or "differ from the run's by at most" in shown
    assert (
        step_distributions(step)
        .layout.title.text.replace(" <br>", " ")
        .startswith(f"The distributions behind iteration {i + 1} of ")
    )


# ---- the animated iteration (issue 38: "the step-through can play one iteration as it happened") ----


def captions(fig) -> list[str]:
    return [f.layout.annotations[0].text.replace("<br>", " ") for f in fig.frames]


def trace(frame, name: str):
    return next(t for t in frame.data if t.name == name)


def segments(t) -> list[tuple[float, float]]:
    xs = list(t.x)
    return [(xs[i], xs[i + 1]) for i in range(0, len(xs), 3)]


def test_a_chain_plays_its_drafts_one_pass_and_the_test_up_to_the_rejection(perturbed_pair):
    ids = specviz.encode_prompt(perturbed_pair, PROMPT)
    records = list(specviz.run("vanilla", perturbed_pair, ids, max_new_tokens=64, speculation_length=6))
    refused = [i for i, r in enumerate(records) if r.accepted < len(r.drafted) - 1]  # drafts after a rejection
    i = max(refused, key=lambda i: records[i].accepted)
    r, k = records[i], len(records[i].drafted)
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target+draft")
    fig = iteration_animation(step)
    said = captions(fig)
    tested = r.accepted + 1
    assert len(fig.frames) == 1 + k + 1 + tested + 2  # before, k drafts, the pass, the tests, rollback, own token
    assert [f.name for f in fig.frames] == [str(n) for n in range(len(fig.frames))]
    assert [s.startswith(f"Step {n + 1} of {len(fig.frames)}.") for n, s in enumerate(said)] == [True] * len(said)
    assert [f"Draft {j + 1} of {k}" in said[1 + j] for j in range(k)] == [True] * k
    took = f"{r.verify_ms:.1f} ms" if r.verify_ms >= 1 else f"{r.verify_ms:.2f} ms"  # two digits under a millisecond
    assert "single pass" in said[k + 1] and took in said[k + 1]
    # the drafts appear one by one on the draft's clock, the target's pass follows it
    for j in range(k):
        assert len(trace(fig.frames[1 + j], "drafted, not yet tested").x) == j + 1
    draft = segments(trace(fig.frames[k], "drafting (ms)"))
    assert len(draft) == k and draft[-1][1] == pytest.approx(r.draft_ms)
    (target,) = segments(trace(fig.frames[k + 1], "target pass (ms)"))
    assert target == pytest.approx((r.draft_ms, r.draft_ms + r.verify_ms))
    # the test token by token; the rejection frame at the first refused draft, the rest untested from there
    for j in range(tested):
        frame = fig.frames[k + 2 + j]
        assert said[k + 2 + j].startswith(f"Step {k + 3 + j} of {len(fig.frames)}. Test {j + 1}:")
        assert list(trace(frame, "accepted").x) == [n + 1 for n in range(min(j + 1, r.accepted))]
    rejection = fig.frames[k + 2 + r.accepted]
    assert "rejected" in said[k + 2 + r.accepted] and "rejection point" in said[k + 2 + r.accepted]
    assert list(trace(rejection, "rejected").x) == [r.accepted + 1]
    assert list(trace(rejection, "not tested (after the rejection)").x) == list(range(r.accepted + 2, k + 1))
    assert not list(trace(fig.frames[k + 1 + r.accepted], "rejected").x)  # not before its own test
    # the rollback of both caches, then the target's own token in the rejected draft's place
    rollback = fig.frames[-2]
    assert said[-2].startswith(f"Step {len(said) - 1} of") and "Rollback: cut back" in said[-2]
    assert list(trace(rollback, "dropped by the rollback").x) == list(range(r.accepted + 1, k + 1))
    assert said[-1].endswith(step.target_from + ".") and "correction" in said[-1]
    assert list(trace(fig.frames[-1], "the target's own token").x) == [r.accepted + 1]
    assert fig.layout.xaxis.title.text == "milliseconds since the iteration began"
    named = f"iteration {i + 1} of Vanilla SD"  # the display name, as the step-through's text
    assert iteration_animation(step, "Vanilla SD").layout.title.text.endswith(named)
    assert step_distributions(step, "Vanilla SD").layout.title.text.replace(" <br>", " ").endswith(named)
    assert len(fig.layout.sliders[0].steps) == len(fig.frames)
    assert fig.layout.updatemenus[0].buttons[0].args[0] is None  # Play: every frame from the current one


def test_an_iteration_without_times_says_not_measured(perturbed_pair):
    import dataclasses

    ids, records = run(perturbed_pair, "vanilla")
    records = [dataclasses.replace(r, draft_ms=0.0, verify_ms=0.0) for r in records]  # e.g. a hand-written file
    step = explain_iteration(records, 0, ids, {"temperature": 0.0}, token_text=str)
    assert step.draft_ms is None and step.verify_ms is None
    fig = iteration_animation(step)
    said = " ".join(captions(fig))
    assert "Drafting time not measured" in said and "time not measured." in said and " ms" not in said
    assert fig.layout.xaxis.title.text.startswith("time not measured")


def test_a_tree_draws_its_attention_mask_and_walks_the_accepted_path(perturbed_pair):
    ids = [5, 17, 300, 42, 5, 17, 300, 42, 5, 17, 300, 42, 5]  # repeats: the n-gram tree has nodes
    records = list(specviz.run("sssd", perturbed_pair, ids, max_new_tokens=40, speculation_length=8))
    i = max(range(len(records)), key=lambda i: (records[i].accepted, len(records[i].tree().tree_tokens)))
    r, tree = records[i], records[i].tree()
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target")
    assert step.tree is not None and step.tree.parents == tree.tree_parents
    rollback_line = next(line for line in step.cache if line.startswith("rollback"))
    assert "keeps the context and the" in rollback_line and "cut back" not in rollback_line  # kept by index
    fig = iteration_animation(step)
    said = captions(fig)
    mask_at = next(n for n, s in enumerate(said) if "The tree attention mask" in s)
    n = len(tree.tree_tokens)

    def mask(frame):
        return [[v == 1 for v in row] for row in trace(frame, "tree attention mask (filled: attends)").z]

    assert not any(any(row) for row in mask(fig.frames[mask_at - 1]))  # drawn at its own frame, not before
    ancestors = [{j for j in range(n) if j == a or j in _ancestry(tree.tree_parents, a)} for a in range(n)]
    assert mask(fig.frames[mask_at]) == [[True] + [j in ancestors[a] for j in range(n)] for a in range(n)]
    assert "single pass" in said[mask_at + 1] and f"all {n} nodes" in said[mask_at + 1]
    walk = [s for s in said if "The walk, depth" in s]
    assert len(walk) == r.accepted == len(tree.accepted_path)
    last_walk = fig.frames[mask_at + 1 + r.accepted]
    assert len(trace(last_walk, "accepted").x) == r.accepted
    assert "Rollback: the target's cache keeps" in said[-2]
    root = trace(fig.frames[0], "committed context")  # its label in dark type: on a light fill, and inside it
    assert int(root.marker.color[1:3], 16) > 0xAA and root.marker.size >= 8 * len(root.text[0])
    assert len(trace(fig.frames[-2], "dropped by the rollback").x) == n - r.accepted


def flat(spans) -> list[float]:
    return [x for span in spans for x in span]


def _ancestry(parents, node) -> set[int]:
    out = set()
    while parents[node] >= 0:
        node = parents[node]
        out.add(node)
    return out


def test_pearl_plays_its_two_lanes_on_one_clock_and_their_overlap(perturbed_pair):
    ids, records = run(perturbed_pair, "pearl", window=4)
    i = next(i for i, r in enumerate(records) if r.pearl().mode == "post-verify" and r.drafted)
    r, pearl = records[i], records[i].pearl()
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target+draft")
    lanes = step.lanes
    t0 = min([r.t_start, *(s for s, _ in (*pearl.draft_intervals, *pearl.target_intervals))])
    t0 = min([t0, *(p.start for p in pearl.phases)])
    assert flat(lanes.draft_passes) == pytest.approx([(x - t0) * 1e3 for x in flat(pearl.draft_intervals)])
    assert flat(lanes.target_passes) == pytest.approx([(x - t0) * 1e3 for x in flat(pearl.target_intervals)])
    fig = iteration_animation(step)
    said = captions(fig)
    ends = sorted({e for _, e in (*lanes.draft_passes, *lanes.target_passes)})
    assert len(fig.frames) == 1 + len(ends) + (len([c for c in step.checks if c.tested])) + 2
    last_lane = fig.frames[len(ends)]  # every pass drawn whole, on one time axis
    draft = segments(trace(last_lane, "drafting (ms)"))
    target = segments(trace(last_lane, "target pass (ms)"))
    assert flat(draft) == pytest.approx(flat(lanes.draft_passes))
    assert flat(target) == pytest.approx(flat(lanes.target_passes))
    overlap = sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in draft for s2, e2 in target)
    assert f"the two models ran at the same time for {overlap:.1f} ms" in said[len(ends)] or overlap < 1
    for n, t in enumerate(ends, start=1):  # the clock moves forward frame by frame; a pass grows until it ends
        assert said[n].startswith(f"Step {n + 1} of {len(fig.frames)}. {t:.1f} ms:") or t < 1
        assert all(e <= t + 1e-9 for _, e in segments(trace(fig.frames[n], "drafting (ms)")))
    assert "post-verify" in " ".join(str(x) for x in trace(last_lane, "PEARL round").text)
    assert fig.layout.yaxis.ticktext == ("target model", "draft model", "PEARL round")


def test_the_tree_figures_title_counts_iterations_from_one():
    """Item 4/8: the SSSD and Streaming tabs' slider counts from 1; the tree's title counted from 0."""
    tree = {"tree_tokens": [7], "tree_parents": [-1], "tree_scores": [0.5], "tree_sources": ["input"]}
    record = record_with(iteration=0, position=9, extra={**tree, "accepted_path": [0], "sources": ["input"]})
    assert record_tree_figure(record).layout.title.text == "Iteration 1: 1 node, 1 accepted"
    empty_tree = record_with(iteration=2, position=9)
    assert record_tree_figure(empty_tree).layout.title.text == "Iteration 3"


def test_a_streaming_tree_names_where_its_drafts_came_from(perturbed_pair):
    """Speculative Streaming drafts with the target's own stream heads: not 'from text'."""
    ids, records = run(perturbed_pair, "streaming")
    i = next(i for i, r in enumerate(records) if r.tree() and r.tree().tree_tokens)
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, token_text=str)
    said = " ".join(captions(iteration_animation(step)))
    assert "from the target's stream heads" in said and "from text" not in said


def test_many_drafts_wrap_into_rows_of_five_under_a_clear_title(perturbed_pair):
    """PEARL drafts 14: one row of 15 panels was illegible, and the subtitle sat on the first panel's title
    at every size (review fault 10)."""
    ids, records = run(perturbed_pair, "vanilla")
    i = next(i for i, r in enumerate(records) if r.drafted)
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target+draft")
    check = dataclasses.replace(step.checks[0], tested=True)
    many = dataclasses.replace(step, checks=tuple(dataclasses.replace(check, index=k) for k in range(14)))
    fig = step_distributions(many)
    panels = sorted({(a.domain[0], round(b.domain[0], 6)) for a, b in zip(axes(fig, "x"), axes(fig, "y"), strict=True)})
    assert len(panels) == 15 and len({x for x, _ in panels}) == 5 and len({y for _, y in panels}) == 3
    row_px = fig.layout.height / 3
    assert fig.layout.height >= 3 * 260 and row_px > 200  # the figure grows by its rows
    # the title's two lines (title, subtitle, ~25 px each) end above the panel titles' line (~25 px)
    assert fig.layout.margin.t >= 3 * 25 + 40
    assert panel_grid(1) == (1, 1) and panel_grid(5) == (5, 1) and panel_grid(6) == (3, 2)


@pytest.mark.parametrize("label", ["Vanilla SD", "PEARL w/o post-verify", "EAGLE-2 (feature head)"])
def test_the_distributions_title_fits_a_phone(perturbed_pair, label):
    """Issue 38 item 9: "The distributions behind one iteration: iteration 3 of Vanilla SD" ran off a phone's
    plot (~340 px) after 33 characters. It says the same in lines a phone shows whole, with room above the
    panels' titles for every line."""
    from specviz.plots.step import TITLE
    from tests.test_phone_plots import PHONE_PX, text_px

    ids, records = run(perturbed_pair, "vanilla")
    i = next(i for i, r in enumerate(records) if r.drafted)
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target+draft")
    i = 98  # a longer race's two-digit iteration: the longest title
    fig = step_distributions(dataclasses.replace(step, iteration=i), label)
    font = fig.layout.font.size
    title = fig.layout.title.text.split("<br>")
    assert " ".join(line.strip() for line in title) == f"The distributions behind iteration {i + 1} of {label}"
    for line in [*title, TITLE]:  # plotly's title: 1.4 times the font; TITLE heads the empty figure
        assert text_px(line.strip(), font * 1.4) <= PHONE_PX, line
    subtitle = fig.layout.title.subtitle.text.split("<br>")
    for line in subtitle:
        assert text_px(line.strip(), font) <= PHONE_PX, line
    # the title's lines (~26 px each) and the subtitle's (~20 px) end above the panel titles' line
    assert fig.layout.margin.t >= 20 + 26 * len(title) + 20 * len(subtitle) + 45


def axes(fig, kind: str) -> list:
    return [fig.layout[k] for k in sorted(fig.layout) if k.startswith(kind + "axis")]


def test_the_tests_numbers_hang_below_the_draft_squares_and_the_first_pass_reads_the_prompt(perturbed_pair):
    """Review fault 8: "p 0.545" sat half under the draft's square; iteration 1's pass said "4 drafts + 1"
    though it also read the whole prompt."""
    ids, records = run(perturbed_pair, "vanilla", temperature=1.0, seed=3)
    first = explain_iteration(records, 0, ids, {"temperature": 1.0}, pair=perturbed_pair, recompute="target+draft")
    fig = iteration_animation(first)
    last = fig.frames[-1]
    numbers = trace(last, "the test's numbers")
    lines = max(t.count("<br>") + 1 for t in numbers.text)
    assert lines >= 4  # p, q, min(1, p/q), u, the verdict
    axis = fig.layout.yaxis2
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    unit = (axis.domain[1] - axis.domain[0]) * plot_px / (axis.range[1] - axis.range[0])  # px per row unit
    line_px = 15  # 12 px type
    top = numbers.y[0] * unit + (0 if numbers.textposition == "bottom center" else lines * line_px / 2)
    squares = trace(last, "accepted") if trace(last, "accepted").y else trace(last, "rejected")
    assert top <= squares.y[0] * unit - 34 / 2, (top, squares.y[0] * unit)  # below the 34 px square
    cache = trace(last, "KV cache entry").y[0] * unit
    assert top - lines * line_px >= cache + 22 / 2  # above the target cache's 22 px squares
    passes = pass_labels(fig)
    assert passes and all(f"the {first.position}-token prompt" in p for p in passes), passes
    later = explain_iteration(records, 1, ids, {"temperature": 1.0}, pair=perturbed_pair, recompute="target+draft")
    passes = pass_labels(iteration_animation(later))
    assert passes and not any("prompt" in p for p in passes), passes  # a later pass feeds one context token


def pass_labels(fig) -> list[str]:
    """The target pass's labels in every frame, on its bar or above it (a label longer than the bar)."""
    return [label for f in fig.frames for t in f.data if t.name == "target pass" for label in t.text or ()]


def test_a_trees_play_controls_sit_below_its_mask_labels(perturbed_pair):
    """Review fault 8: SSSD's mask x-axis title sat on the slider's row."""
    ids = [5, 17, 300, 42, 5, 17, 300, 42, 5, 17, 300, 42, 5]
    records = list(specviz.run("sssd", perturbed_pair, ids, max_new_tokens=40, speculation_length=8))
    i = max(range(len(records)), key=lambda i: len(records[i].tree().tree_tokens))
    fig = iteration_animation(
        explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target")
    )
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    axis = fig.layout.xaxis3
    assert axis.title.text.startswith("attends to") and axis.tickangle == -60
    # tilted tick labels (~7 px a character, at 60°) and the axis title (~30 px) under the plot
    under = max(len(t) for t in axis.ticktext) * 7 * 0.87 + 30
    for control in (fig.layout.sliders[0], fig.layout.updatemenus[0]):
        assert control.y * plot_px <= -under, (control.y * plot_px, under)


def test_whitespace_and_markup_tokens_are_drawn_visible_in_the_animation(perturbed_pair):
    """Fix 2 (issue 38 follow-up): a newline, a tab or a lone space was drawn raw in the animated iteration (a
    newline broke its label, a space was an empty square) and `<|im_start|>` vanished (plotly drops an unknown
    tag). Each is shown as the board's tooltip and the tree show it (specviz.text.visible): ⏎, ⇥, ·, markup
    escaped."""
    ids, records = run(perturbed_pair, "vanilla", speculation_length=6)
    i = next(i for i, r in enumerate(records) if len(r.drafted) == 6)
    step = explain_iteration(records, i, ids, {"temperature": 0.0}, pair=perturbed_pair, recompute="target")
    odd = ["\n", "\t", " ", "a\nb", "<|im_start|>", "x"]
    checks = tuple(dataclasses.replace(c, text=odd[j]) for j, c in enumerate(step.checks))
    fig = iteration_animation(dataclasses.replace(step, checks=checks, target_token="\n"))
    texts = [  # a label's own line breaks are plotly's <br>
        t.replace("<br>", "")
        for f in fig.frames
        for tr in f.data
        for t in (tr.text if isinstance(tr.text, tuple) else ())
    ]
    hovers = [t for f in fig.frames for tr in f.data for t in (tr.hovertext if isinstance(tr.hovertext, tuple) else ())]
    said = captions(fig)
    for shown in (texts, hovers, said):
        assert not any(c in t for t in shown for c in "\n\t<>"), [t for t in shown if any(c in t for c in "\n\t<>")]
    squares = [
        t for f in fig.frames for tr in f.data if tr.name == "accepted" or tr.name == "rejected" for t in tr.text
    ]
    drafted = trace(fig.frames[6], "drafted, not yet tested").text
    assert list(drafted) == ["⏎", "⇥", "·", "a⏎b", "&lt;|im_st…", "x"], drafted
    assert "Draft 1 of 6: '⏎'" in said[1] and "Draft 5 of 6: '&lt;|im_start|&gt;'" in said[5]
    assert "'⏎'" in said[-1] and "⏎" in trace(fig.frames[-1], "the target's own token").text
    assert all(" " not in t for t in squares)
