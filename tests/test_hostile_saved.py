"""Saved races from a hostile visitor (issue 53): a file holding more than a race here can is refused
before its records are checked, every computation on a loaded race is linear in it (no median taken
per pass), values no race of this app writes are refused, and a stranger's texts reach the page as
text, never as HTML or Markdown."""

from __future__ import annotations

import copy
import json
import statistics
import threading
from typing import Any

import plotly.graph_objects as go
import pytest

from specviz.errors import SpecvizError
from specviz.methods import method_names
from specviz.records import IterationRecord
from specviz.serving.limits import AppLimits
from specviz.serving.saved import MAX_FILE_BYTES, VOCABULARIES, load_race, race_from_dict, race_to_dict
from specviz.tools.hostile_races import big_race
from specviz.ui.panels import md_text

METHODS = tuple(method_names())
LIMITS = AppLimits()  # a public page's: 512 new tokens, 14 methods, 1024 prompt tokens


@pytest.fixture(scope="module")
def saved(perturbed_pair):
    """An honest race (through JSON, as a file holds it), PEARL's intervals included."""
    from specviz.serving.racing import RaceSettings, run_race

    settings_ = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla", "pearl"), max_new_tokens=12)
    race = list(run_race(perturbed_pair, settings_, {}, threading.Event()))[-1]
    return json.loads(json.dumps(race_to_dict(race)))


def edited(data: dict, edit) -> dict:
    out = copy.deepcopy(data)
    edit(out)
    return out


@pytest.fixture
def checked_records(monkeypatch):
    """How many records `IterationRecord.from_dict` checked (the loader's per-record work)."""
    calls = []
    check = IterationRecord.from_dict.__func__

    def counting(cls, *args, **kwargs):
        calls.append(1)
        return check(cls, *args, **kwargs)

    monkeypatch.setattr(IterationRecord, "from_dict", classmethod(counting))
    return calls


@pytest.fixture
def median_items(monkeypatch):
    """How many values every `statistics.median` call sorted, summed (a median per pass was n² of them)."""
    seen = []
    median = statistics.median

    def counting(data):
        data = list(data)
        seen.append(len(data))
        return median(data)

    monkeypatch.setattr(statistics, "median", counting)
    return seen


# ----- 1. the work a file asks for: bounded before it is done, linear once it is -----------------------------


def test_the_builder_writes_valid_races_of_the_size_asked(tmp_path):
    for kind in ("autoregressive", "vanilla"):
        path = big_race(tmp_path / f"{kind}.json", kind, mb=1)
        assert 0.9 * 2**20 < path.stat().st_size <= 2**20
        data = json.loads(path.read_text())
        raised = AppLimits(max_new_tokens=data["max_new_tokens"])  # a private deployment's, raised to fit it
        race = load_race(path, METHODS, 14, limits=raised)
        assert [len(r.records) for r in race.runs] == [data["max_new_tokens"]] * len(race.runs) and data[
            "max_new_tokens"
        ] > LIMITS.max_new_tokens
    within = big_race(tmp_path / "within.json", "vanilla", mb=2, limits=LIMITS)
    assert 1.9 * 2**20 < within.stat().st_size <= 2 * 2**20
    assert len(load_race(within, METHODS, 14, limits=LIMITS).runs) >= 2


def test_a_file_holding_more_records_than_a_race_here_is_refused_before_any_is_checked(tmp_path, checked_records):
    """The probe's 58,001-record run: 78 s of CPU and counting. A run of at most max_new_tokens new tokens has
    at most that many iterations (each writes a token or more), and the race at most the app's new tokens."""
    path = big_race(tmp_path / "ar.json", "autoregressive", mb=1)  # ~2,400 records, max_new_tokens to match
    with pytest.raises(SpecvizError, match=r"'max_new_tokens' must be a whole number from 1 to 512 \(the most"):
        load_race(path, METHODS, 14)  # the default limits
    data = json.loads(path.read_text())
    data["max_new_tokens"] = data["options"]["max_new_tokens"] = 512
    with pytest.raises(SpecvizError, match=r"run 0 \('autoregressive'\) has \d+ iterations; a run of at most 512"):
        race_from_dict(data, METHODS, 14)
    assert not checked_records


