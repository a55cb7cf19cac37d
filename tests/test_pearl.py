"""PEARL: greedy parity for every window and both ablations, the mode switching on a draft whose
mistakes are scripted, and the timestamps each record carries."""

from __future__ import annotations

import dataclasses
import itertools
import json
from types import SimpleNamespace

import pytest
import torch

import specviz
from specviz.errors import SpecvizError
from specviz.serving.limits import AppLimits
from tests.conftest import tab_context

VARIANTS = ["pearl", "pearl-no-pre", "pearl-no-post"]


@pytest.mark.parametrize(
    "method, concurrent", [("pearl", True), ("pearl", False), ("pearl-no-pre", True), ("pearl-no-post", True)]
)
def test_greedy_output_equals_autoregressive_for_every_window(method, concurrent, tiny_pairs):
    for kind in ("random", "perturbed"):
        pair = tiny_pairs[kind]
        ref = specviz.generate("autoregressive", pair, "def f(x):", max_new_tokens=23).summary.output_ids
        for window in (1, 3, 5):
            got = specviz.generate(method, pair, "def f(x):", max_new_tokens=23, window=window, concurrent=concurrent)
            assert got.summary.output_ids == ref, f"{method}, window {window}, {kind} pair"


class ScriptedDraft(torch.nn.Module):
    """The target itself, except that its first choice is the target's second at the positions in
    `wrong_at` (absolute token indices): an acceptance pattern fixed in advance."""

    def __init__(self, target: torch.nn.Module, wrong_at: set[int]):
        super().__init__()
        self.inner, self.config, self.wrong_at = target, target.config, wrong_at

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def forward(self, input_ids, past_key_values=None, logits_to_keep=1, **kw):
        seen = past_key_values.get_seq_length() if past_key_values is not None else 0
        out = self.inner(input_ids=input_ids, past_key_values=past_key_values, logits_to_keep=logits_to_keep, **kw)
        logits = out.logits.clone()  # [1, n, V]
        n, length = logits.shape[1], input_ids.shape[1]
        for j in range(n):
            if seen + length - n + j + 1 in self.wrong_at:  # the index of the token row j predicts
                top2 = logits[0, j].topk(2).indices
                logits[0, j, top2[0]], logits[0, j, top2[1]] = logits[0, j, top2[1]], logits[0, j, top2[0]]
        return SimpleNamespace(logits=logits)


# (mode, verified drafts, accepted, emitted) per record, window 3, 14 new tokens, the draft wrong
# at new tokens 4, 5 and 9; worked out by hand from the paper's Algorithm 1.
EXPECTED = {
    "pearl": [
        ("pre-verify", 1, 1, 1),  # x1 = g0 checked while drafting g0..g2: right, g1 g2 pending
        ("post-verify", 2, 2, 2),  # g1 g2 verified while g3 g4' g5' are drafted: no bonus token
        ("post-verify", 3, 1, 2),  # g4' rejected: correction, back to pre-verify
        ("pre-verify", 1, 0, 1),  # g5' rejected before any verification phase
        ("pre-verify", 1, 1, 1),
        ("post-verify", 2, 2, 2),
        ("post-verify", 3, 0, 1),  # g9' rejected
        ("pre-verify", 1, 1, 1),
        ("verify", 2, 2, 3),  # budget: nothing left to draft ahead, so the bonus token ends the run
    ],
    "pearl-no-pre": [
        ("post-verify", 3, 3, 3),  # g0..g2 drafted alone, then verified while g3 g4' g5' are drafted
        ("post-verify", 3, 1, 2),
        ("post-verify", 3, 0, 1),
        ("post-verify", 3, 3, 3),
        ("post-verify", 3, 0, 1),
        ("verify", 3, 3, 4),
    ],
    "pearl-no-post": [
        ("pre-verify", 1, 1, 1),
        ("verify", 2, 2, 3),  # verification alone, bonus token included
        ("pre-verify", 1, 0, 1),
        ("pre-verify", 1, 0, 1),
        ("pre-verify", 1, 1, 1),
        ("verify", 2, 2, 3),
        ("pre-verify", 1, 1, 1),
        ("verify", 2, 2, 3),
    ],
}


@pytest.mark.parametrize("method", VARIANTS)
def test_modes_switch_as_the_paper_says_on_a_scripted_draft(method, self_pair):
    prompt = [5, 17, 300, 42, 7]
    wrong = {len(prompt) + i for i in (4, 5, 9)}
    pair = dataclasses.replace(self_pair, draft=ScriptedDraft(self_pair.target, wrong))
    result = specviz.generate(method, pair, prompt, max_new_tokens=14, window=3, concurrent=False)
    got = [(r.pearl().mode, len(r.drafted), r.accepted, len(r.emitted)) for r in result.records]
    assert got == EXPECTED[method]
    ref = specviz.generate("autoregressive", self_pair, prompt, max_new_tokens=14).summary.output_ids
    assert result.summary.output_ids == ref
    if method == "pearl":
        dropped = [r.pearl().dropped for r in result.records if r.pearl().mode == "pre-verify"]
        assert [len(d) for d in dropped] == [0, 2, 0, 0]  # only the rejected pre-verify drops drafts
        kept = [r.pearl().ahead_kept for r in result.records if r.pearl().mode == "post-verify"]
        assert kept == [True, False, True, False]


