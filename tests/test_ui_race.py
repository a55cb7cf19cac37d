"""The race engine behind the Race tab, and tab discovery (no server, no browser)."""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import replace

import pytest

from specviz.errors import SpecvizError
from specviz.serving.limits import AppLimits
from specviz.serving.racing import RaceSettings, run_race
from specviz.ui.blocks import discover_tabs
from specviz.ui.panels import live_metrics, race_html
from specviz.ui.tokens import plain_text
from specviz.ui.why import glossary_html, why_markdown

THREE = ("prompt_lookup", "vanilla", "autoregressive")


def race_to_end(pair, settings, stop=None):
    *_, race = run_race(pair, settings, {}, stop or threading.Event())
    return race


def test_each_snapshot_of_a_race_stays_as_it_was_yielded(perturbed_pair):
    """The engine yields immutable snapshots: a later one never changes an earlier one (the tabs that
    hold one, and a listener that compares two, see what was true then), and none can be altered."""
    import dataclasses

    snapshots = list(
        run_race(perturbed_pair, RaceSettings("def f(x):", THREE, max_new_tokens=12), {}, threading.Event())
    )
    first, last = snapshots[0], snapshots[-1]
    assert [r.status for r in first.runs] == ["queued"] * 3 and not any(r.records for r in first.runs)
    assert [r.status for r in last.runs] == ["done"] * 3 and all(r.records for r in last.runs)
    assert len({id(s) for s in snapshots}) == len(snapshots)  # each change a new object: a change for gradio
    counts = [sum(len(r.records) for r in s.runs) for s in snapshots]
    assert counts == sorted(counts)  # records only ever arrive
    with pytest.raises(dataclasses.FrozenInstanceError):
        last.runs[0].status = "error"
    assert isinstance(last.runs, tuple) and isinstance(last.runs[0].records, tuple)


def test_a_race_runs_every_method_alone_in_registry_order(perturbed_pair):
    race = race_to_end(perturbed_pair, RaceSettings("def fibonacci(n):", THREE, max_new_tokens=20))
    assert [r.name for r in race.runs] == ["autoregressive", "vanilla", "prompt_lookup"]
    texts = set()
    for run in race.runs:
        assert run.status == "done" and sum(len(r.emitted) for r in run.records) == 20
        assert run.records[0].t_start >= 0 and all(a.t_end <= b.t_start for a, b in itertools.pairwise(run.records))
        texts.add(plain_text(run.spans))
    assert len(texts) == 1  # greedy: every method writes the autoregressive text
    assert race.runs[1].records[0].oracle_sl is not None
    html = race_html(race)
    assert (
        html.count("data-method=") == 3
        and html.count("data-end=") == 3
        and "sv-rejected" in html
        and "sv-accepted" in html
    )
    baseline = race.baseline_tokens_per_s()
    assert live_metrics(race.runs[1].records, baseline)["speedup"] == pytest.approx(
        live_metrics(race.runs[1].records)["tokens_per_s"] / baseline
    )
    why = why_markdown(race)  # under the board: the formula's reading of each drafting method, by its label
    assert f"| {race.runs[1].label} |" in why and f"| {race.runs[2].label} |" in why
    for run in race.runs[1:]:  # a run this shared machine's load disturbed is flagged, not explained
        line = next(x for x in why.split("\n") if x.startswith(f"- **{run.label}**: "))
        assert ("timing disturbed" in line) == bool(run.flags)
        assert run.flags or "tokens per iteration predicted by the formula" in line
    assert 'href="#sv-term-acceptance"' in html and 'id="sv-term-acceptance"' in glossary_html()


def test_methods_that_cannot_run_are_skipped_with_a_reason(perturbed_pair):
    no_draft = perturbed_pair.with_draft(None, name="no-draft")
    race = race_to_end(no_draft, RaceSettings("hello", ("autoregressive", "vanilla"), max_new_tokens=4))
    status = {r.name: (r.status, r.message) for r in race.runs}
    assert status["autoregressive"][0] == "done"
    assert status["vanilla"][0] == "skipped" and "draft model" in status["vanilla"][1]
    assert "needs a draft model" in race_html(race)


def test_stop_ends_the_race_and_keeps_what_ran(perturbed_pair, monkeypatch):
    from specviz.serving import runs

    # each record to the page at once: on the fast step the tiny pair makes its 400 tokens within one refresh
    monkeypatch.setattr(runs, "stream_records", functools.partial(runs.stream_records, refresh_s=0.0))
    stop = threading.Event()
    race = None
    for race in run_race(perturbed_pair, RaceSettings("hello", THREE, max_new_tokens=400), {}, stop):
        if race.runs[0].records:
            stop.set()
    first, *rest = race.runs
    assert first.status == "stopped" and 0 < sum(len(r.emitted) for r in first.records) < 400
    assert [r.status for r in rest] == ["skipped", "skipped"]
    assert "stopped before this method started" in rest[0].message


