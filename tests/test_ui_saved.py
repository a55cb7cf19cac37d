"""A race saved to JSON and loaded back (the Race tab's download and upload): the same board, table
and explanation without a model, and one clear error for every bad file."""

from __future__ import annotations

import contextlib
import copy
import json
import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specviz.errors import SpecvizError
from specviz.methods import method_names
from specviz.plots.summary import summary_table
from specviz.serving.racing import RaceSettings, run_race
from specviz.serving.saved import load_race, race_from_dict, race_to_dict
from specviz.stepthrough import explain_iteration
from specviz.ui.panels import race_html
from specviz.ui.race import race_outputs
from specviz.ui.stepthrough import step_html
from specviz.ui.why import why_markdown
from tests.conftest import own_methods

METHODS = tuple(method_names())
OWN = tuple(s.name for s in own_methods())  # a race of vLLM's rows needs their servers (tests/test_vllm.py)


@pytest.fixture(scope="module")
def saved(perturbed_pair):
    settings_ = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla", "prompt_lookup"), max_new_tokens=16)
    race = list(run_race(perturbed_pair, settings_, {}, threading.Event()))[-1]  # one race, redrawn as it runs
    return race, json.loads(json.dumps(race_to_dict(race)))  # through JSON, as a file would be


def test_a_loaded_race_draws_the_same_board_table_and_why(saved, tmp_path):
    race, data = saved
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(data))
    loaded = load_race(path, METHODS, most_runs=len(METHODS))
    assert race_to_dict(loaded) == race_to_dict(race)  # snapshots compare by their saved form
    assert race_html(loaded) == race_html(race)
    assert why_markdown(loaded) == why_markdown(race) and "Vanilla SD" in why_markdown(loaded)
    labels = {r.name: r.label for r in race.runs}
    assert summary_table({r.name: r.records for r in loaded.runs}, labels).equals(
        summary_table({r.name: r.records for r in race.runs}, labels)
    )


def test_each_run_is_saved_with_every_option_it_ran_with(saved, tmp_path):
    """Defaults included (a file saying `options: {}` did not say what ran); a file of either form
    loads back to the same race, its panels naming the defaults as such."""
    race, data = saved
    runs = {r["name"]: r for r in data["runs"]}
    assert runs["vanilla"]["options"] == {"speculation_length": 4} and runs["autoregressive"]["options"] == {}
    assert race_to_dict(race_from_dict(data, METHODS, most_runs=len(METHODS))) == race_to_dict(race)
    older = broken(data, lambda d: [r.update(options={}) for r in d["runs"]])  # saved before defaults were
    assert race_to_dict(race_from_dict(older, METHODS, most_runs=len(METHODS))) == race_to_dict(race)
    changed = broken(data, lambda d: d["runs"][1]["options"].update(speculation_length=2))
    vanilla = race_from_dict(changed, METHODS, most_runs=len(METHODS)).runs[1]
    assert vanilla.options == {"speculation_length": 2}
    assert "speculation_length = 4 (default)" in race_html(race)


def broken(data: dict, edit) -> dict:
    out = copy.deepcopy(data)
    edit(out)
    return out


BAD = {
    "not a saved race": lambda d: d.clear(),
    "version": lambda d: d.update(version=2),
    "does not know": lambda d: d["runs"][0].update(name="rm -rf"),
    "status": lambda d: d["runs"][0].update(status="running"),
    "drafted": lambda d: d["runs"][1]["records"][0].update(drafted="abc"),
    "accepts more": lambda d: d["runs"][1]["records"][0].update(accepted=99),
    "t_end": lambda d: d["runs"][1]["records"][0].update(t_end=float("nan")),
    "kind": lambda d: d["runs"][1]["spans"][0].update(kind="<script>"),
    "prompt_ids": lambda d: d.update(prompt_ids=[True]),
    "options": lambda d: d["options"].update(temperature="hot"),
    "twice": lambda d: d["runs"].append(d["runs"][0]),
    "has no option 'datastore'": lambda d: d["runs"][1].update(name="sssd", options={"datastore": "/etc/passwd"}),
    "vanilla.speculation_length must be from 1 to 16": lambda d: d["runs"][1].update(
        options={"speculation_length": 20}
    ),
    "1 to 3": lambda d: d["runs"].extend(d["runs"]),
    "'probe_ms' must be a number": lambda d: d["runs"][1].update(probe_ms=-1.0),
    "'flags' must be a list": lambda d: d["runs"][1].update(flags="slow"),
    "'tested' must be true or false": lambda d: d["runs"][1]["spans"][0].update(tested="no"),
}