def test_a_run_with_more_tokens_to_show_than_a_race_here_is_refused_before_its_records(tmp_path, checked_records):
    path = big_race(tmp_path / "within.json", "vanilla", mb=1, limits=LIMITS)
    data = json.loads(path.read_text())
    run = data["runs"][1]
    run["spans"] *= 33_280 // len(run["spans"]) + 1  # a 512-token race shows at most 512 × (1 + 64) tokens a run
    with pytest.raises(SpecvizError, match=r"run 1 \('vanilla'\) has \d+ tokens to show; .* at most 33280"):
        race_from_dict(data, METHODS, 14)
    assert not checked_records


def test_a_deployment_that_raises_its_limits_loads_larger_races(tmp_path):
    path = big_race(tmp_path / "ar.json", "autoregressive", mb=0.25)
    n = json.loads(path.read_text())["max_new_tokens"]
    with pytest.raises(SpecvizError, match="max_new_tokens"):
        load_race(path, METHODS, 14)
    assert len(load_race(path, METHODS, 14, limits=AppLimits(max_new_tokens=n)).runs[0].records) == n


def test_what_the_board_computes_from_a_loaded_race_sorts_each_pass_size_once(tmp_path, median_items):
    """`stalled_share` took the median of a pass size's times once per pass: n² values sorted (2k / 4k / 8k
    records: 0.16 / 1.19 / 7.56 s). Everything the board draws, counted in the values the medians sort."""
    from specviz.serving.timing import timing_flags
    from specviz.ui.race import race_outputs
    from specviz.ui.verdict import verdict_markdown
    from specviz.ui.why import why_markdown

    path = big_race(tmp_path / "vanilla.json", "vanilla", mb=1)  # ~750 records a run, one pass size each
    n = json.loads(path.read_text())["max_new_tokens"]
    race = load_race(path, METHODS, 14, limits=AppLimits(max_new_tokens=n))
    flags = timing_flags(race)
    verdict_markdown(race, flags), why_markdown(race), race_outputs(race)
    records = sum(len(r.records) for r in race.runs)
    assert 0 < sum(median_items) <= 10 * records, (sum(median_items), records)


@pytest.fixture(scope="module")
def load_saved():
    """The Race tab's 'Load a saved race' handler (`/load_race`), as gradio calls it, under the default limits."""
    from specviz.ui import build_app

    demo = build_app(pair="tiny-perturbed", limits=LIMITS)
    return next(
        f.fn
        for f in demo.fns.values()
        if getattr(f.fn, "__module__", None) == "specviz.ui.race" and f.fn.__name__ == "load_saved"
    )


def test_the_largest_race_the_loader_takes_loads_through_the_handler_in_one_pass(
    load_saved, tmp_path_factory, checked_records, median_items
):
    """16 MB (MAX_FILE_BYTES) of drafting runs at the default limits' bounds: every record checked once, the
    board, verdict, why-panel, plots and downloads drawn, the medians linear (measured: about 4 s here)."""
    path = big_race(tmp_path_factory.mktemp("big") / "race.json", "vanilla", mb=MAX_FILE_BYTES / 2**20, limits=LIMITS)
    assert 15.5 * 2**20 < path.stat().st_size <= MAX_FILE_BYTES
    data = json.loads(path.read_text())
    records = sum(len(r["records"]) for r in data["runs"])
    outputs = list(load_saved(str(path)))
    assert outputs and len(checked_records) == records
    assert sum(median_items) <= 10 * records
    race = next(v for v in outputs[-1].values() if type(v).__name__ == "Race")
    assert [r.name for r in race.runs] == [r["name"] for r in data["runs"]]


# ----- 2. values no race of this app writes ----------------------------------------------------------------

TOKEN_IDS = {
    "prompt_ids": lambda d, t: d["prompt_ids"].__setitem__(0, t),
    "'emitted'": lambda d, t: d["runs"][0]["records"][0].update(emitted=[t]),
    "'drafted'": lambda d, t: first_draft(d["runs"][1]["records"], t),
    "'token_id'": lambda d, t: d["runs"][1]["spans"][0].update(token_id=t),
}


def first_draft(records: list[dict], token: int) -> None:
    """Make a run's first draft `token` (in 'emitted' too where it was accepted: an accepted draft is written)."""
    r = records[0]
    r["drafted"][0] = token
    if r["accepted"]:
        r["emitted"][0] = token


@pytest.mark.parametrize("token", [512, 99_999, 10**15])
@pytest.mark.parametrize("where", TOKEN_IDS)
def test_a_token_id_past_the_pairs_vocabulary_is_refused(saved, where, token):
    """The tiny pair's vocabulary is 512: ids 99,999 and 10^15 loaded silently (and drew as '#99999')."""
    assert saved["pair"] == "tiny-perturbed" and VOCABULARIES["tiny-perturbed"] == 512
    data = edited(saved, lambda d: TOKEN_IDS[where](d, token))
    with pytest.raises(SpecvizError, match=rf"{where}.*(below|from 0 to 511)"):
        race_from_dict(data, METHODS, 14)