@pytest.mark.parametrize(
    "settings, message",
    [
        (RaceSettings("hi", ()), "no method selected"),
        (RaceSettings("   ", ("vanilla",)), "the prompt is empty"),
        (RaceSettings("hi", ("vanilla",), max_new_tokens=100000), "max new tokens must be from 1 to 512"),
        (
            RaceSettings("hi", ("vanilla",), options={"vanilla.speculation_length": 17}),
            "vanilla.speculation_length must be from 1 to 16",
        ),
        (
            RaceSettings("hi", ("sssd",), options={"sssd.speculation_length": 65}),
            "speculation_length must be from 1 to 64",
        ),
        (
            RaceSettings("hi", ("sssd",), options={"sssd.datastore": "/etc/passwd"}),
            "sssd has no option 'datastore' to set here",
        ),
        (RaceSettings("hi", ("vanilla",), options={"warp.speed": 3}), "unknown method 'warp'"),
        (RaceSettings("hi", ("disco",), options={"disco.threshold": "high"}), "threshold must be a number"),
        (
            RaceSettings("hi", ("disco",), options={"disco.max_speculation_length": "0"}),
            "max_speculation_length must be from 1",
        ),
        (RaceSettings("hi", ("vanilla",) * 50), "lists vanilla more than once"),
        (RaceSettings("hi " * 1100, ("vanilla",), max_new_tokens=8), "tokens long; a prompt here takes at most 1024"),
        (RaceSettings("hi", ("warp_drive",)), "unknown method 'warp_drive'"),
        (RaceSettings("hi", ("vanilla",), temperature=-1.0), "temperature"),
    ],
)
def test_bad_input_is_one_clear_error_before_anything_runs(perturbed_pair, settings, message):
    with pytest.raises(SpecvizError, match=message):
        next(run_race(perturbed_pair, settings, {}, threading.Event()))


def test_the_limits_are_the_apps_own(perturbed_pair):
    """A private deployment raises the limits; the model's context still bounds the prompt."""
    roomy = AppLimits(prompt_tokens=4096, max_new_tokens=1024, methods_per_race=1)
    with pytest.raises(SpecvizError, match="exceeds the model's context"):
        next(
            run_race(
                perturbed_pair,
                RaceSettings("hi " * 1500, ("vanilla",), max_new_tokens=1000),
                {},
                threading.Event(),
                roomy,
            )
        )
    with pytest.raises(SpecvizError, match="2 methods asked for; a race here takes at most 1"):
        next(run_race(perturbed_pair, RaceSettings("hi", ("autoregressive", "vanilla")), {}, threading.Event(), roomy))


def test_tabs_are_discovered_race_first_and_all_import():
    tabs, failures = discover_tabs()
    assert failures == []
    assert tabs[0].TAB_TITLE == "Race"
    for module in tabs:
        assert isinstance(module.TAB_TITLE, str) and isinstance(module.TAB_ORDER, int) and callable(module.build_tab)
    orders = [m.TAB_ORDER for m in tabs]
    assert len(set(orders)) == len(orders), f"two tabs share a TAB_ORDER (their order then rests on titles): {orders}"


def test_a_missing_default_draft_falls_back_to_tiny_random_and_says_how_to_get_it(monkeypatch, tmp_path):
    import specviz
    from specviz.models import default
    from specviz.ui.pairs import describe_pair, resolve_pair

    monkeypatch.setattr(default, "DRAFTS", tmp_path)  # no draft folder: fails before loading the target
    real = specviz.load_pair
    monkeypatch.setattr(
        specviz, "load_pair", lambda name, **kw: default.load_default_pair() if name == "default" else real(name, **kw)
    )
    pair, notice = resolve_pair("default")
    assert pair.name == "tiny-random"
    assert "draft is missing" in notice and "python -m specviz.train.draft" in notice
    assert describe_pair(pair, notice).startswith("⚠️ The default pair could not be loaded here")