@pytest.mark.parametrize("message", BAD)
def test_a_bad_file_is_one_clear_error(saved, message):
    data = broken(saved[1], BAD[message])
    with pytest.raises(SpecvizError, match=message):
        race_from_dict(data, METHODS, most_runs=3 if message == "1 to 3" else 13)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe not json")
    with pytest.raises(SpecvizError, match="not JSON"):
        load_race(path, METHODS, most_runs=len(METHODS))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def paths(value, prefix=()):
    """Every place in a JSON value (so a fuzzer can replace one)."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, (*prefix, key))


@settings(max_examples=100, deadline=None)
@given(where=st.integers(min_value=0), value=JSON)
# Crashes this test found, replayed on every run: a count past int64 raised an OverflowError (issue 37).
@example(where=("runs", 1, "records", 0, "iteration"), value=2**64)
@example(where=("runs", 1, "records", 0, "position"), value=2**64)
@example(where=("runs", 1, "records", 0, "draft_forwards"), value=2**64)
@example(where=("runs", 1, "records", 0, "target_forwards"), value=2**64)
@example(where=("runs", 1, "records", 0, "speculation_length"), value=2**64)
# a draft's `tested` of another type loaded, and a truthy string drew an untested draft as tested
@example(where=("runs", 1, "spans", 0, "tested"), value="no")
def test_any_one_field_replaced_either_loads_and_draws_or_is_refused_clearly(saved, where, value):
    """`where`: an index into the saved race's places (any int, taken modulo their number), or the
    place itself in a pinned example."""
    data = copy.deepcopy(saved[1])
    places = [p for p in paths(data) if p]
    *parent, key = where if isinstance(where, tuple) else places[where % len(places)]
    node = data
    for k in parent:
        node = node[k]
    node[key] = value
    try:
        race = race_from_dict(data, METHODS, most_runs=len(METHODS))
    except SpecvizError as e:
        assert str(e)
        return
    flags = [(s.greedy, s.tested) for run in race.runs for s in run.spans]  # kept as the types they are drawn as
    assert all(isinstance(flag, bool) for pair in flags for flag in pair)
    race_html(race)  # and everything the Race tab draws from it
    why_markdown(race)
    race_outputs(race)
    for run in race.runs:  # the step-through explains a loaded race from its records
        for i in range(len(run.records)):
            with contextlib.suppress(SpecvizError):
                step_html(explain_iteration(run.records, i, race.prompt_ids, race.options, token_text=str))


@pytest.fixture(scope="module", params=[0.0, 1.0], ids=["greedy", "sampling"])
def saved_all(request, perturbed_pair):
    """A race of every method specviz decodes (the oracle is skipped under sampling), through JSON."""
    settings_ = RaceSettings("def fibonacci(n):", OWN, max_new_tokens=12, temperature=request.param, seed=1)
    race = list(run_race(perturbed_pair, settings_, {}, threading.Event()))[-1]
    return race, json.loads(json.dumps(race_to_dict(race)))


def test_every_methods_race_round_trips_with_its_typed_extras(saved_all, tmp_path):
    from specviz.methods import get_method

    race, data = saved_all
    assert {r.name for r in race.runs if r.records} >= set(OWN) - {"oracle"}
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(data))
    loaded = load_race(path, METHODS, most_runs=len(METHODS))
    assert race_to_dict(loaded) == race_to_dict(race) and race_html(loaded) == race_html(race)
    for run, mine in zip(loaded.runs, race.runs, strict=True):
        for r, o in zip(run.records, mine.records, strict=True):
            assert r.tree() == o.tree() and r.pearl() == o.pearl() and (r.stop, r.uniforms) == (o.stop, o.uniforms)
            assert all(r.extras(f) == o.extras(f) for f in get_method(run.name).extra_families())


def record_of(data: dict, method: str) -> dict:
    """The first record of a method's run in a saved race (to be edited)."""
    return next(r for r in data["runs"] if r["name"] == method)["records"][0]


@pytest.mark.parametrize("field", ["iteration", "position", "draft_forwards", "target_forwards", "speculation_length"])
def test_a_number_past_int64_is_one_clear_error_not_an_overflow(saved, field):
    data = copy.deepcopy(saved[1])
    data["runs"][1]["records"][0][field] = 2**64
    with pytest.raises(SpecvizError, match=f"'{field}'"):
        race_from_dict(data, METHODS, most_runs=len(METHODS))


def test_json_nested_past_the_parsers_depth_is_one_clear_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecvizError, match="nested too deep"):
        load_race(path, METHODS, most_runs=len(METHODS))


@pytest.mark.parametrize("digits", [25, 5000])
def test_a_number_with_absurdly_many_digits_is_one_clear_error(saved, tmp_path, digits):
    text = json.dumps(saved[1]).replace('"position": ', f'"position": {"9" * digits}', 1)  # the first record's
    path = tmp_path / "digits.json"
    path.write_text(text)
    with pytest.raises(SpecvizError, match=r"position|thousands of digits"):
        load_race(path, METHODS, most_runs=len(METHODS))


