"""A race saved to JSON and loaded back (the Race tab's download and upload): the same board, table
and explanation without a model, and one clear error for every bad file."""

from __future__ import annotations

import copy
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.errors import SpecvizError
from specviz.methods import method_names
from specviz.plots.summary import summary_table
from specviz.stepthrough import explain_iteration
from specviz.ui.panels import race_html
from specviz.ui.race import race_outputs
from specviz.ui.racing import RaceSettings, run_race
from specviz.ui.saved import load_race, race_from_dict, race_to_dict
from specviz.ui.stepthrough import step_html
from specviz.ui.why import why_markdown

METHODS = tuple(method_names())


@pytest.fixture(scope="module")
def saved(perturbed_pair):
    race = None
    settings_ = RaceSettings("def fibonacci(n):", ("autoregressive", "vanilla", "prompt_lookup"), max_new_tokens=16)
    for race in run_race(perturbed_pair, settings_, {}, threading.Event()):
        pass
    return race, json.loads(json.dumps(race_to_dict(race)))  # through JSON, as a file would be


def test_a_loaded_race_draws_the_same_board_table_and_why(saved, tmp_path):
    race, data = saved
    path = tmp_path / "race_records.json"
    path.write_text(json.dumps(data))
    loaded = load_race(path, METHODS, most_runs=13)
    assert loaded == race
    assert race_html(loaded) == race_html(race)
    assert why_markdown(loaded) == why_markdown(race) and "Vanilla SD" in why_markdown(loaded)
    labels = {r.name: r.label for r in race.runs}
    assert summary_table({r.name: r.records for r in loaded.runs}, labels).equals(summary_table({r.name: r.records for r in race.runs}, labels))


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
    "vanilla.speculation_length must be from 1 to 16": lambda d: d["runs"][1].update(options={"speculation_length": 20}),
    "1 to 3": lambda d: d["runs"].extend(d["runs"]),
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
        load_race(path, METHODS, most_runs=13)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)  # fmt: skip


def paths(value, prefix=()):
    """Every place in a JSON value (so a fuzzer can replace one)."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, (*prefix, key))


@settings(max_examples=100, deadline=None)
@given(where=st.integers(min_value=0), value=JSON)
def test_any_one_field_replaced_either_loads_and_draws_or_is_refused_clearly(saved, where, value):
    data = copy.deepcopy(saved[1])
    places = [p for p in paths(data) if p]
    *parent, key = places[where % len(places)]
    node = data
    for k in parent:
        node = node[k]
    node[key] = value
    try:
        race = race_from_dict(data, METHODS, most_runs=13)
    except SpecvizError as e:
        assert str(e)
        return
    race_html(race)  # and everything the Race tab draws from it
    why_markdown(race)
    race_outputs(race)
    for run in race.runs:  # the step-through explains a loaded race from its records
        for i in range(len(run.records)):
            try:
                step_html(explain_iteration(run.records, i, race.prompt_ids, race.options, token_text=str))
            except SpecvizError:
                pass