def test_a_method_lossless_against_another_model_says_so_on_its_panel(random_pair, monkeypatch):
    """Streaming with an adapter whose LoRA moves the main stream says so; with one that leaves the
    main stream the target's (here the untrained one), its panel has no such note."""
    from specviz.methods import streaming as method
    from tests.test_streaming_model import CFG, perturbed

    settings = RaceSettings("def add(a, b):", ("autoregressive", "streaming"), max_new_tokens=8)
    race = race_to_end(random_pair, settings)
    assert not any(r.note for r in race.runs) and "Lossless against" not in race_html(race)
    monkeypatch.setitem(
        method._LOADED, random_pair.target, {"auto": perturbed(method.msa.StreamingLM(random_pair.target, CFG))}
    )
    race = race_to_end(random_pair, settings)
    streaming = next(r for r in race.runs if r.name == "streaming")
    assert "Lossless against its own fine-tuned target" in streaming.note
    assert "Lossless against" in race_html(race) and not next(r for r in race.runs if r.name == "autoregressive").note


def test_examples_come_from_shipped_suites_or_the_visitors_own_file(tmp_path):
    from specviz.ui.race import OWN, example_choices, example_text, own_prompts

    mine = tmp_path / "mine.txt"
    mine.write_text("first prompt\nsecond prompt\n")
    texts = own_prompts(str(mine))
    assert texts == ("first prompt", "second prompt")
    assert example_choices(OWN, texts) == [("1: first prompt", 0), ("2: second prompt", 1)]
    assert example_text(OWN, 1, texts) == "second prompt"
    assert example_text("humaneval", 0).startswith("Complete the following Python function")
    with pytest.raises(SpecvizError, match="unknown prompt suite"):  # a path sent as a suite name is never read
        example_text(str(mine), 0)
    big = tmp_path / "big.txt"
    big.write_text("x\n" * 600_000)
    with pytest.raises(SpecvizError, match="at most 1 MB"):
        own_prompts(str(big))


def test_each_method_runs_with_its_own_options(perturbed_pair):
    """No shared slider: SSSD runs at its own tree size, vanilla at its own γ, each as set for it."""
    from specviz.methods import get_method

    methods, prompt = (
        ("autoregressive", "vanilla", "sssd"),
        "one two three one two three one two three four five six four five six",
    )
    race = race_to_end(perturbed_pair, RaceSettings(prompt, methods, max_new_tokens=16))
    runs = {r.name: r for r in race.runs}
    assert runs["sssd"].options == {} and get_method("sssd").options().speculation_length == 8
    assert max(r.speculation_length for r in runs["sssd"].records) == 8  # its default S, not vanilla's γ
    assert max(r.speculation_length for r in runs["vanilla"].records) == 4
    options = {
        "vanilla.speculation_length": 2,
        "sssd.speculation_length": 5.0,
        "sssd.sources": "input",
        "disco.threshold": "",
    }
    race = race_to_end(perturbed_pair, RaceSettings(prompt, methods, max_new_tokens=16, options=options))
    runs = {r.name: r for r in race.runs}
    assert max(r.speculation_length for r in runs["vanilla"].records) == 2
    assert runs["sssd"].options == {"speculation_length": 5, "sources": "input"}
    assert max(r.speculation_length for r in runs["sssd"].records) == 5
    assert len({plain_text(r.spans) for r in race.runs}) == 1  # still the target's text


def test_the_option_widgets_come_from_the_options_classes():
    """Every tunable option gets a widget with its range, default and help; file paths get none."""
    import gradio as gr

    from specviz.methods import all_methods
    from specviz.ui.options import method_option_widgets

    with gr.Blocks():
        _, groups = method_option_widgets(all_methods(), AppLimits(), gr.CheckboxGroup(["sssd"]), ["sssd"])
    assert "autoregressive" not in groups and groups["sssd"].visible and not groups["vanilla"].visible

    def inside(block):
        for child in getattr(block, "children", []):
            yield child
            yield from inside(child)

    widgets = {(name, c.label): c for name, group in groups.items() for c in inside(group) if hasattr(c, "info")}
    size = widgets[("sssd", "speculation_length")]
    assert isinstance(size, gr.Slider) and (size.minimum, size.maximum, size.value) == (1, AppLimits().tree_nodes, 8)
    assert "tree nodes" in size.info
    assert (
        ("sssd", "datastore") not in widgets
        and ("streaming", "adapter") not in widgets
        and ("disco", "classifier") not in widgets
    )
    assert isinstance(widgets[("sssd", "sources")], gr.Dropdown) and isinstance(
        widgets[("pearl", "concurrent")], gr.Checkbox
    )
    assert widgets[("vanilla", "speculation_length")].maximum == AppLimits().speculation_length
    tuned = widgets[("disco", "threshold (empty: the tuned value)")]
    assert isinstance(tuned, gr.Textbox) and tuned.value == ""  # empty: the classifier's tuned τ


