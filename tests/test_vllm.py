"""vLLM's rows (`specviz.methods.vllm`) against real vLLM servers (`make vllm`; no mocks): greedy parity with
specviz's autoregressive output, the engine's steps rebuilt from its per-step counts, a server killed
mid-race, a server of another model refused, a stream closed mid-way. The servers start once for this
file (--enforce-eager: no compile, ~45 s a server on 2 cores) on a tiny Llama of head size 32 (vLLM's
CPU attention runs no smaller head; the tiny-random pair's is 16)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import pytest

import specviz
from specviz.engines import vllm as engine
from specviz.errors import SpecvizError
from specviz.extras import EngineExtra
from specviz.methods import get_method
from specviz.methods.vllm import Step, engine_steps, give_urls
from specviz.metrics import summarize
from specviz.models.modelpair import ModelPair
from specviz.models.tiny import perturbed_copy, tiny_model, tiny_tokenizer
from specviz.records import IterationRecord

pytestmark = pytest.mark.vllm  # make test runs this file after the rest, alone (its servers bind the cores)

PROMPT = "def fib(n): return fib(n-1) + fib(n-2) if n > 1 else n\n# the same again: def fib(n): return"
ROWS = {
    "vllm": {},
    "vllm_ngram": {"num_speculative_tokens": 3},
    "vllm_draft": {"num_speculative_tokens": 3},
    "vllm_suffix": {"num_speculative_tokens": 3},
}


def chunk(t: float, *tokens: int) -> engine.Chunk:
    return engine.Chunk(t, tokens, None)


def test_steps_follow_the_counts_and_share_a_merged_chunk_time():
    counts = engine.StepCounts(accepted=(2, 0, 1), drafted=(3, 3, 3))
    chunks = [chunk(1.0, 7), chunk(2.0, 1, 2, 3), chunk(4.0, 4, 5, 6)]  # the last chunk: two steps (1, then 1+1)
    steps = engine_steps(chunks, counts, t0=0.0)
    assert [(s.tokens, s.accepted, s.drafted, s.rejected) for s in steps] == [
        ((7,), 0, 0, 0),  # the prompt's pass
        ((1, 2, 3), 2, 3, 1),
        ((4,), 0, 3, 3),
        ((5, 6), 1, 3, 2),
    ]
    assert [(s.t_start, s.t_end, s.steps_in_chunk) for s in steps[2:]] == [(2.0, 3.0, 2), (3.0, 4.0, 2)]
    assert all(s.placed for s in steps)  # no step drafted nothing: every one-token step is a counted one


def test_a_step_that_drafted_nothing_and_one_that_accepted_nothing_are_marked_unplaced():
    counts = engine.StepCounts(accepted=(0, 1), drafted=(4, 4))
    chunks = [chunk(1.0, 9), chunk(2.0, 1), chunk(3.0, 2), chunk(4.0, 3, 4)]  # one of the middle two drafted nothing
    steps = engine_steps(chunks, counts, t0=0.0)
    assert [(s.accepted, s.drafted) for s in steps] == [(0, 0), (0, 4), (0, 0), (1, 4)]
    assert [s.placed for s in steps] == [True, False, False, True]


def test_the_last_step_cut_by_the_budget_keeps_what_arrived():
    steps = engine_steps([chunk(1.0, 9), chunk(2.0, 1, 2)], engine.StepCounts((3,), (3,)), t0=0.0)
    assert steps[-1] == Step((1, 2), 2, 3, 0, 1.0, 2.0)  # its third draft was accepted, then cut: none rejected


def test_without_vllm_installed_the_row_says_how_to_add_it(monkeypatch, tmp_path):
    monkeypatch.setenv(engine.PYTHON_ENV, str(tmp_path / "no-python"))
    with pytest.raises(SpecvizError, match="is not a file"):
        engine.vllm_python()
    monkeypatch.delenv(engine.PYTHON_ENV)
    monkeypatch.setattr(engine, "_REPO", tmp_path)
    with pytest.raises(SpecvizError, match="make vllm"):
        engine.vllm_python()


def test_a_pair_whose_heads_vllm_cannot_run_is_refused_before_a_server_starts(perturbed_pair):
    with pytest.raises(SpecvizError, match="heads of size 16"):
        list(specviz.run("vllm", perturbed_pair, PROMPT, max_new_tokens=4))


def test_a_vllm_url_where_nothing_listens_is_one_clear_error(head32_pair):
    give_urls([f"vllm=http://127.0.0.1:{engine.free_port()}"])
    try:
        with pytest.raises(SpecvizError, match=r"cannot reach the vLLM server at http://127\.0\.0\.1:"):
            list(specviz.run("vllm", head32_pair, [1, 2, 3], max_new_tokens=2))
    finally:
        engine.SERVERS.given.clear()


def test_a_vllm_url_must_name_a_vllm_row():
    with pytest.raises(SpecvizError, match="NAME one of vllm, vllm_ngram, vllm_draft"):
        give_urls(["vanilla=http://127.0.0.1:1"])
    with pytest.raises(SpecvizError, match="http"):
        give_urls(["vllm=127.0.0.1:8000"])


@pytest.fixture(scope="module")
def head32_pair():
    target = tiny_model(seed=1, hidden=64, layers=4, heads=2, kv_heads=1)
    draft = perturbed_copy(target, 0.02, seed=3)
    return ModelPair("tiny-head32", target, draft, tiny_tokenizer(), True, (0,), {"device": "cpu", "dtype": "float32"})


def group_alive(pgid: int, within_s: float = 10.0) -> bool:
    """Whether a process of group `pgid` is still running (not a zombie) after `within_s` seconds."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        states = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rpartition(")")[2].split()
                if int(fields[2]) == pgid:
                    states.append(fields[0])
        if all(s == "Z" for s in states):
            return False
        time.sleep(0.5)
    return True


