"""The app under load on loopback (specviz.bench load), small: every race done, Stop stops, a short
race goes between a long race's methods with its queue position shown, a closed page stops its race,
the visitors' sessions expire once they have left, and one round of a hostile client's probes is
refused in one line each without a traceback or a growing temp folder."""

from __future__ import annotations

import json

from specviz.tools import load


def test_the_app_shares_its_models_fairly_and_stops_what_is_left(tmp_path, monkeypatch):
    # The long race must outlast gradio's 15 s heartbeat after the page closes, or there is nothing
    # left to stop: 400 tokens of the tiny pair once did, on a faster machine they did not.
    monkeypatch.setenv("SPECVIZ_LIMIT_MAX_NEW_TOKENS", "1500")  # the app runs in a child: it reads this
    code = load.main(
        [
            "--pair",
            "tiny-random",
            "--sessions",
            "2",
            "--races",
            "2",
            "--max-new-tokens",
            "8",
            "--stop-tokens",
            "1500",
            "--session-ttl",
            "20",
            "--hostile",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    result = json.loads((tmp_path / "results.json").read_text())
    assert code == 0 and result["done"] == 4 and result["failed"] == 0, result["problems"]
    assert result["stopped"] is True
    assert result["short_race_first"] is True and result["queue_position_shown"] is True
    assert result["visitor_left_logged"] is True
    assert result["tracebacks_in_log"] == 0  # the hostile client's refusals included
    hostile = {row["probe"]: row for row in result["hostile"]}
    unexpected = [row for row in result["hostile"] if row["probe"] in result["hostile_unexpected"]]
    assert result["hostile_rounds"] == 1 and not unexpected, unexpected  # each row with its message
    # the 16 MB rows' speed goal is the benchmark's figure (hostile_missed_goals), judged there, not here
    assert all(isinstance(row["within_goal"], bool) for row in result["hostile"] if "16 MB" in row["probe"])
    assert hostile["upload past the bound"]["message"].startswith("SpecvizError: HTTP 413")
    assert "nested too deep" in hostile["saved race nested 100k deep"]["message"]
    assert "'Seed' must be a number" in hostile['race with seed "abc"']["message"]
    assert "40 / 40" not in hostile["Stop on an online stream"]["message"]
    # issue 53's round (specviz.tools.hostile): one address holds at most its places however many sessions
    six = hostile["six raw races at once from one address"]
    # its two places, and a third once they are free: beside this test's two visitors and the timed short race,
    # one of the six may wait in gradio's queue (8 runs admitted at once) until the first two are done
    assert int(six["outcome"].split()[0]) <= 3 and six["ok"], six
    assert "HTTP 404" in hostile["an endpoint the app lacks"]["message"]
    assert hostile["saved race: HTML in a label"]["message"] == "escaped"
    assert "HTTP 400" in hostile["an empty upload"]["message"]
    flood = hostile["150 uploads of 8 bytes from one address"]
    assert "HTTP 429" in flood["message"], flood
    # one draft file for three downloads (the tiny pair's draft: a few MB); the temp folder stays small
    assert len({hostile[f"download the draft ({i})"]["message"] for i in (1, 2, 3)}) == 1
    assert result["temp_growth_mb"] < 100 and result["temp_largest_mb"] < 100
    assert (
        result["sessions_dropped"] >= 3 and result["rss_visitors_left_mb"] > 0
    )  # the racing visitors' and the warm-up's
    progress = [json.loads(line) for line in (tmp_path / "races.jsonl").read_text().splitlines()]
    assert [row["n"] for row in progress] == [1, 2, 3, 4] and all(row["rss_mb"] > 0 for row in progress)


def test_a_probe_takes_a_shared_bounds_refusal_as_fair_and_nothing_else():
    """The honest visitors' Online runs share the pool of adapted drafts: a download refused because
    theirs took the hostile client's place is the server keeping its bound, not a failure of the probe."""

    def refuse(message):
        def call():
            raise RuntimeError(message)

        return call

    full = "this server keeps only a few adapted drafts at once (SPECVIZ_LIMIT_ADAPTED_DRAFTS)"
    assert load.probe("download", "done", refuse(full), fair="SPECVIZ_LIMIT_ADAPTED_DRAFTS")["ok"]
    assert not load.probe("download", "done", refuse(full))["ok"]
    assert not load.probe("download", "done", refuse("another refusal"), fair="SPECVIZ_LIMIT_ADAPTED_DRAFTS")["ok"]
    assert not load.probe("download", "done", refuse(full + "\nTraceback"), fair="SPECVIZ_LIMIT_ADAPTED_DRAFTS")["ok"]
    assert load.probe("download", "done", lambda: "osd-draft.safetensors", fair="X")["ok"]


def test_the_temp_folder_is_measured_while_the_app_removes_folders_in_it(tmp_path, monkeypatch):
    """The hostile run's folder sampler died on a folder the app removed while it was walked
    (FileNotFoundError from pathlib's rglob), and the run's largest temp size stopped there."""
    import os

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "race.json").write_bytes(b"x" * 10_000)
    (tmp_path / "gone").mkdir()
    scandir = os.scandir

    def removed_meanwhile(path: object = ".") -> object:
        if os.fspath(path).endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", removed_meanwhile)
    assert load.folder_mb(tmp_path) >= 10_000 / 2**20