def test_an_online_learner_taken_back_by_the_server_is_named_on_its_panel(perturbed_pair, monkeypatch):
    """At most SPECVIZ_LIMIT_ADAPTED_DRAFTS learners keep their weights: a visitor whose learner gave
    its own back reads why on the OSD panel (its α starts over from the pair's draft)."""
    from specviz.serving import pools

    monkeypatch.setattr(pools.ADAPTED_DRAFTS, "capacity", 1)
    settings = RaceSettings("def add(a, b):", ("autoregressive", "osd"), max_new_tokens=12)
    mine, theirs = {}, {}
    for sessions in (mine, theirs):
        *_, race = run_race(perturbed_pair, settings, sessions, threading.Event())
        learner = sessions[(perturbed_pair.name, "osd")]
        learner.update()  # as after the 8th request: the learner takes weights of its own
    assert mine[(perturbed_pair.name, "osd")].releases == 1  # the other visitor's learner took its place
    *_, race = run_race(perturbed_pair, settings, mine, threading.Event())
    osd = {r.name: r for r in race.runs}["osd"]
    assert "took yours back 1 time(s)" in osd.note and "SPECVIZ_LIMIT_ADAPTED_DRAFTS" in race_html(race)
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())
    assert {r.name: r for r in race.runs}["osd"].note == ""  # a learner never taken back: no note


def test_osd_learns_across_a_visitors_races_and_a_failing_method_is_logged(random_pair, caplog, monkeypatch):
    """A visitor's 8th OSD request updates their draft inside the race (which steps runs under
    torch.inference_mode); a method that fails shows its error on its panel and logs its traceback."""
    settings = RaceSettings("def add(a, b):", ("osd",), max_new_tokens=6)
    sessions: dict = {}
    for _ in range(8):
        *_, race = run_race(random_pair, settings, sessions, threading.Event())
        assert race.runs[0].status == "done", race.runs[0].message
    learner = sessions[(random_pair.name, "osd")]
    assert learner.version == 1 and len(learner.updates) == 1

    def broken(samples):
        raise RuntimeError("boom")

    monkeypatch.setattr(learner, "_train", broken)
    learner._last_update_at -= 8  # the next request is due for an update
    *_, race = run_race(random_pair, settings, sessions, threading.Event())
    assert race.runs[0].status == "error" and "boom" in race.runs[0].message
    assert any(r.name == "specviz.serving.runs" and r.exc_info for r in caplog.records)


def test_a_races_tensor_work_is_all_on_the_models_thread(perturbed_pair, monkeypatch):
    """A method's run (its caches) and an online learner (a copy of the draft) are made where the run is stepped:
    one torch.zeros for a KV cache in the page's thread gave it an OpenMP team of its own, and every later
    decoding step of the default target was ~1.6x slower on a 2-core machine (specviz.serving.threads)."""
    import specviz
    import specviz.methods
    from specviz.serving.threads import MODELS

    where: list[tuple[str, str]] = []

    def spy(module, name):
        fn = getattr(module, name)

        def called(*args, **kwargs):
            where.append((name, threading.current_thread().name))
            return fn(*args, **kwargs)

        monkeypatch.setattr(module, name, called)

    spy(specviz, "run")
    spy(specviz.methods, "new_session")
    race_to_end(perturbed_pair, RaceSettings("def add(a, b):", ("autoregressive", "vanilla", "osd"), max_new_tokens=6))
    assert {name for name, _ in where} == {"run", "new_session"}
    assert {thread for _, thread in where} == {MODELS}, where


def test_a_bfloat16_race_calls_each_parting_from_the_target_a_tie():
    """Greedy methods repeat the target alone's tokens; in bfloat16 some part at a tie of that dtype,
    and their panels say so (specviz.parity), never 'a fault'. Which method parts where depends on the
    CPU's bfloat16 kernels (an AMD EPYC parts vanilla at token 49 of the first prompt, an Intel Xeon the
    heuristic there), so two prompts and three methods: some part on either."""
    import torch

    from specviz.models.tiny import tiny_pair

    pair = tiny_pair(dtype=torch.bfloat16, draft="perturbed")
    notes = []
    for prompt in ("Once upon a time", "Hello world"):
        methods = ("autoregressive", "vanilla", "heuristic", "sssd")
        notes += [r.note for r in race_to_end(pair, RaceSettings(prompt, methods, max_new_tokens=64)).runs]
    parted = [note for note in notes if "parts from the target alone's at token" in note]
    assert parted and all("tied in bfloat16" in note for note in parted)
    assert not any("a fault in specviz" in note for note in notes)