def test_an_unknown_pairs_ids_are_bounded_by_the_largest_vocabulary_of_the_pairs_known(saved):
    from specviz.models.pair import pair_names
    from specviz.models.tiny import TINY_VOCAB
    from specviz.ui.pairs import TINY_VARIANTS

    assert set(pair_names()) | set(TINY_VARIANTS) <= set(VOCABULARIES)  # every pair the server knows by name
    assert VOCABULARIES["tiny-random"] == TINY_VOCAB
    hub = edited(saved, lambda d: d.update(pair="org/target,org/draft", prompt_ids=[99_999] * len(d["prompt_ids"])))
    assert race_from_dict(hub, METHODS, 14).prompt_ids[0] == 99_999
    hub["prompt_ids"][0] = 10**15
    with pytest.raises(SpecvizError, match="152064, the largest vocabulary"):
        race_from_dict(hub, METHODS, 14)


def test_a_prompt_past_the_apps_prompt_limits_is_refused_before_the_records(saved, tmp_path, checked_records):
    """A 15 MB prompt loaded; the Race tab takes at most 1024 tokens (32,768 characters)."""
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps(edited(saved, lambda d: d.update(prompt="x" * (15 * 2**20)))))
    with pytest.raises(SpecvizError, match="prompt does not fit this app's limits: the prompt is 15728640 characters"):
        load_race(path, METHODS, 14)
    with pytest.raises(SpecvizError, match=r"prompt does not fit .* 1025 tokens long"):
        race_from_dict(edited(saved, lambda d: d.update(prompt_ids=[5] * 1025)), METHODS, 14)
    assert not checked_records


TIMES = {
    "'t_end', 'draft_ms' and 'verify_ms' must be within a day": [
        lambda d: d["runs"][1]["records"][-1].update(t_end=1e308),
        lambda d: d["runs"][1]["records"][0].update(draft_ms=1e308),
        lambda d: d["runs"][0]["records"][0].update(verify_ms=1e308),
    ],
    "'probe_ms' must be a number of milliseconds from 0 to a day": [lambda d: d["runs"][1].update(probe_ms=1e308)],
    "to a day|within a day": [
        lambda d: d["runs"][2]["records"][0]["extra"]["target_intervals"][0].__setitem__(1, 1e308),
        lambda d: d["runs"][2]["records"][0]["extra"].update(ideal_s=1e308),
    ],
    "a run's records follow one another": [
        lambda d: d["runs"][1]["records"][1].update(t_start=0.0),
        lambda d: d["runs"][1]["records"].reverse(),
    ],
}


@pytest.mark.parametrize(("message", "k"), [(m, k) for m, edits in TIMES.items() for k in range(len(edits))])
def test_a_time_no_run_can_take_is_refused(saved, message, k):
    """A record time of 1e308 s (valid as a float) loaded; a run's times fall within a day, in order."""
    assert saved["runs"][2]["name"] == "pearl"
    data = edited(saved, TIMES[message][k])
    with pytest.raises(SpecvizError, match=message):
        race_from_dict(data, METHODS, 14)


@pytest.mark.parametrize(
    ("message", "edit"),
    [
        ("'p' and 'q' must be probabilities", lambda d: d["runs"][1]["spans"][0].update(p=5.0)),
        ("'label' is 3000 characters long", lambda d: d["runs"][1].update(label="x" * 3000)),
        ("'pair' is 3000 characters long", lambda d: d.update(pair="x" * 3000)),
        ("'options': top_p must be from 0 to 1", lambda d: d["options"].update(top_p=1e18)),
        ("'options': temperature", lambda d: d["options"].update(temperature=1e-300)),
    ],
)
def test_another_value_no_race_here_writes_is_refused(saved, message, edit):
    with pytest.raises(SpecvizError, match=message):
        race_from_dict(edited(saved, edit), METHODS, 14)


def test_an_honest_race_still_loads(saved):
    race = race_from_dict(saved, METHODS, 14)
    assert [r.name for r in race.runs] == ["autoregressive", "vanilla", "pearl"]
    assert json.loads(json.dumps(race_to_dict(race))) == saved


# ----- 3. a stranger's texts are text ----------------------------------------------------------------------