CRAFTED = {
    "'max_new_tokens' must be a whole number from 1": lambda d: d.update(max_new_tokens=0),
    "max_new_tokens.* not -5": lambda d: d.update(max_new_tokens=-5),
    "prompt_ids": lambda d: d.update(prompt_ids=[10**30]),
    "'drafted'": lambda d: d["runs"][1]["records"][0].update(drafted=[10**30]),
    "'emitted'": lambda d: d["runs"][0]["records"][0].update(emitted=[10**30]),
    "token_id": lambda d: d["runs"][0]["spans"][0].update(token_id=10**30),
    "'iteration' must be one of the run's": lambda d: d["runs"][0]["spans"][0].update(iteration=10**6),
    "past the prompt and max_new_tokens": lambda d: d["runs"][1]["records"][0].update(position=10**6),
    "'draft_ms' and 'verify_ms' must not be negative": lambda d: d["runs"][1]["records"][0].update(draft_ms=-1.0),
    "'t_end' must not come before": lambda d: d["runs"][1]["records"][0].update(t_end=-1.0),
    "extra 'ngram'": lambda d: d["runs"][2]["records"][0]["extra"].update(ngram=2**64),
    "extra 'tree_tokens' is not a field this method writes": lambda d: d["runs"][1]["records"][0]["extra"].update(
        tree_tokens=[1]
    ),
}


@pytest.mark.parametrize("message", CRAFTED)
def test_a_crafted_field_is_one_clear_error(saved, message):
    data = broken(saved[1], CRAFTED[message])
    with pytest.raises(SpecvizError, match=message):
        race_from_dict(data, METHODS, most_runs=len(METHODS))


NOT_FINITE = {
    "pearl": ("ideal_s", float("inf")),
    "sssd": ("tree_scores", [float("nan")]),
    "disco": ("disco_scores", [float("-inf")]),
    "confidence": ("confidence_scores", [float("nan")]),
}


@pytest.mark.parametrize("method", NOT_FINITE)
def test_an_infinite_or_nan_extra_is_one_clear_error(saved_all, method):
    key, value = NOT_FINITE[method]
    data = copy.deepcopy(saved_all[1])
    record_of(data, method)["extra"][key] = value
    with pytest.raises(SpecvizError, match=f"record 0 of '{method}': extra '{key}'"):
        race_from_dict(data, METHODS, most_runs=len(METHODS))


@pytest.fixture(scope="module")
def load_saved():
    """The Race tab's 'Load a saved race' handler, as gradio calls it."""
    from specviz.serving.limits import AppLimits
    from specviz.ui import build_app

    demo = build_app(pair="tiny-perturbed", limits=AppLimits())
    return next(
        f.fn
        for f in demo.fns.values()
        if getattr(f.fn, "__module__", None) == "specviz.ui.race" and f.fn.__name__ == "load_saved"
    )


def test_the_race_tab_shows_a_bad_file_as_one_message(load_saved, saved, tmp_path, monkeypatch):
    import gradio as gr

    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(broken(saved[1], lambda d: d["runs"][1]["records"][0].update(position=2**64))))
    with pytest.raises(gr.Error, match="'position'"):
        list(load_saved(str(path)))
    path.write_text(json.dumps(saved[1]))
    assert list(load_saved(str(path)))  # a good file draws the board
    monkeypatch.setattr("specviz.ui.race.race_outputs", lambda race: 1 / 0)  # the board itself failing: a message too
    with pytest.raises(gr.Error, match="specviz failed"):
        list(load_saved(str(path)))


def test_a_file_past_the_size_bound_is_refused_before_it_is_read(tmp_path):
    """A valid 48 MB race cost 70 s of CPU and +860 MB beside timed races (issue 41)."""
    from specviz.serving.saved import MAX_FILE_BYTES

    path = tmp_path / "big.json"
    path.write_bytes(b" " * (MAX_FILE_BYTES + 1))
    assert MAX_FILE_BYTES <= 16 * 2**20
    with pytest.raises(SpecvizError, match="a saved race here is at most 16 MB"):
        load_race(path, METHODS, most_runs=len(METHODS))
    path.write_bytes(b" " * (20 * 2**20))  # under the old 50 MB bound: read and parsed
    with pytest.raises(SpecvizError, match="at most 16 MB"):
        load_race(path, METHODS, most_runs=len(METHODS))


def test_checking_a_saved_race_stops_at_its_time_budget(saved, tmp_path):
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(saved[1]))
    assert [r.name for r in load_race(path, METHODS, most_runs=len(METHODS)).runs] == [r.name for r in saved[0].runs]
    with pytest.raises(SpecvizError, match="took too long to check"):
        load_race(path, METHODS, most_runs=len(METHODS), budget_s=-1.0)