def test_a_float32_race_adds_no_parity_note(perturbed_pair):
    race = race_to_end(
        perturbed_pair, RaceSettings("Once upon a time", ("autoregressive", "vanilla", "sssd"), max_new_tokens=64)
    )
    assert not any("parts from the target" in r.note for r in race.runs)


def test_an_output_that_parts_for_real_is_called_a_fault():
    from specviz.serving.racing import parity_note
    from specviz.serving.runs import Parity

    assert "a fault in specviz" in parity_note(Parity("differs", 3), "float32")
    assert parity_note(Parity("same", None), "float32") == ""


def test_the_app_loads_its_pairs_in_the_dtype_it_was_started_with():
    from specviz.ui.pairs import Placement, describe_pair, resolve_pair

    pair, _ = resolve_pair("tiny-perturbed", placement=Placement(device="cpu", dtype="bfloat16"))
    assert pair.info["dtype"] == "bfloat16"
    assert "In bfloat16 two of the target's logits are often equal" in describe_pair(pair)
    pair, _ = resolve_pair("tiny-perturbed")
    assert pair.info["dtype"] == "float32" and "equal within rounding" not in describe_pair(pair)


def retimed(records, step_ms: float, per_token_ms: float = 0.05, verify_growth: float = 0.08, scale: float = 1.0):
    """The records with the timings of a quiet machine (issue 38): a target pass over n tokens takes
    step_ms × (1 + verify_growth × (n − 1)), a drafted token per_token_ms; `scale` multiplies every
    time (a run slowed or hurried by other load)."""
    from dataclasses import replace

    out, t = [], 0.0
    for r in records:
        n = 1 + len((r.tree() and r.tree().tree_tokens) or r.drafted)
        verify = scale * step_ms * (1 + verify_growth * (n - 1)) * max(1, r.target_forwards)
        draft = scale * per_token_ms * len(r.drafted) if r.draft_forwards else 0.0
        out.append(replace(r, t_start=t, t_end=t + (verify + draft) / 1e3, verify_ms=verify, draft_ms=draft))
        t += (verify + draft) / 1e3
    return out


def timed_race(pair, scale: dict[str, float] | None = None, methods=("autoregressive", "vanilla", "prompt_lookup")):
    """A race of the tiny pair whose timings are a quiet machine's, each method's scaled by `scale`."""
    race = race_to_end(pair, RaceSettings("def fibonacci(n):", methods, max_new_tokens=24))
    for run in race.runs:
        records = retimed(run.records, 10.0, scale=(scale or {}).get(run.name, 1.0))
        race = race.with_run(replace(run, records=tuple(records), probe_ms=None, flags=()))
    return race


def test_timing_that_load_disturbed_is_flagged_and_clean_timing_is_not(perturbed_pair):
    """Issue 38 item 2: figures that cannot be a method's (a verification cheaper than one step, a speedup
    above tokens per pass ÷ verify cost, the target alone slower or faster right before a method) are
    flagged on the run's panel, in the why table and in the verdict; a quiet machine's are not."""
    from dataclasses import replace

    from specviz.serving.timing import timing_flags
    from specviz.ui.race import winner_words
    from specviz.ui.verdict import verdict_markdown

    clean = timed_race(perturbed_pair)
    assert timing_flags(clean) == {}
    hurried = timed_race(perturbed_pair, {"prompt_lookup": 0.4})  # as if other load had slowed the baseline
    flags = timing_flags(hurried)
    assert list(flags) == ["prompt_lookup"] and any("cannot cost less than one" in f for f in flags["prompt_lookup"])
    slow_baseline = timed_race(perturbed_pair, {"autoregressive": 2.5})  # every method looks fast
    assert set(timing_flags(slow_baseline)) == {"vanilla", "prompt_lookup"}
    stalled = timed_race(perturbed_pair)  # load came and went while vanilla ran: one of its passes 5× slower
    run = stalled.runs[1]
    slowed = tuple(replace(r, verify_ms=5 * r.verify_ms) if i == 2 else r for i, r in enumerate(run.records))
    stalled = stalled.with_run(replace(run, records=slowed))
    assert list(timing_flags(stalled)) == ["vanilla"] and "twice as slow" in timing_flags(stalled)["vanilla"][0]
    probed = timed_race(perturbed_pair)
    probed = probed.with_run(replace(probed.runs[1], probe_ms=20.0))  # the target alone 2× as slow right before vanilla
    assert list(timing_flags(probed)) == ["vanilla"]
    hurried = hurried.flagged(flags)
    assert "timing disturbed by other load: re-run" in race_html(hurried)
    assert race_html(clean).count("sv-flag") == 0 and race_html(hurried).count('class="sv-flag"') == 1
    assert "timing disturbed" in why_markdown(hurried) and "timing disturbed" not in why_markdown(clean)
    assert "Prompt lookup" not in verdict_markdown(hurried).split("\n")[0]  # a disturbed run never wins
    # the status line says the disturbed run is left out: its panel may show a speedup above the winner's
    assert winner_words(hurried).endswith("(1 run with disturbed timing ⚠️ not ranked)")
    assert "not ranked" not in winner_words(clean)