@pytest.fixture(scope="module")
def servers(head32_pair):
    """vLLM's servers for every row (started by the first run of each), stopped when this file ends."""
    engine.vllm_python()  # no vLLM here: every test below fails with how to add it, never skips
    os.environ.setdefault(engine.ARGS_ENV, "--enforce-eager")
    ids = specviz.encode_prompt(head32_pair, PROMPT)
    reference = list(specviz.generate("autoregressive", head32_pair, ids, max_new_tokens=40).summary.output_ids)
    yield ids, reference
    engine.SERVERS.stop_all()


@pytest.mark.parametrize("method", list(ROWS))
def test_every_vllm_row_repeats_the_target_alone_token_for_token(servers, head32_pair, method):
    ids, reference = servers
    previewed: list = []
    records = list(specviz.run(method, head32_pair, ids, max_new_tokens=40, preview=previewed.append, **ROWS[method]))
    assert [t for r in records for t in r.emitted] == reference
    if get_method(method).family.name == "engine chain":  # its tokens went to the preview chunk by chunk
        assert len(previewed) > 1 and [t for chunk in previewed for t in chunk] == reference
    else:
        assert previewed == []  # a target alone records each token as it comes
    for r in records:  # each record is a valid one, as a saved race reads it back
        assert IterationRecord.from_dict(r.to_dict(), where=method) == r
        engine_fields = r.extras(EngineExtra)
        assert engine_fields is not None and r.drafted == r.emitted[: r.accepted]
        assert r.p_target is None and r.q_draft is None  # vLLM reports neither
    # every step's drafts are counted, accepted or rejected; only the last may end inside its accepted drafts
    assert all(r.drafted_count == r.speculation_length for r in records[:-1])
    summary = summarize(records)
    if get_method(method).family.name == "engine chain":
        assert summary.drafted > 0  # it drafted (the random target repeats no n-gram of the prompt: none kept)
    else:
        assert summary.iterations == len(reference) and summary.drafted == 0
    if method == "vllm_draft":  # the perturbed copy agrees with the target often
        assert summary.accepted > 0 and summary.iterations < len(reference)


def test_a_server_killed_mid_race_is_one_error_then_starts_again(servers, head32_pair):
    ids, reference = servers
    list(specviz.run("vllm", head32_pair, ids, max_new_tokens=4))
    (server,) = [s for c, s in engine.SERVERS.started.items() if not c.speculative_config]
    server.process.kill()
    server.process.wait()
    with pytest.raises(SpecvizError, match="exited"):
        list(specviz.run("vllm", head32_pair, ids, max_new_tokens=4))
    assert not group_alive(server.process.pid), "its engine's processes outlived it"
    records = list(specviz.run("vllm", head32_pair, ids, max_new_tokens=8))  # a new server
    assert [t for r in records for t in r.emitted] == reference[:8]


def test_a_stream_closed_mid_way_ends_the_request(servers, head32_pair):
    ids, reference = servers
    run = specviz.run("vllm", head32_pair, ids, max_new_tokens=40)
    first = [next(run) for _ in range(3)]  # the target alone streams token by token
    run.close()
    assert [t for r in first for t in r.emitted] == reference[:3]
    again = list(specviz.run("vllm", head32_pair, ids, max_new_tokens=6))  # the server serves the next at once
    assert [t for r in again for t in r.emitted] == reference[:6]


