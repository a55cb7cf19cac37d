"""The DISCO and PEARL tabs flag timings other load disturbed, as the Race does (issue 38 item 2): the
Race's checks (specviz.serving.timing.timing_flags, through specviz.serving.compare) on the tabs' runs, the
target alone's pace probed right before each drafting method. Every run is put on a quiet machine's clock
and load is simulated by scaling one run's pass times, so the test does not depend on how busy the machine is."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.metrics import summarize
from specviz.serving import compare, runs
from specviz.ui import disco as tab
from specviz.ui.panels import DISTURBED
from specviz.ui.tab_timing import flagged_rows, flags_markdown

PROMPT = "def fibonacci(n):"


STEP_MS = 10.0  # the quiet clock's plain decoding step of the target alone


def quiet_ms(record) -> float:
    """A quiet machine's pass time: a plain step, a little more for each token the pass also reads."""
    return STEP_MS * max(1, record.target_forwards) * (1 + 0.05 * len(record.drafted))


def scaled(method: str, factor: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed run on the quiet clock (this machine's load cannot reach the test), `method`'s pass times
    multiplied by `factor` (above 1: as if another process shared the CPU while it ran; below 1: the
    baseline's steps were the slowed ones); the target alone probed at the quiet clock's step."""
    from specviz import runner

    real = runner.generate_median

    def generate_median(name: str, *args, **kwargs):
        result = real(name, *args, **kwargs)
        k = factor if name == method else 1.0
        records = tuple(
            dataclasses.replace(r, verify_ms=k * quiet_ms(r), draft_ms=k * 0.5 * len(r.drafted)) for r in result.records
        )
        return dataclasses.replace(result, records=records, summary=summarize(list(records)))

    monkeypatch.setattr(runner, "generate_median", generate_median)
    monkeypatch.setattr(runs, "probe_ms", lambda pair, ids: STEP_MS)  # the Race's probe, which the tabs take too


def test_a_quiet_machine_flags_nothing(perturbed_pair, monkeypatch):
    """The same checks on the quiet clock: no method of either tab is flagged."""
    from specviz.ui import pearl

    scaled("none", 1.0, monkeypatch)
    out = tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=20, repeats=1)
    assert out["flags"] == {} and flags_markdown(out["flags"]) == ""
    assert pearl.compare(perturbed_pair, PROMPT, 2, False, 16, 1)["flags"] == {}


def test_a_slowed_target_alone_flags_the_tab_as_the_race_would(perturbed_pair, monkeypatch):
    """The target alone slowed three times by other load: every method's verify cost falls below 1
    (impossible) and the target's pace right before them disagrees with its run: all four flagged."""
    scaled("autoregressive", 3.0, monkeypatch)
    out = tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=20, repeats=1)
    flags = out["flags"]
    assert set(flags) == {r["method"] for r in out["rows"]}, flags
    assert any("verify cost" in p for p in flags["DISCO"]) and any("right before" in p for p in flags["DISCO"])
    assert any("timed before the other methods" in p for p in flags[tab.AR_LABEL])
    note = flags_markdown(flags)
    assert DISTURBED in note and "verify cost" in note
    marked = [r["method"] for r in flagged_rows(out["rows"], flags)]
    assert marked == [f"{r['method']} ⚠️" for r in out["rows"]]


def test_a_method_faster_than_possible_is_flagged(perturbed_pair, monkeypatch):
    """DISCO's target passes over its drafts timed at 0.3 of what they took, below one plain decoding
    step of the target alone (verify cost < 1): impossible, so its figures are flagged, not shown as
    DISCO's; the other methods' are not."""
    scaled("disco", 0.3, monkeypatch)
    out = tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=20, repeats=1)
    assert set(out["flags"]) == {"DISCO"} and any("verify cost" in p for p in out["flags"]["DISCO"]), out["flags"]


def test_the_pearl_tab_flags_a_slowed_target_alone(perturbed_pair, monkeypatch):
    """The PEARL tab times the target alone, vanilla and PEARL one after another: the same checks flag them
    when the target alone's run was slowed (every speedup divides by it)."""
    from specviz.ui import pearl

    scaled("autoregressive", 3.0, monkeypatch)
    out = pearl.compare(perturbed_pair, PROMPT, 2, False, 16, 1)
    labels = [r["method"] for r in out["rows"]]
    assert set(out["flags"]) == set(labels), out["flags"]
    assert any("verify cost" in p for p in out["flags"][labels[1]])  # vanilla's passes below one plain step
    assert all(m.endswith(" ⚠️") for m in (r["method"] for r in flagged_rows(out["rows"], out["flags"])))


def test_the_tabs_run_their_rows_through_the_races_engine(perturbed_pair, monkeypatch):
    """One engine: each row of a tab is one `RunRequest` to the Race's runner (`method_runner`), with
    the lab tabs' timing policy (the median of the asked runs) and the same probe before each drafting
    method; the target alone's pace is not probed before itself."""
    asked = []
    real = runs.method_runner(lambda name: perturbed_pair)

    def runner(request, sessions):
        asked.append(request)
        yield from real(request, sessions)

    rows = [compare.Row("alone", "autoregressive"), compare.Row("v", "vanilla", {"speculation_length": 2})]
    ids = perturbed_pair.tokenizer(PROMPT)["input_ids"]
    out = compare.compare_rows(perturbed_pair, ids, rows, 10, 2, None, runner=runner)
    assert [(r.method, r.median_of, r.probe, dict(r.options)) for r in asked] == [
        ("autoregressive", 2, False, {}),
        ("vanilla", 2, True, {"speculation_length": 2}),
    ]
    assert [t.row.label for t in out.timed] == ["alone", "v"] and not out.stopped
    assert out.timed[0].probe_ms is None and out.timed[1].probe_ms is not None
    alone, vanilla = (t.result.records for t in out.timed)
    assert [t for r in vanilla for t in r.emitted] == [t for r in alone for t in r.emitted]  # lossless, greedy
    assert all(r.oracle_sl is not None for r in vanilla)  # filled once, by the median run


def test_a_failing_row_ends_the_comparison_with_its_message(perturbed_pair):
    """A row the runner fails (here: an option out of range) is said with its label, not shown as a row."""
    from specviz.errors import SpecvizError

    rows = [compare.Row("v", "vanilla", {"speculation_length": 10**6})]
    with pytest.raises(SpecvizError, match=r"^v: .*speculation_length"):
        compare.compare_rows(perturbed_pair, [1, 2, 3], rows, 8, 1, None)
    with pytest.raises(SpecvizError, match="repeats"):  # checked before any row runs
        compare.compare_rows(perturbed_pair, [1, 2, 3], rows, 8, 99, None)


def test_the_disco_and_pearl_tabs_run_one_comparison_loop(perturbed_pair, monkeypatch):
    """Both tabs time their rows through `compare_rows` (one stop check, probe, median timing and flags),
    not a loop of their own: with it replaced, neither tab runs a model."""
    from specviz.ui import pearl

    asked = []

    def compare_rows(pair, ids, rows, max_new_tokens, repeats, stop):
        asked.append([(r.label, r.method) for r in rows])
        return compare.Comparison((), {}, stopped=True)

    for module in (tab, pearl):
        monkeypatch.setattr(module, "compare_rows", compare_rows)
    assert tab.disco_vs_oracle(perturbed_pair, PROMPT, threshold=0.0, sl_max=3, max_new_tokens=8, repeats=1)["stopped"]
    assert pearl.compare(perturbed_pair, PROMPT, 2, False, 8, 1)["rows"] == []
    assert [[m for _, m in rows] for rows in asked] == [
        ["autoregressive", "disco", "vanilla", "oracle"],
        ["autoregressive", "vanilla", "pearl"],
    ]
