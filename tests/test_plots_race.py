"""Race plots and the summary table, built from a recorded run without a server."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import specviz
from specviz.metrics import summarize, summary_metrics
from specviz.plots.acceptance import running_acceptance
from specviz.plots.accepted_histogram import accepted_histogram
from specviz.plots.frame import COLUMNS, records_frame
from specviz.plots.speculation_length import speculation_length_vs_oracle
from specviz.plots.summary import summary_table
from specviz.plots.tokens_vs_time import tokens_vs_time
from specviz.records import IterationRecord

METHODS = ["autoregressive", "vanilla", "prompt_lookup"]
LABELS = {"autoregressive": "Autoregressive", "vanilla": "Vanilla SD", "prompt_lookup": "Prompt lookup"}


@pytest.fixture(scope="module")
def recorded(perturbed_pair):
    """A recorded race, round-tripped through JSON as the app's download saves it."""
    runs = {}
    for m in METHODS:
        result = specviz.generate(m, perturbed_pair, "def fibonacci(n):", max_new_tokens=30)
        runs[m] = [IterationRecord.from_dict(json.loads(json.dumps(r.to_dict()))) for r in result.records]
    return runs


@pytest.fixture(scope="module")
def frame(recorded):
    return records_frame([r for m in METHODS for r in recorded[m]], LABELS)


def test_frame_has_running_totals(frame, recorded):
    assert list(frame.columns) == COLUMNS
    for m in METHODS:
        d = frame[frame["method"] == m]
        s = summarize(recorded[m])
        assert d["tokens"].iloc[-1] == s.new_tokens == 30
        assert d["accepted_total"].iloc[-1] == s.accepted
        if s.drafted:
            assert d["running_acceptance"].iloc[-1] == pytest.approx(s.accepted / s.drafted)
    assert frame.loc[frame["method"] == "autoregressive", "running_acceptance"].isna().all()
    assert frame.loc[frame["method"] == "vanilla", "oracle_sl"].notna().all()


def check_figure(fig, trace_names):
    assert [t.name for t in fig.data] == trace_names
    layout = fig.layout
    assert layout.title.text and layout.xaxis.title.text and layout.yaxis.title.text
    return fig


def test_tokens_vs_time(frame, recorded):
    fig = check_figure(tokens_vs_time(frame), list(LABELS.values()))
    for trace, m in zip(fig.data, METHODS, strict=True):
        assert trace.y[0] == 0 and trace.y[-1] == 30
        assert trace.x[-1] == pytest.approx(recorded[m][-1].t_end)
    assert "(s)" in fig.layout.xaxis.title.text
    assert "alone" in fig.layout.title.subtitle.text


def test_running_acceptance_leaves_out_methods_that_do_not_draft(frame):
    fig = check_figure(running_acceptance(frame), ["Vanilla SD", "Prompt lookup"])
    assert all(0 <= y <= 1 for t in fig.data for y in t.y if y == y)


def test_accepted_histogram_shares_sum_to_one(frame, recorded):
    fig = check_figure(accepted_histogram(frame), ["Vanilla SD", "Prompt lookup"])
    for trace in fig.data:
        assert sum(trace.y) == pytest.approx(1.0)
    vanilla = dict(zip(fig.data[0].x, fig.data[0].y, strict=True))
    n = len(recorded["vanilla"])
    assert vanilla.get(0, 0) == pytest.approx(sum(r.accepted == 0 for r in recorded["vanilla"]) / n)


def test_histogram_ticks_stay_few_and_level_on_a_phone(frame):
    """Up to 18 accepted tokens: a tick every 2 (a tick per token stood on end, unreadable at 390 px)."""
    long = frame.assign(accepted=frame["accepted"].where(frame["method"] != "vanilla", 18))
    axis = accepted_histogram(long).layout.xaxis
    assert axis.dtick == 2 and axis.tickangle == 0 and axis.automargin
    assert accepted_histogram(frame).layout.xaxis.dtick == 1  # a short race keeps a tick per token


def test_speculation_length_vs_oracle(frame, recorded):
    fig = check_figure(
        speculation_length_vs_oracle(frame, "vanilla"),
        ["chosen (drafted)", "accepted", "oracle (draft guesses that would be accepted)"],
    )
    assert fig.layout.title.subtitle.text.startswith(
        "Vanilla SD · oracle:"
    )  # the method and what the oracle is, without cutting the title
    assert list(fig.data[0].y) == [r.speculation_length for r in recorded["vanilla"]]
    assert list(fig.data[2].y) == [r.oracle_sl for r in recorded["vanilla"]]
    empty = speculation_length_vs_oracle(frame, "nope")
    assert not empty.data and "No records" in empty.layout.annotations[0].text


def test_empty_race_plots_say_so():
    df = records_frame([])
    for fig in (tokens_vs_time(df), running_acceptance(df), accepted_histogram(df)):
        assert not fig.data and fig.layout.annotations


LABELS_BY_LABEL = {label: name for name, label in LABELS.items()}


def test_summary_table_uses_the_metrics(recorded):
    from specviz.plots.summary import place_words, standings

    table = summary_table(recorded, LABELS)
    assert isinstance(table, pd.DataFrame) and sorted(table["method"]) == sorted(LABELS.values())
    speedups = list(table["speedup vs AR (×)"])
    assert speedups == sorted(speedups, reverse=True)  # fastest first, the winner marked
    ranked = standings(recorded)  # runs timed live: within 10 % of each other they share a place
    assert list(table["place"]) == [place_words(s, ranked) for s in ranked] and table["place"].iloc[0].startswith("★")
    method = next(m for m in table["method"] if LABELS_BY_LABEL[m] != "autoregressive")  # AR: every speedup's divisor
    flagged = summary_table(recorded, LABELS, disturbed={LABELS_BY_LABEL[method]}).set_index("method")["place"]
    assert flagged[method] == "timing disturbed" and any(p.startswith("★") for p in flagged.drop(method))
    row = table.set_index("method").loc["Vanilla SD"]
    m = summary_metrics(summarize(recorded["vanilla"]))
    ar = summary_metrics(summarize(recorded["autoregressive"]))
    assert row["acceptance rate (%)"] == pytest.approx(100 * m["acceptance_rate"], abs=0.1)
    assert row["speedup vs AR (×)"] == pytest.approx(m["tokens_per_s"] / ar["tokens_per_s"], abs=0.01)
    assert table.set_index("method").loc["Autoregressive", "speedup vs AR (×)"] == 1.0
    no_baseline = summary_table({"vanilla": recorded["vanilla"]}, LABELS)
    assert no_baseline["speedup vs AR (×)"].isna().all()