def test_every_race_ends_with_a_verdict_fastest_first(perturbed_pair):
    """Issue 38 item 10: the summary sorted by speedup with the winner marked, one sentence per method
    from its α, c and verify cost, and the status line names the winner."""
    from specviz.plots.summary import WINNER, summary_table
    from specviz.ui.race import winner_words
    from specviz.ui.verdict import ranking, verdict_markdown

    race = timed_race(perturbed_pair)
    ranked = ranking(race)
    speedups = [s for _, s in ranked]
    assert speedups == sorted(speedups, reverse=True) and len(ranked) == 3
    table = summary_table({r.name: r.records for r in race.runs}, {r.name: r.label for r in race.runs})
    assert list(table["method"]) == [r.label for r, _ in ranked] and table["place"].iloc[0] == WINNER
    assert list(table["speedup vs AR (×)"]) == sorted(table["speedup vs AR (×)"], reverse=True)
    verdict = verdict_markdown(race)
    best = ranked[0][0]
    assert verdict.startswith("**Verdict:") and best.label in verdict.split("\n")[0]
    lines = [line for line in verdict.split("\n") if line.startswith("- **")]
    assert [line.split("**")[1] for line in lines] == [r.label for r, _ in ranked]
    for line, (run, speedup) in zip(lines, ranked, strict=True):
        if run.name == "autoregressive":
            assert "baseline" in line
        else:  # its measured α, c and verify cost, and the verb the measured speedup gives
            assert "α = " in line and "c = " in line and "verifying" in line and "by these counts" in line
            verb = "gains" if speedup >= 1.05 else "loses" if speedup <= 0.95 else "breaks about even"
            assert f": {verb}:" in line
    assert best.label in winner_words(race) or "no method beat the target alone" in winner_words(race)


def test_the_verdict_places_the_prompt_against_the_shipped_benchmarks(perturbed_pair):
    """The shipped speedups (vanilla 1.36× over 40 prompts, benchmarks/fast-target/leaderboard), as the
    Leaderboard tab reads them, are where a default-pair race's prompt is placed."""
    from specviz.ui.verdict import shipped_speedups, verdict_markdown

    shipped = shipped_speedups("default")
    assert round(shipped["vanilla"].overall, 2) == 1.36 and len(shipped["vanilla"].per_prompt) == 40
    assert shipped["sssd"].folder == "fast-target/leaderboard" and len(shipped["sssd"].per_prompt) == 40
    assert shipped_speedups("tiny-perturbed") == {}
    race = replace(timed_race(perturbed_pair), pair="default")
    verdict = verdict_markdown(race)
    assert (
        "1.36× on average over its 40 HumanEval, GSM8K, MT-Bench and MBPP prompts in the shipped benchmarks" in verdict
    )
    assert "benchmarks/" not in verdict  # a learner reads suites, not folders
    assert "prompt for it" in verdict and "loosely" in verdict


def test_the_pearl_tab_races_within_the_limit_against_the_target_alone(perturbed_pair, monkeypatch):
    """Issue 38 item 5: Theorem 1's window above the Race's limit is held to it (one above is refused),
    the target alone has a row, vanilla runs at its own default γ, whitespace tokens are visible."""
    from specviz.methods import pearl_lanes
    from specviz.ui import pearl as tab

    with pytest.raises(SpecvizError, match="at most 16 tokens"):
        tab.compare(perturbed_pair, "def f(x):", window=17, concurrent=False, max_new_tokens=8, repeats=1)
    monkeypatch.setattr(pearl_lanes, "optimal_window", lambda pair: 23)
    out = tab.compare(perturbed_pair, "def f(x):\n", window=0, concurrent=False, max_new_tokens=12, repeats=1)
    assert [r["method"] for r in out["rows"]] == ["target alone", "vanilla (γ=4, its default)", "PEARL (γ=16)"]
    assert out["rows"][0]["× target alone"] == "1.00×" and all(r["tokens"] == 12 for r in out["rows"])
    assert "Theorem 1's window, 23, is above the Race's limit of 16" in out["window"]
    assert all(list(r) == tab.ROW_COLUMNS for r in out["rows"])
    cells = [s[k] for s in out["steps"] for k in ("verified drafts", "emitted", "dropped / drafted ahead")]
    assert all(cells) and not any(c != c.strip() or " " in c or "\n" in c for c in cells)  # ·, ⏎, ∅: never blank
    assert out["steps"][0]["step"] == 1


