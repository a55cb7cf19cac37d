"""DISCO, the confidence rule and the oracle: features, the shipped classifier, decisions, training CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import specviz
from specviz.errors import SpecvizError
from specviz.extras import ConfidenceExtra, DiscoExtra
from specviz.methods import get_method
from specviz.models.disco import DiscoClassifier, DiscoModel, classifier_for, draft_features, load_disco
from specviz.train import disco as train
from tests.conftest import tab_context

PROMPT = "def fibonacci(n):"


def test_features_of_a_hand_made_distribution():
    q = torch.zeros(32)
    q[[3, 7, 1, 9, 20, 21, 22, 23, 24, 25, 26, 27]] = torch.tensor(
        [0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.02, 0.02, 0.02, 0.02, 0.01, 0.01]
    )
    f = draft_features(q, 3)
    assert f.shape == (12,)
    expected_top = [0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.02, 0.02, 0.02, 0.02]
    assert f[:10].tolist() == pytest.approx(expected_top)
    entropy = -sum(p * math.log(p) for p in q.tolist() if p > 0)
    assert float(f[10]) == pytest.approx(entropy, rel=1e-5)
    assert float(f[11]) == 3.0
    batch = draft_features(torch.stack([q, q]), torch.tensor([0, 5]))
    assert batch[:, 11].tolist() == [0.0, 5.0] and torch.equal(batch[0, :11], f[:11])


def test_classifier_round_trips_through_safetensors(tmp_path):
    torch.manual_seed(0)
    clf = DiscoClassifier(hidden=8)
    path = tmp_path / "c.safetensors"
    DiscoModel(clf, threshold=0.35, max_speculation_length=7, card={"pair": "x"}).save(path)
    model = load_disco(path)
    assert (model.threshold, model.max_speculation_length, model.card) == (0.35, 7, {"pair": "x"})
    q = torch.softmax(torch.randn(64), -1)
    assert model.classifier.score(q, 2) == pytest.approx(clf.score(q, 2))
    with pytest.raises(SpecvizError):
        load_disco(tmp_path / "missing.safetensors")


def test_shipped_classifier_loads_and_is_tiny(perturbed_pair):
    model = classifier_for("tiny-perturbed")
    assert model.name == "tiny-perturbed" and not model.card.get("borrowed")
    assert 0 < model.threshold < 1 and model.max_speculation_length >= 1
    borrowed = classifier_for("some-other-pair")
    assert borrowed.card["borrowed"]
    from specviz.models.disco import ASSET_DIR

    assert all(p.stat().st_size < 1_000_000 for p in ASSET_DIR.glob("*.safetensors"))


def lengths(method, pair, **opts):
    records = specviz.generate(method, pair, PROMPT, max_new_tokens=60, **opts).records
    return [r.speculation_length for r in records], records


def test_the_classifier_decides_the_speculation_length(perturbed_pair):
    always, _ = lengths("disco", perturbed_pair, threshold=0.0, max_speculation_length=5)
    assert set(always[:-1]) == {5}  # C_i >= 0 always: every draft runs to SL_max (budget aside)
    never, _ = lengths("disco", perturbed_pair, threshold=1.0, max_speculation_length=5)
    assert set(never[:-1]) == {1}  # C_i < 1 always: stop after the first token
    _, records = lengths("disco", perturbed_pair, threshold=0.0, max_speculation_length=5)
    scores = [s for r in records for s in r.extras(DiscoExtra).disco_scores]
    # one C_i per draft token
    assert all(len(r.extras(DiscoExtra).disco_scores) == r.speculation_length for r in records)
    middle = float(np.median(scores))
    mixed, _ = lengths("disco", perturbed_pair, threshold=middle, max_speculation_length=5)
    assert len(set(mixed[:-1])) > 1, f"a threshold at the median score ({middle}) should give varied lengths"


def test_the_records_carry_the_threshold_and_sl_max_the_run_drafted_with(perturbed_pair):
    """The tuned τ and SL_max (the options left empty) or the ones set, on every record: a reader of the
    records (the Race's panel, a saved race) needs no classifier file to name them."""
    from specviz.extras import DiscoExtra

    tuned = classifier_for(perturbed_pair.name)
    _, records = lengths("disco", perturbed_pair)
    carried = {(d.disco_threshold, d.disco_max_speculation_length) for r in records if (d := r.extras(DiscoExtra))}
    assert len(records) > 1 and carried == {(tuned.threshold, tuned.max_speculation_length)}
    _, records = lengths("disco", perturbed_pair, threshold=0.25, max_speculation_length=3)
    scored = [r.extras(DiscoExtra) for r in records]
    assert {(d.disco_threshold, d.disco_max_speculation_length) for d in scored} == {(0.25, 3)}
    assert all(r.extras(DiscoExtra) is None for r in lengths("confidence", perturbed_pair)[1])


def test_a_records_threshold_and_sl_max_from_a_file_are_checked(perturbed_pair):
    """From a file, τ must be a probability and SL_max at least 1; a record without them (saved earlier) is whole."""
    from specviz.extras import DiscoExtra
    from specviz.records import IterationRecord

    record = lengths("disco", perturbed_pair)[1][0].to_dict()
    for key, value, message in (
        ("disco_threshold", 1.5, "'disco_threshold' must be a number from 0 to 1"),
        ("disco_max_speculation_length", 0, "'disco_max_speculation_length' must be at least 1"),
    ):
        with pytest.raises(SpecvizError, match=message):
            IterationRecord.from_dict({**record, "extra": {**record["extra"], key: value}})
    older = {k: v for k, v in record["extra"].items() if k not in ("disco_threshold", "disco_max_speculation_length")}
    view = IterationRecord.from_dict({**record, "extra": older}).extras(DiscoExtra)
    assert view is not None and view.disco_threshold is None and view.disco_scores


def _disco_run(records, options=None):
    from specviz.serving.race import MethodRun

    return MethodRun("disco", "DISCO", "", status="done", options=options or {}, records=records)


def no_classifier(monkeypatch) -> None:
    """Every DISCO classifier file is read through `specviz.models.disco._load_disco` (load_disco and
    classifier_for both call it, wherever they were imported): make reading one fail the test."""

    def refused(*args, **kwargs):
        raise AssertionError("the panel loaded DISCO's classifier")

    monkeypatch.setattr("specviz.models.disco._load_disco", refused)


def test_the_panel_names_the_tuned_values_from_the_records_without_the_classifier(perturbed_pair, monkeypatch):
    """The Race's DISCO panel reads τ and SL_max from the records: it loads no model file (the UI must not)."""
    from specviz.ui.panels import panel_html

    tuned = classifier_for(perturbed_pair.name)
    _, records = lengths("disco", perturbed_pair)
    no_classifier(monkeypatch)
    html = panel_html(_disco_run(records), None, 60)
    assert f"threshold = {tuned.threshold} (tuned for this pair, the default)" in html
    assert f"max_speculation_length = {tuned.max_speculation_length} (tuned for this pair, the default)" in html
    set_ = panel_html(_disco_run(records, {"threshold": 0.5}), None, 60)  # an option set is shown as set, not tuned
    assert "threshold = 0.5," in set_ and f"max_speculation_length = {tuned.max_speculation_length} (tuned" in set_


def test_the_guard_catches_a_classifier_read_through_the_methods_own_import(perturbed_pair, monkeypatch):
    """The guard above is not vacuous: running DISCO (specviz.methods.disco imported load_disco and
    classifier_for by name) reads a classifier, and the guard stops it."""
    no_classifier(monkeypatch)
    with pytest.raises(AssertionError, match="loaded DISCO's classifier"):
        lengths("disco", perturbed_pair)


def test_a_race_saved_before_the_records_carried_them_still_renders(perturbed_pair, monkeypatch):
    """A race saved before τ and SL_max were in DISCO's records (a race recorded here, those fields then
    dropped, as older files lack them): its DISCO panel loads and draws, names no tuned value, and loads
    no classifier for it."""
    import threading

    from specviz.methods import method_names
    from specviz.serving.racing import RaceSettings, run_race
    from specviz.serving.saved import race_from_dict, race_to_dict
    from specviz.ui.panels import panel_html

    settings = RaceSettings(PROMPT, ("autoregressive", "disco"), max_new_tokens=12)
    *_, recorded = run_race(perturbed_pair, settings, {}, threading.Event())
    data = json.loads(json.dumps(race_to_dict(recorded)))
    new_fields = ("disco_threshold", "disco_max_speculation_length")
    for run in data["runs"]:
        for record in run["records"]:
            assert run["name"] != "disco" or all(k in record["extra"] for k in new_fields)  # a fresh race has them
            record["extra"] = {k: v for k, v in record["extra"].items() if k not in new_fields}
    no_classifier(monkeypatch)
    race = race_from_dict(data, tuple(method_names()), most_runs=len(method_names()))
    disco = next(r for r in race.runs if r.name == "disco")
    assert disco.records and all(r.extras(DiscoExtra).disco_threshold is None for r in disco.records)  # the old format
    html = panel_html(disco, race.baseline_tokens_per_s(), race.max_new_tokens)
    assert 'data-method="disco"' in html and "tuned for this pair" not in html
    assert "threshold = tuned (the default; its value is not in this saved race)," in html


def test_confidence_stops_below_its_threshold(perturbed_pair):
    sl, records = lengths("confidence", perturbed_pair, threshold=0.0, max_speculation_length=3)
    assert set(sl[:-1]) == {3}
    sl, records = lengths("confidence", perturbed_pair, threshold=0.5)
    for r in records:  # every score but the last of a draft is >= 0.5; the last is < 0.5 unless SL_max hit
        s = r.extras(ConfidenceExtra).confidence_scores
        assert all(x >= 0.5 for x in s[:-1])


def test_every_speculation_length_default_is_within_the_races_limit():
    """Issue 38: confidence's SL_max defaulted to 20 while the Race allows at most 16 draft tokens, so its
    default ran above the limit a visitor could set. DISCO's is tuned (None): the shipped classifiers' too."""
    from specviz.methods import all_methods
    from specviz.methods.options import option_fields
    from specviz.serving.limits import AppLimits

    limits = AppLimits()
    bounded = [
        (spec.name, f) for spec in all_methods() for f in option_fields(spec.options) if f.limit == "speculation_length"
    ]
    assert {name for name, f in bounded if f.name == "max_speculation_length"} == {"disco", "confidence"}
    for name, f in bounded:
        assert f.default is None or f.default <= f.bound(limits), (name, f.name, f.default)
    assert get_method("confidence").options().max_speculation_length == limits.speculation_length
    for pair in ("default", "tiny-perturbed"):  # DISCO's tuned SL_max, its default
        assert classifier_for(pair).max_speculation_length <= limits.speculation_length


def test_oracle_drafts_exactly_what_will_be_accepted(perturbed_pair):
    result = specviz.generate("oracle", perturbed_pair, PROMPT, max_new_tokens=60)
    assert get_method("oracle").is_oracle and not get_method("oracle").supports_sampling
    assert all(r.accepted == len(r.drafted) for r in result.records)
    hits = [r.speculation_length == r.oracle_sl for r in result.records[:-1]]
    assert all(hits) and len(result.records) < 60 / 2
    with pytest.raises(SpecvizError, match="temperature 0"):
        list(specviz.run("oracle", perturbed_pair, PROMPT, max_new_tokens=5, temperature=1.0))


def test_replay_helpers_on_a_hand_made_label_sequence():
    match = np.array([1, 1, 0, 1, 1, 1, 0, 0], bool)
    pos = train.Positions(np.zeros((8, 11), np.float32), match, np.zeros(8), np.zeros(8, int))
    assert pos.oracle_positions().tolist() == [0, 1, 2, 0, 1, 2, 3, 0]
    assert train.hits_ahead(pos).tolist() == [2, 1, 0, 3, 2, 1, 0, 0]
    costs = train.Costs(draft_ms=1.0, verify_ms_1=10.0, verify_ms_per_token=0.0)
    oracle = train.replay(pos, lambda j, i: i < train.hits_ahead(pos)[j], costs)
    assert oracle["tokens"] == 8 and oracle["target_forwards"] == 3  # [1 1 x] [1 1 1 x] [x]: 3 + 4 + 1 tokens
    one = train.replay(pos, lambda j, i: i < 1, costs)
    assert one["tokens"] == 8 and oracle["ms_per_token"] < one["ms_per_token"]


def test_training_cli_end_to_end_on_the_tiny_random_pair(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Tell me about topic number {i}."}) + "\n" for i in range(10)))
    out = tmp_path / "tiny.safetensors"
    code = train.main(
        [
            "--pair",
            "tiny-random",
            "--prompts",
            str(prompts),
            "--generate",
            "10",
            "--max-new-tokens",
            "12",
            "--epochs",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    model = load_disco(out)
    split = model.card["split_prompt_indices"]
    assert split == {"train": [0, 1, 2, 5, 6, 7], "val": [3, 8], "test": [4, 9]}
    assert 0 < model.threshold < 1 and out.stat().st_size < 1_000_000
    assert "f1_accept_disco" in model.card["test"]
    assert "wrote" in capsys.readouterr().out


def test_training_cli_tunes_on_heldout_greedy_text(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Tell me about topic number {i}."}) + "\n" for i in range(10)))
    heldout, out = tmp_path / "heldout.jsonl", tmp_path / "tiny.safetensors"
    code = train.main(
        [
            "--pair",
            "tiny-random",
            "--prompts",
            str(prompts),
            "--generate",
            "6",
            "--max-new-tokens",
            "12",
            "--epochs",
            "2",
            "--exclude-mod",
            "3",
            "--heldout",
            str(heldout),
            "--heldout-prompts",
            str(prompts),
            "--heldout-lines",
            "6:10",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    records = [json.loads(line) for line in heldout.read_text().splitlines()]
    assert [r["prompt_index"] for r in records] == [6, 7, 8, 9] and all(r["output_ids"] for r in records)
    card = load_disco(out).card
    assert card["split_prompt_indices"] == {"train": [1, 2, 4, 5], "val": [6, 8], "test": [7, 9]}
    assert "heldout.jsonl" in card["split"]


def test_training_cli_on_a_slice_of_teacher_records(tmp_path):
    gen = np.random.default_rng(0)
    teacher = tmp_path / "teacher.jsonl"
    teacher.write_text(
        "".join(
            json.dumps(
                {
                    "prompt_index": i,
                    "prompt": "x",
                    "prompt_ids": gen.integers(5, 200, 6).tolist(),
                    "output_ids": gen.integers(5, 200, 10).tolist(),
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    out = tmp_path / "tiny.safetensors"
    assert (
        train.main(
            [
                "--pair",
                "tiny-perturbed",
                "--teacher",
                str(teacher),
                "--records",
                "2:",
                "--epochs",
                "2",
                "--costs",
                "1,10,2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    card = load_disco(out).card
    assert card["split_prompt_indices"] == {"train": [2, 5, 6, 7, 10, 11], "val": [3, 8], "test": [4, 9]}
    assert "records 2:" in card["training_text"] and len(card["draft_sha256"]) == 64
    assert (
        card["costs_ms"] == {"draft_ms": 1.0, "verify_ms_1": 10.0, "verify_ms_per_token": 2.0}
        and card["costs_source"] == "given"
    )


def test_the_disco_experiment_writes_its_table_and_figures(tmp_path, capsys):
    from specviz.experiments import disco as experiment

    code = experiment.main(
        [
            "--pair",
            "tiny-perturbed",
            "--suites",
            "humaneval",
            "--limit",
            "1",
            "--max-new-tokens",
            "10",
            "--static",
            "2",
            "--no-warmup",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "results.json").read_text())
    labels = [r["label"] for r in result["summary"] if r["suite"] == "all"]
    assert labels[0] == "Target (AR)" and "DISCO" in labels and labels[-1] == "Oracle (upper bound)"
    assert all(r["matches_autoregressive"] for r in result["summary"])
    oracle = next(r for r in result["summary"] if r["label"].startswith("Oracle") and r["suite"] == "all")
    assert oracle["acceptance_rate"] in (None, 1.0)
    assert {"chosen_vs_oracle.html", "oracle_sl_histogram.html", "table.md"} <= {p.name for p in tmp_path.iterdir()}
    assert "Table 2" in capsys.readouterr().out


def test_the_disco_tab_builds_and_its_handler_compares_with_the_oracle(perturbed_pair):
    import gradio as gr
    import pandas as pd

    from specviz.plots.disco import chosen_vs_oracle_per_iteration
    from specviz.ui import disco as tab

    with gr.Blocks() as demo:
        tab.build_tab(tab_context("tiny-perturbed", load_pair=lambda name: perturbed_pair))
    sliders = {
        b.label: b.value for b in demo.blocks.values() if isinstance(b, gr.Slider)
    }  # a minute at the defaults, not seven
    assert sliders["Max new tokens"] <= 32 and sliders["Timed runs of each (after a warm-up; the median is shown)"] <= 3
    out = tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=20, repeats=1)
    rows = {r["method"]: r for r in out["rows"]}
    assert next(iter(rows)) == tab.AR_LABEL and all(list(r) == tab.HEADERS for r in rows.values())
    assert all(r["runs (median shown)"] == 1 for r in rows.values())
    ar = rows[tab.AR_LABEL]  # the reference of the speedups
    assert ar["speedup vs AR (×)"] == 1.0
    assert ar[tab.ALPHA] is ar[tab.ACCEPTANCE_RATE] is ar["mean SL"] is ar["mean |SL − oracle|"] is None
    disco = rows["DISCO"]
    half = 0.05  # ms/token is shown rounded to 0.1 (a tiny model's ~1 ms moves by 10 % in that rounding)
    low, high = (
        (ar["ms/token"] - half) / (disco["ms/token"] + half),
        (ar["ms/token"] + half) / max(disco["ms/token"] - half, 1e-9),
    )
    assert low - 0.005 <= disco["speedup vs AR (×)"] <= high + 0.005
    assert tab.AR_LABEL not in {
        it["method"] for it in out["iterations"]
    }  # nothing drafted: no speculation length to plot
    fig = chosen_vs_oracle_per_iteration(pd.DataFrame(out["iterations"]), list(rows))
    assert (
        len(fig.layout.annotations) == 3 and fig.layout.xaxis.dtick == 1
    )  # one panel a drafting method, whole iterations
    assert rows["DISCO"]["mean SL"] <= 3 and rows["Oracle (upper bound)"][tab.ACCEPTANCE_RATE] in (None, 100.0)
    oracle = [it for it in out["iterations"] if it["method"].startswith("Oracle")]
    assert all(it["speculation_length"] == it["oracle_sl"] for it in oracle[:-1])  # the last one meets the budget
    assert "tiny-perturbed" in tab.card_markdown(out["classifier"])
    shipped = classifier_for("default")  # the sliders show the tuned values the run uses
    assert tab.tuned_values("default") == (shipped.threshold, shipped.max_speculation_length)


def test_the_oracle_histogram_reads_on_a_phone():
    """A tick per token up to 18 stood on end at 390 px: a level tick every 2 tokens; the legend
    keeps the mean even for one suite (plotly hides a single trace's legend)."""
    import pandas as pd

    from specviz.plots.disco import oracle_sl_histogram

    df = pd.DataFrame({"suite": "this prompt", "oracle_sl": [0, 1, 3, 18, 2, 0, 7]})
    fig = oracle_sl_histogram(df)
    axis = fig.layout.xaxis
    assert axis.dtick == 2 and axis.tickangle == 0 and axis.automargin
    assert "tokens" in axis.title.text and "%" in fig.layout.yaxis.title.text
    assert fig.data[0].showlegend and "mean 4.4" in fig.data[0].name and fig.layout.legend.orientation == "h"


def test_the_disco_table_names_alpha_and_the_acceptance_rate_as_the_race_does(perturbed_pair):
    """Issue 38 item 3: the tab's 'acceptance' was a 0-1 accepted ÷ drafted beside the panels' α and
    acceptance rate; now it has both, by the summary table's names and definitions."""
    from specviz.metrics import tested
    from specviz.plots.summary import summary_table
    from specviz.runner import generate_median
    from specviz.ui import disco as tab

    out = tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=20, repeats=1)
    row = next(r for r in out["rows"] if r["method"] == "DISCO")
    result = generate_median(
        "disco", perturbed_pair, PROMPT, repeats=1, max_new_tokens=20, threshold=0.0, max_speculation_length=3
    )  # greedy: the same records
    s, records = result.summary, result.records
    assert row[tab.ALPHA] == round(s.accepted / sum(tested(r) for r in records), 2)
    assert row[tab.ACCEPTANCE_RATE] == round(100 * s.accepted / s.drafted, 1)
    race_columns = set(summary_table({"disco": records}, {"disco": "DISCO"}).columns)
    assert {tab.ALPHA, tab.ACCEPTANCE_RATE} <= race_columns and "acceptance" not in tab.HEADERS
    sl_opt = next(r["method"] for r in out["rows"] if r["method"].startswith("SL-opt"))
    assert "best fixed length" in sl_opt and "SL-opt" in tab.INTRO  # SL-opt says what it is
    assert min(it["iteration"] for it in out["iterations"]) == 1  # counted from 1, as everywhere in the app


def test_each_speculation_length_plot_has_room_for_its_title_under_the_one_above():
    """The subplot titles sat on the upper plot's tick labels (0.08 of the height between plots);
    every plot now has its own axis titles and a gap that holds them and the next title."""
    import pandas as pd

    from specviz.plots.disco import chosen_vs_oracle_per_iteration

    methods = ["DISCO", "SL-opt = 4 (best fixed length)", "Oracle (upper bound)"]
    df = pd.DataFrame(
        [{"method": m, "iteration": i, "speculation_length": 2, "oracle_sl": 1} for m in methods for i in range(1, 9)]
    )
    fig = chosen_vs_oracle_per_iteration(df, methods)
    layout = fig.layout
    area = layout.height - layout.margin.t - layout.margin.b  # the plots' pixels
    domains = [layout[f"yaxis{'' if n == 1 else n}"].domain for n in range(1, 4)]
    titles = {a.text: a.y for a in layout.annotations}
    for upper, lower, name in zip(domains, domains[1:], methods[1:], strict=False):
        assert titles[name] == lower[1]  # a plot's title sits on its top edge
        assert (upper[0] - lower[1]) * area >= 100  # tick labels (~20 px), "iteration" (~25), the title (~25)
    assert all(layout[f"xaxis{'' if n == 1 else n}"].title.text == "iteration" for n in range(1, 4))