def test_a_server_of_another_model_is_refused(servers, head32_pair):
    ids, _ = servers
    list(specviz.run("vllm", head32_pair, ids, max_new_tokens=2))
    (server,) = [s for c, s in engine.SERVERS.started.items() if not c.speculative_config]
    other = tiny_model(seed=2, hidden=64, layers=4, heads=2, kv_heads=1)
    stranger = dataclasses.replace(head32_pair, target=other, name="another")
    give_urls([f"vllm={server.url}"])
    try:
        with pytest.raises(SpecvizError, match="not this pair's target"):
            list(specviz.run("vllm", stranger, ids, max_new_tokens=4))
        engine.SERVERS.given["vllm"].checked = False
        records = list(specviz.run("vllm", head32_pair, ids, max_new_tokens=4))  # the right pair is served
        assert len(records) == 4
    finally:
        engine.SERVERS.given.clear()


def test_a_race_says_its_server_is_starting_then_streams_vllm_beside_specviz(servers, head32_pair):
    """The Race path of the vLLM rows: a row whose server is not up says so on its panel while it starts (a
    config of its own: γ = 2), then its tokens are the target alone's; the why-γ answer reads it against vLLM's
    target alone, and the plot of acceptance per position draws it."""
    import threading

    from specviz.serving.racing import RaceSettings, run_race
    from specviz.ui.race import race_outputs
    from specviz.ui.why import gamma_markdown

    _, reference = servers
    methods = ("autoregressive", "vllm", "vllm_draft")
    settings = RaceSettings(PROMPT, methods, max_new_tokens=24, options={"vllm_draft.num_speculative_tokens": 2})
    messages = []
    for race in run_race(head32_pair, settings, {}, threading.Event()):
        messages += [r.message for r in race.runs if r.name == "vllm_draft" and r.message]
    runs = {r.name: r for r in race.runs}
    assert all(r.status == "done" for r in runs.values()), [(r.name, r.status, r.message) for r in race.runs]
    assert any(m.startswith("starting vLLM for tiny-head32") for m in messages), messages
    assert runs["vllm_draft"].message.startswith("vLLM is serving tiny-head32 (started in ")
    for name in methods:
        assert [t for r in runs[name].records for t in r.emitted] == reference[:24], name
    assert "raced at γ = 2" in gamma_markdown(race) and "vLLM, target alone" in gamma_markdown(race)
    (trace,) = race_outputs(race)["positions"].data  # the one chain row
    assert trace.name == "vLLM draft model" and len(trace.x) <= 2
    from specviz.ui.panels import nothing_drafted

    assert nothing_drafted(runs["vllm"]) == ""  # a target alone drafts nothing by design: no note of it
    from specviz.stepthrough import explain_iteration

    step = explain_iteration(runs["vllm_draft"].records, 1, race.prompt_ids, race.options, token_text=str)
    assert any(n.startswith("an outside engine's step: it drafted 2") for n in step.notes), step.notes


def test_two_tensor_parallel_ranks_emit_what_one_does(servers, head32_pair, monkeypatch):
    """vLLM's CPU backend splits the model over two ranks (one core each, over shared memory): the same tokens."""
    ids, reference = servers
    monkeypatch.setenv(engine.TP_ENV, "2")
    records = list(specviz.run("vllm", head32_pair, ids, max_new_tokens=24))
    assert [t for r in records for t in r.emitted] == reference[:24]
    (config,) = [c for c in engine.SERVERS.started if c.tensor_parallel_size == 2]
    command = config.command("python", 1)
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    first, second = (set(part.split(",")) for part in engine.rank_cores(2).split("|"))
    assert first and second and not first & second  # a core or more each, none shared
    three = tiny_model(seed=4, hidden=96, layers=2, heads=3, kv_heads=1)  # heads of 32, but three of them
    odd = dataclasses.replace(head32_pair, target=three, name="three-heads")
    with pytest.raises(SpecvizError, match="this pair's target has 3"):  # said before a server starts
        list(specviz.run("vllm", odd, ids, max_new_tokens=2))
    monkeypatch.setenv(engine.TP_ENV, str(len(os.sched_getaffinity(0)) + 1))
    with pytest.raises(SpecvizError, match="must be a whole number from 1 to this machine's"):
        list(specviz.run("vllm", head32_pair, ids, max_new_tokens=2))