TAG = "<img src=x onerror=alert(4)>"
MARKDOWN = "**big** [link](javascript:alert(5)) `code` | cell ~~gone~~ $$x$$"


def hostile(data: dict) -> dict:
    """Every text of a saved race that the page shows, made markup."""

    def edit(d):
        d["pair"] = f"tiny {TAG}"
        for run in d["runs"]:
            run.update(label=f"{run['label']} {TAG} {MARKDOWN}", paper=TAG, note=TAG, message=TAG, flags=[TAG])
            for span in run["spans"]:
                span.update(text=TAG, role=TAG)

    return edited(data, edit)


def texts(value: Any):
    """Every string in an output: HTML, Markdown, a figure's JSON, an update's fields (not a dropdown's
    choices: gradio shows their labels as text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, go.Figure):
        yield from texts(value.to_plotly_json())
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "choices":
                yield from texts(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from texts(v)


def test_a_saved_races_texts_reach_the_page_escaped(load_saved, saved, tmp_path):
    """A run label `<img src=x onerror=alert(4)>` drew three <img> elements in the Verdict and Why panels."""
    import gradio as gr

    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(hostile(saved)))
    outputs = list(load_saved(str(path)))
    board = outputs[-1]
    shown = [s for component, value in board.items() if not hasattr(value, "to_csv") for s in texts(value)]
    assert shown and not [s for s in shown if "<img" in s]
    assert any("&lt;img src=x onerror=alert(4)&gt;" in s for s in shown)  # shown, as text
    markdown = [s for component, value in board.items() if isinstance(component, gr.Markdown) for s in texts(value)]
    said = "\n".join(markdown)
    assert "Vanilla SD" in said and "[link](" not in said and "**big**" not in said and "$$x$$" not in said
    assert md_text(MARKDOWN) in said


def test_the_step_through_and_theory_figures_of_a_loaded_race_escape_its_texts(saved):
    from specviz.plots.animation import iteration_animation
    from specviz.plots.speedup import predicted_vs_measured_speedup_figure
    from specviz.plots.step import step_distributions
    from specviz.stepthrough import explain_iteration
    from specviz.ui.stepthrough import span_texts, step_html
    from specviz.ui.why import explain_race

    race = race_from_dict(hostile(saved), METHODS, 14)
    shown = list(texts(predicted_vs_measured_speedup_figure(explain_race(race))))
    for run in race.runs:
        words = span_texts(race, run.name)
        step = explain_iteration(
            run.records, 0, race.prompt_ids, race.options, token_text=lambda t, w=words: w.get(t, "?")
        )
        shown += [step_html(step, run.label)]
        shown += [*texts(step_distributions(step, run.label)), *texts(iteration_animation(step, run.label))]
    assert not [s for s in shown if "<img" in s]
    assert any("&lt;img" in s for s in shown)


def test_md_text_leaves_plain_words_alone_and_makes_markup_text():
    assert md_text("Oracle SL (upper bound)") == "Oracle SL (upper bound)"
    assert md_text("a*b_c [x](y) | `z`\n# h <b>") == r"a\*b\_c \[x\](y) \| \`z\` # h &lt;b&gt;"


def test_a_leaderboard_error_quoting_a_visitors_value_is_text():
    from specviz.ui.leaderboard import gr_error

    assert gr_error(f"unknown choice: {TAG!r}").message == "unknown choice: '&lt;img src=x onerror=alert(4)&gt;'"


def test_a_saved_races_pair_name_is_kept_by_no_cache(saved):
    """`shipped_speedups` was cached by pair name: every upload's name (up to the file's 16 MB) stayed."""
    from specviz.ui import verdict

    for pair in ("p0", "p1", "p2"):
        assert verdict.verdict_markdown(race_from_dict({**saved, "pair": pair}, METHODS, 14))
    cached = getattr(verdict.shipped_speedups, "cache_info", None)
    assert cached is None or cached().currsize == 0


def test_a_loaded_race_holds_each_distinct_token_text_once(tmp_path):
    """The parser makes a string for every occurrence; a 16 MB race held ~45 MB, 15 MB of it repeated texts."""
    race = load_race(big_race(tmp_path / "race.json", "vanilla", mb=0.5, limits=LIMITS), METHODS, 14)
    spans = [s for run in race.runs for s in run.spans]
    assert len({id(s.text) for s in spans}) == len({s.text for s in spans})
    assert len({id(s.kind) for s in spans}) == len({s.kind for s in spans})