def _race_tab(**ctx_overrides):
    """The Race tab built alone: its Blocks and its handlers by name."""
    import gradio as gr

    from specviz.ui import race as tab
    from tests.conftest import tab_context

    with gr.Blocks() as demo:
        tab.build_tab(tab_context(**ctx_overrides))
    return demo, {f.fn.__name__: f for f in demo.fns.values() if f.fn is not None}


def test_the_race_tab_bounds_its_seed_its_prompt_and_its_saved_race_parses():
    """Issue 41: the seed box had no bounds (a seed past 2**63 - 1 reached torch), a megabyte prompt
    was tokenised before its refusal, and any number of saved races could parse at once."""
    import gradio as gr

    from specviz.limits import MAX_SEED

    resolved: list[str] = []
    demo, fns = _race_tab(resolve=lambda name: resolved.append(name) or (None, None))
    seed = next(b for b in demo.blocks.values() if getattr(b, "label", None) == "Seed")
    assert (seed.minimum, seed.maximum) == (0, MAX_SEED)
    with pytest.raises(gr.Error):
        seed.preprocess(-1)
    assert seed.preprocess(MAX_SEED) == MAX_SEED
    race = fns["race"].fn
    with pytest.raises(gr.Error, match="the prompt is 1000000 characters long; a prompt here is at most 32768"):
        next(race("tiny-random", "x " * 500_000, ["autoregressive"], {}, 8, 0.0, 1.0, 0, None, {}))
    assert not resolved  # refused before the pair was looked up, let alone the prompt tokenised
    assert fns["load_saved"].api_name == "load_race" and fns["load_saved"].concurrency_limit == 1


@pytest.mark.parametrize(
    "temperature, message",
    [
        (1e-45, r"temperature must be 0 \(greedy\) or at least 1e-30, got 1e-45"),
        (float("nan"), "temperature must be from 0 to 100, got nan"),
        ("warm", "temperature must be a number, got 'warm'"),
    ],
)
def test_the_race_settings_refuse_a_bad_temperature_in_one_line(temperature, message):
    from specviz.ui.race import settings_from_widgets

    with pytest.raises(SpecvizError, match=message):
        settings_from_widgets("hi", ["vanilla"], {}, 8, temperature, 1.0, 0)
    assert settings_from_widgets("hi", ["vanilla"], {}, 8, 0.7, 1.0, 0).temperature == 0.7


def test_panels_name_what_a_method_chose_and_a_run_that_drafted_nothing(perturbed_pair):
    """Issue 38 leftover 3: PEARL's panel said "window = 0 (default)" without what 0 means or the window
    that ran; DISCO's said "threshold = tuned" for its tuned τ and SL_max; prompt lookup with no match
    showed an acceptance of none drafted as "–" without a word."""
    import re

    from specviz.models.disco import classifier_for
    from specviz.ui.panels import panel_html

    race = race_to_end(
        perturbed_pair, RaceSettings("hello", ("autoregressive", "prompt_lookup", "pearl", "disco"), max_new_tokens=4)
    )
    assert race.pair == perturbed_pair.name
    html = race_html(race)
    panels = dict(re.findall(r'data-method="(\w+)".*?class="sv-paper">([^<]*)<', html))
    runs = {r.name: r for r in race.runs}
    window = runs["pearl"].records[-1].pearl().window
    assert (
        f"window = {window} (the default 0: auto, round(T_target ÷ T_draft), measured for this pair)" in panels["pearl"]
    )
    tuned = classifier_for(perturbed_pair.name)
    assert f"threshold = {tuned.threshold} (tuned for this pair, the default)" in panels["disco"]
    assert f"max_speculation_length = {tuned.max_speculation_length} (tuned for" in panels["disco"]
    assert "tuned (default)" not in html and "window = 0" not in html
    lookup = panel_html(runs["prompt_lookup"], race.baseline_tokens_per_s(), 4)
    assert sum(len(r.drafted) for r in runs["prompt_lookup"].records) == 0  # "hello": nothing to copy
    assert "Drafted nothing in this race: no n-gram" in lookup and "<b>none drafted</b>" in lookup
    assert "Drafted nothing" not in html.replace(lookup, "")  # the methods that drafted show their acceptance


