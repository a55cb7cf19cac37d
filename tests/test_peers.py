"""Hugging Face peers and the benchmark reports, on the tiny pairs."""

from __future__ import annotations

import gzip
import json

import pytest

from specviz import bench, reports
from specviz.peers import PEERS, peers_for, run_peer
from specviz.reports import markdown, read_json, write_report
from specviz.runner import generate

PROMPT = [5, 17, 300, 42, 5, 17, 300, 9]


@pytest.mark.parametrize("pair_name", ["perturbed", "self", "reduced"])
@pytest.mark.parametrize("peer", sorted(PEERS))
def test_every_peer_emits_the_same_greedy_tokens_as_our_autoregressive(tiny_pairs, pair_name, peer):
    pair = tiny_pairs[pair_name]
    ours = generate("autoregressive", pair, PROMPT, max_new_tokens=20).summary
    theirs = run_peer(peer, pair, PROMPT, max_new_tokens=20, speculation_length=3)
    assert theirs["output_ids"] == list(ours.output_ids)
    assert theirs["target_forwards"] >= 1
    if PEERS[peer].needs_draft:
        assert theirs["draft_forwards"] >= 1
    if pair_name == "perturbed" and peer == "hf_assisted":  # some drafts accepted: fewer target calls than tokens
        assert theirs["target_forwards"] < 20


def test_assisted_peer_leaves_the_shared_draft_config_as_it_was(self_pair):
    before = self_pair.draft.generation_config.to_dict()
    run_peer("hf_assisted", self_pair, PROMPT, max_new_tokens=4, speculation_length=2)
    assert self_pair.draft.generation_config.to_dict() == before


def test_peers_follow_the_chosen_methods():
    assert peers_for(["autoregressive"]) == ["hf_greedy"]
    assert set(peers_for(["vanilla", "prompt_lookup"])) == {
        "hf_greedy",
        "hf_assisted",
        "hf_assisted_default",
        "hf_prompt_lookup",
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "r.json"
    assert (
        bench.main(
            [
                "--pair",
                "tiny-random",
                "--methods",
                "autoregressive,vanilla,prompt_lookup",
                "--peers",
                "--suite",
                "humaneval,gsm8k",
                "--limit",
                "1",
                "--max-new-tokens",
                "8",
                "--no-warmup",
                "--quiet",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    return json.loads(out.read_text())


def test_bench_with_peers_interleaves_and_compares_outputs(recorded):
    names = {r["method"] for r in recorded["runs"]}
    assert {"hf_greedy", "hf_assisted", "hf_prompt_lookup"} <= names
    assert all(r["matches_hf_greedy"] is True for r in recorded["runs"])
    rows = {r["method"]: r for r in recorded["summary"]}
    assert rows["vanilla"]["peer"] == "hf_assisted" and rows["vanilla"]["ratio_to_peer"] > 0
    assert rows["hf_greedy"]["kind"] == "peer" and rows["hf_greedy"]["acceptance_rate"] is None
    assert {r["suite"] for r in recorded["by_suite"]} == {"humaneval", "gsm8k"}


def test_report_builders_write_every_format(recorded, tmp_path):
    paths = write_report(recorded, tmp_path, command="python -m specviz.bench --peers")
    assert [p.name for p in paths] == ["results.json", "summary.csv", "summary.md", "report.html"]
    md = markdown(recorded, "cmd")
    assert "| vanilla" in md and "hf_assisted" in md and "per suite" in md
    page = (tmp_path / "report.html").read_text()
    assert page.count("plotly-graph-div") == 4 and "Speedup per suite" in page
    assert "speedup vs AR" in (tmp_path / "summary.csv").read_text().splitlines()[0]


def test_a_report_is_written_again_from_gzipped_results(recorded, tmp_path, capsys):
    """As the repository keeps a run: results.json gzip'd, no report.html; `python -m specviz.reports`
    writes the page from them, and read_json takes the plain name."""
    write_report(recorded, tmp_path, command="python -m specviz.bench --peers")
    plain = tmp_path / "results.json"
    written = json.loads(plain.read_text())
    (tmp_path / "results.json.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    (tmp_path / "report.html").unlink()
    assert read_json(plain) == read_json(tmp_path / "results.json.gz") == written
    assert reports.main([str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert page.count("plotly-graph-div") == 4 and "python -m specviz.bench --peers" in page
    assert reports.main([str(tmp_path / "missing")]) == 2
    assert "error: no file" in capsys.readouterr().err


def test_markdown_without_an_autoregressive_run_has_no_empty_per_suite_table(recorded):
    no_ar = dict(recorded, by_suite=[dict(r, speedup_vs_autoregressive=None) for r in recorded["by_suite"]])
    md = markdown(no_ar, "cmd")
    assert "| vanilla" in md and "per suite" not in md