@pytest.mark.parametrize("method", VARIANTS)
def test_each_lane_is_busy_with_one_forward_at_a_time_and_inside_its_step(method, perturbed_pair):
    result = specviz.generate(method, perturbed_pair, "def f(x):", max_new_tokens=30, window=3)
    for lane in ("draft_intervals", "target_intervals"):
        intervals = [i for r in result.records for i in getattr(r.pearl(), lane)]
        assert all(s <= e for s, e in intervals)
        assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(intervals)), f"{lane} overlap"
    for r in result.records:
        for s, e in r.pearl().draft_intervals + r.pearl().target_intervals:
            assert r.t_start <= s and e <= r.t_end
        assert (
            r.draft_forwards == len(r.pearl().draft_intervals)
            and r.target_forwards == len(r.pearl().target_intervals) == 1
        )
        assert 0 < r.pearl().ideal_s <= r.t_end - r.t_start + 1e-9
    parallel = [p.parallel for r in result.records for p in r.pearl().phases]
    assert any(parallel)  # the concurrent run did overlap the two models


def test_window_option_is_checked():
    with pytest.raises(SpecvizError, match="window"):
        specviz.run("pearl", None, "x", window=-1)


def test_drafting_phases_end_where_the_target_adds_a_token(self_pair):
    from specviz.experiments.pearl import tokens_per_phase

    prompt = [5, 17, 300, 42, 7]
    pair = dataclasses.replace(self_pair, draft=ScriptedDraft(self_pair.target, {len(prompt) + i for i in (4, 5, 9)}))
    result = specviz.generate("pearl", pair, prompt, max_new_tokens=14, window=3, concurrent=False)
    assert tokens_per_phase(result.records) == [5, 1, 4, 4]  # see EXPECTED["pearl"]
    vanilla = specviz.generate("vanilla", pair, prompt, max_new_tokens=14, speculation_length=3)
    assert tokens_per_phase(vanilla.records) == [len(r.emitted) for r in vanilla.records]