def test_the_summary_pivots_for_a_phone_every_figure_a_few_methods_a_table(perturbed_pair):
    """Issue 38 item 9: at 390 px the summary's twelve columns were cut from "place" on. A phone shows it
    pivoted (specviz.ui.phone): a row a figure in the table's order, a column a method under a short name
    with the full one as its tooltip, at most PHONE_METHODS methods a table."""
    import html
    import re

    from specviz.methods import all_methods, get_method
    from specviz.plots.summary import summary_table
    from specviz.ui.race import PHONE_METHODS, speedup_first, summary_pivot

    settings = RaceSettings("def f(x):", ("autoregressive", "vanilla", "prompt_lookup"), max_new_tokens=8)
    *_, race = run_race(perturbed_pair, settings, {}, threading.Event())
    labels = {r.name: r.label for r in race.runs}
    table = speedup_first(summary_table({r.name: r.records for r in race.runs}, labels))
    shown = summary_pivot(table)
    assert 'id="sv-summary-pivot"' in shown and shown.count("<table>") == 1
    heads = re.findall(r'<th scope="col" title="([^"]+)">([^<]+)</th>', shown)
    assert heads == [
        (label, get_method(name).short_label)
        for name, label in zip(table["method"].map({v: k for k, v in labels.items()}), table["method"], strict=True)
    ]
    rows = [html.unescape(r) for r in re.findall(r'<th scope="row">([^<]+)</th>', shown)]
    assert rows == [c for c in table.columns if c != "method"]  # every figure, "place" and "stop" included
    assert summary_pivot(speedup_first(summary_table({}))) == ""  # before a race: nothing on a phone either
    names = [s.label for s in all_methods()]
    every = table.loc[[0] * len(names)].assign(method=names)  # a race of every method
    tables = summary_pivot(every).split("<table>")[1:]
    assert len(tables) == -(-len(names) // PHONE_METHODS) and all(t.count(' title="') <= PHONE_METHODS for t in tables)
    assert all(len(s.short_label) <= 7 or " " in s.short_label for s in all_methods())  # ~65 px a column


@pytest.fixture
def records_at_the_end():
    """A method that, as a speculative vLLM row does, records its steps only when its run ends and hands
    its tokens to the run's `preview` as they come. Its records wait until the race has shown them."""
    from specviz import methods
    from specviz.cost.families import CHAIN
    from specviz.methods.autoregressive import NoOptions, autoregressive

    shown = threading.Event()

    def held_back(dec, opts):
        records = []
        for record in autoregressive(dec, opts):
            records.append(record)
            if dec.preview is not None:
                dec.preview(record.emitted)
        assert shown.wait(30), "the race never showed the streamed tokens"
        yield from records

    methods.register(
        "toy-held-back",
        label="Held back (toy)",
        description="Its records at the end.",
        paper="this test",
        options=NoOptions,
        family=CHAIN,
        rank=13,
    )(held_back)
    yield "toy-held-back", shown
    methods._REGISTRY.pop("toy-held-back")


def test_tokens_streamed_before_their_records_show_uncoloured_then_give_way(perturbed_pair, records_at_the_end):
    """A run whose records come only at its end (a speculative vLLM row) still streams: its panel shows
    the tokens that arrived, uncoloured, with why; its records replace them."""
    name, shown = records_at_the_end
    settings = RaceSettings("def f(x):", ("autoregressive", name), max_new_tokens=10)
    seen = []
    for race in run_race(perturbed_pair, settings, {}, threading.Event()):
        run = race.runs[1]
        if run.streamed_tokens:
            seen.append((run.streamed_tokens, run.streamed_text, race_html(race)))
            if run.streamed_tokens == 10:
                shown.set()
    assert seen and not race.runs[1].streamed_tokens and race.runs[1].status == "done"
    output = [t for r in race.runs[0].records for t in r.emitted]
    assert [t for r in race.runs[1].records for t in r.emitted] == output  # its records: the same tokens
    count, text, board = seen[-1]
    assert count == 10 and text == plain_text(race.runs[1].spans)  # the streamed text is the recorded one
    assert "10 tokens streamed so far, not yet coloured" in board and 'class="sv-streamed"' in board
    assert 'class="sv-streamed"' not in race_html(race)