def test_experiment_writes_its_table_and_figures(tmp_path, capsys):
    from specviz.experiments import pearl as experiment

    code = experiment.main(
        [
            "--pair",
            "tiny-random",
            "--suites",
            "humaneval",
            "--limit",
            "1",
            "--max-new-tokens",
            "6",
            "--modes",
            "sequential",
            "--window",
            "2",
            "--no-warmup",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    variants = {r["variant"] for r in result["summary"]}
    assert {
        "autoregressive",
        "vanilla (γ=2)",
        "pearl [sequential]",
        "pearl-no-pre [sequential]",
        "pearl-no-post [sequential]",
    } == variants
    assert all(r["matches_autoregressive"] for r in result["summary"])
    for name in ("table.md", "timeline.html", "speedup.html", "timeline_records.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert "pearl [sequential]" in capsys.readouterr().out


def test_the_pearl_tab_builds_and_its_handler_compares_with_vanilla(perturbed_pair):
    import gradio as gr

    from specviz.ui import pearl as tab

    with gr.Blocks():
        tab.build_tab(tab_context("tiny-perturbed", load_pair=lambda name: perturbed_pair))
    out = tab.compare(perturbed_pair, "def f(x):", window=3, concurrent=True, max_new_tokens=16, repeats=2)
    assert [r["tokens"] for r in out["rows"]] == [16, 16, 16] and [r["runs"] for r in out["rows"]] == [2, 2, 2]
    assert set(out["records"]) == {"target alone", "vanilla (γ=4, its default)", "PEARL (γ=3)"}
    assert {s["mode"] for s in out["steps"]} <= {"pre-verify", "post-verify", "verify"}
    assert out["steps"][0]["mode"] == "pre-verify"
    assert all(list(r) == tab.ROW_COLUMNS for r in out["rows"]) and all(
        list(r) == tab.STEP_COLUMNS for r in out["steps"]
    )


def test_the_race_panel_shows_pearls_current_mode(perturbed_pair):
    from specviz.serving.race import MethodRun
    from specviz.ui.panels import panel_html

    records = list(specviz.generate("pearl", perturbed_pair, "def f(x):", max_new_tokens=12, window=2).records)
    html = panel_html(MethodRun("pearl", "PEARL", "", status="done", records=records), None, 12)
    assert f">{records[-1].pearl().mode}<" in html and ">mode<" in html
    vanilla = list(specviz.generate("vanilla", perturbed_pair, "def f(x):", max_new_tokens=12).records)
    assert ">mode<" not in panel_html(MethodRun("vanilla", "Vanilla", "", status="done", records=vanilla), None, 12)


@torch.inference_mode()
def test_sampling_through_post_verify_chains_follows_the_target(perturbed_pair):
    """Four tokens with window 2 pass through pre-verify, a post-verify whose drafts-ahead are kept
    (the bonus token is dropped for them) and a final verification. The marginal of tokens 3-4
    must be the target's (exact, by enumerating its top-4 paths)."""
    import numpy as np

    from specviz.sampling import SamplingConfig, probabilities
    from tests.test_verify import chi_square_pvalue

    cfg, prompt = SamplingConfig(temperature=1.0, top_k=4), [5, 17, 300, 42, 5, 17]

    def dist(ids):
        return probabilities(perturbed_pair.target(input_ids=torch.tensor([ids])).logits[0, -1], cfg)

    exact: dict[tuple[int, int], float] = {}
    paths = [((), 1.0)]
    for _ in range(4):
        paths = [
            ((*ids, x), w * float(p[x]))
            for ids, w in paths
            for p in [dist(prompt + list(ids))]
            for x in torch.nonzero(p).flatten().tolist()
        ]
    for ids, w in paths:
        exact[ids[2:]] = exact.get(ids[2:], 0.0) + w
    runs, counts, kept = 800, dict.fromkeys(exact, 0), 0
    for seed in range(runs):
        records = list(
            specviz.run(
                "pearl",
                perturbed_pair,
                prompt,
                max_new_tokens=4,
                temperature=cfg.temperature,
                top_k=cfg.top_k,
                seed=seed,
                window=2,
                concurrent=False,
            )
        )
        tokens = tuple(t for r in records for t in r.emitted)
        counts[tokens[2:]] += 1
        kept += any(r.pearl().ahead_kept for r in records)
    assert kept > runs // 4, "the chained post-verify path must be exercised"
    keys = list(exact)
    stat, pvalue = chi_square_pvalue(
        np.array([counts[k] for k in keys], float), np.array([exact[k] for k in keys]) * runs
    )
    assert pvalue > 1e-3, f"tokens 3-4 do not follow p (chi2={stat:.1f}, p-value={pvalue:.2g})"


def test_a_median_run_is_warmed_up_and_emits_what_one_run_does(perturbed_pair):
    from specviz.errors import SpecvizError
    from specviz.runner import generate, generate_median

    one = generate("pearl", perturbed_pair, "def f(x):", max_new_tokens=12, window=2)
    median = generate_median("pearl", perturbed_pair, "def f(x):", repeats=3, max_new_tokens=12, window=2)
    assert median.summary.output_ids == one.summary.output_ids
    assert all(r.oracle_sl is not None for r in median.records)
    with pytest.raises(SpecvizError, match="repeats"):
        generate_median("pearl", perturbed_pair, "def f(x):", repeats=0)


def _pearl_handlers(**ctx_overrides):
    import gradio as gr

    from specviz.ui import pearl as tab

    with gr.Blocks() as demo:
        tab.build_tab(tab_context(**ctx_overrides))
    return {(f.api_name or f.fn.__name__): f for f in demo.fns.values() if f.fn is not None}


def test_a_megabyte_prompt_on_the_pearl_tab_is_refused_before_it_waits_for_the_models(perturbed_pair):
    """The PEARL tab tokenised a 1 MB prompt in the models' turn (4.7 s) before refusing it (issue 41):
    now it is refused before the handler takes its turn or loads the pair whose tokenizer would read it."""
    import gradio as gr

    from specviz.ui import pearl as tab

    loads: list[str] = []
    run = _pearl_handlers(load_pair=lambda name: loads.append(name) or perturbed_pair)["pearl"].fn
    with pytest.raises(gr.Error, match="the prompt is 1000000 characters long; a prompt here is at most 32768"):
        run("tiny-perturbed", "x " * 500_000, 0, False, 8, 1)
    assert not loads
    with pytest.raises(SpecvizError, match="tokens long; a prompt here takes at most 4"):  # the library's callers too
        tab.compare(perturbed_pair, "def f(x): return x", 2, False, 8, 1, AppLimits(prompt_tokens=4))


def test_the_pearl_tabs_stop_ends_the_comparison_after_the_method_being_timed(perturbed_pair, monkeypatch):
    """Stop (as on the DISCO tab): pressed while the target alone is timed, vanilla and PEARL never run."""
    from specviz import runner
    from specviz.serving.stops import KeyedStop

    fns = _pearl_handlers(load_pair=lambda name: perturbed_pair)
    assert fns["stop_pearl"].queue is False  # Stop jumps the queue the run waits in
    stop, methods, generate_median = KeyedStop(), [], runner.generate_median

    def pressed_during_the_first(method, *args, **kwargs):
        methods.append(method)
        stop.set()  # the visitor presses Stop while this method runs
        return generate_median(method, *args, **kwargs)

    monkeypatch.setattr(runner, "generate_median", pressed_during_the_first)
    note, table, figure, steps = fns["pearl"].fn("tiny-perturbed", "def f(x):", 2, False, 8, 1, stop)
    assert methods == ["autoregressive"] and note == "**Stopped** after 1 of 3 methods."
    assert list(table["method"]) == ["target alone"] and figure is not None and steps.empty
    assert not stop.keys  # the call's stop key is given back
