"""Online Speculative Decoding: the losses, the buffers, the learner, and losslessness while learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz
from specviz import metrics
from specviz.extras import OnlineExtra
from specviz.methods import get_method, new_session
from specviz.models import tiny
from specviz.osd.analysis import moving_alpha, token_table
from specviz.osd.buffers import ReplayBuffer, RequestBuffer, Sample, TargetDistributions
from specviz.osd.learner import OnlineLearner, OsdConfig, load_adapted_draft
from specviz.osd.losses import LOSSES, distillation_loss
from specviz.plots.online import acceptance_over_stream, acceptance_per_domain, shift_points, token_precision
from specviz.prompts import Prompt, load_suite
from specviz.serving.stream import StreamConfig, replay_static, request_stream, simulate

PROMPT = "def fibonacci(n):"


@pytest.mark.parametrize("loss", LOSSES)
def test_each_loss_is_zero_iff_q_equals_p(loss):
    gen = torch.Generator().manual_seed(0)
    p_logits = torch.randn(5, 11, generator=gen) * 3
    assert distillation_loss(p_logits, p_logits, loss).abs() < 1e-6
    assert distillation_loss(p_logits, p_logits + 7.0, loss).abs() < 1e-6  # a shift of the logits is the same q
    q_logits = torch.randn(5, 11, generator=gen) * 3
    assert distillation_loss(p_logits, q_logits, loss) > 1e-3
    extreme = torch.full((2, 11), -1e4)
    extreme[:, 0] = 1e4  # (almost) one-hot: log space keeps it finite
    assert torch.isfinite(distillation_loss(p_logits[:2], extreme, loss))


@pytest.mark.parametrize("loss", LOSSES)
def test_a_gradient_step_moves_q_toward_p(loss):
    gen = torch.Generator().manual_seed(1)
    p_logits = torch.randn(4, 9, generator=gen) * 2
    q_logits = torch.randn(4, 9, generator=gen).requires_grad_(True)
    p = torch.softmax(p_logits, -1)

    def distance() -> float:
        return (torch.softmax(q_logits, -1) - p).abs().sum().item()

    before_loss, before_distance = distillation_loss(p_logits, q_logits, loss), distance()
    before_loss.backward()
    with torch.no_grad():
        q_logits -= 0.5 * q_logits.grad
    assert distillation_loss(p_logits, q_logits, loss) < before_loss
    assert distance() < before_distance


def test_top_k_storage_keeps_the_top_k_and_spreads_the_tail():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(2)) * 2
    stored = TargetDistributions.from_logits(logits, top_k=8)
    assert stored.nbytes == 3 * 8 * (2 + 4)
    full = stored.full()
    assert torch.allclose(full.exp().sum(-1), torch.ones(3), atol=1e-5)
    exact = torch.log_softmax(logits, -1)
    top = exact.topk(8, dim=-1).indices
    assert torch.allclose(full.gather(-1, top), exact.gather(-1, top), atol=2e-2)
    assert torch.allclose(TargetDistributions.from_logits(logits, top_k=0).full(), exact, atol=1e-2)


def test_replay_buffer_keeps_at_most_cap_positions_and_evicts_the_oldest():
    def sample(i, n):
        return Sample((i,) * 10, tuple(range(1, n + 1)), TargetDistributions.from_logits(torch.zeros(n, 4), 0))

    q = ReplayBuffer(cap=10)
    for i in range(6):
        q.add(sample(i, 3))
        assert q.positions <= 10
    assert [s.ids[0] for s in q.samples] == [3, 4, 5]
    assert q.evicted == 3
    assert len(q.take()) == 3 and len(q) == 0 and q.positions == 0


def test_request_buffer_records_the_rejected_positions(perturbed_pair):
    buffer = RequestBuffer(positions="wrong", top_k=16)
    learner = OnlineLearner(perturbed_pair.draft)
    result = specviz.generate("vanilla", perturbed_pair, PROMPT, max_new_tokens=40)
    rejected = [r.position + r.accepted for r in result.records if r.accepted < len(r.drafted)]
    assert rejected, "the perturbed pair rejects some drafts"
    # the same run through the learner's buffer
    specviz.generate("osd", perturbed_pair, PROMPT, max_new_tokens=40, session=learner)
    sample = learner.replay.samples[0]
    assert list(sample.positions) == rejected
    assert list(sample.ids) == list(result.prompt_ids) + list(result.summary.output_ids)
    assert buffer.finish([1, 2]) is None  # nothing observed: nothing to learn


def acceptance(result) -> float:
    return result.summary.accepted / result.summary.drafted


@pytest.fixture(scope="module")
def repetitive_stream_rows(random_pair):
    """The serving simulator on a repetitive toy stream: the tiny random draft starts at alpha ~ 0 on
    this prompt; served the same request again and again, it learns the target's continuation."""
    learner = OnlineLearner(random_pair.draft, OsdConfig(update_interval=1, lr=3e-3, steps=4))
    prompts = [Prompt("toy", "toy/0", PROMPT)] * 8
    rows = list(simulate(random_pair, prompts, learner, max_new_tokens=32, speculation_length=4, measure_static_from=6))
    return rows, learner


def test_the_simulator_shows_alpha_rising_on_a_repetitive_stream(repetitive_stream_rows):
    rows, learner = repetitive_stream_rows
    assert learner.version == 8  # one update after each request (synchronous: between requests)
    assert [r["draft_version"] for r in rows] == list(range(8))
    osd = [r["osd_accepted"] / r["osd_tested"] for r in rows]
    static = [r["static_accepted"] / r["static_tested"] for r in rows]
    assert len(set(static)) == 1  # the static draft never changes
    assert osd[0] == static[0]  # both start from the same draft
    assert max(osd[-3:]) >= static[-1] + 0.1, osd
    assert learner.updates[-1]["loss_last"] < learner.updates[0]["loss_first"]
    assert all(r["static_matches"] for r in rows[6:])  # the replayed static acceptance is what vanilla SD really gets
    assert all(r["ar_matches"] and r["ar_wall_s"] > 0 for r in rows[6:])  # the target alone served the same tokens
    assert "ar_wall_s" not in rows[5]
    assert all(r["update"]["version"] == r["draft_version"] + 1 for r in rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("draft", ["perturbed", "reduced"])
def test_the_static_replay_equals_vanilla_decoding(draft, dtype):
    """Iteration by iteration, the replay drafts, keeps and emits what vanilla SD does (budget cuts included),
    in bfloat16 too, where drafting in other chunks than the served ones flips near-ties."""
    pair = tiny.tiny_pair(draft=draft, dtype=dtype)
    cases = [(PROMPT, 40, 4), ("Janet's ducks lay 16 eggs per day.", 7, 4), ("x", 33, 3)]
    for prompt, max_new, gamma in [*cases, (load_suite("humaneval")[4].text, 48, 4)]:
        result = specviz.generate("vanilla", pair, prompt, max_new_tokens=max_new, speculation_length=gamma)
        replayed = replay_static(
            pair,
            pair.draft,
            result.prompt_ids,
            result.summary.output_ids,
            speculation_length=gamma,
            max_new_tokens=max_new,
        )
        assert [(r.position, r.drafted, r.accepted, r.emitted) for r in replayed] == [
            (r.position, r.drafted, r.accepted, r.emitted) for r in result.records
        ]
        assert [metrics.tested(r) for r in replayed] == [metrics.tested(r) for r in result.records]


def test_before_its_first_update_the_online_draft_scores_what_the_static_draft_scores():
    """With no update yet the online draft is the static draft: both rows agree to the token. HumanEval/4
    at 24 tokens in bfloat16 is a near-tie that a one-pass (teacher-forced) replay of the static draft
    drafted otherwise (static accepted 12 of 22 tested, online 11 of 22)."""
    pair = tiny.tiny_pair(draft="perturbed", dtype=torch.bfloat16)
    prompts = [load_suite("humaneval")[4], Prompt("toy", "toy/0", PROMPT), load_suite("gsm8k")[0]]
    learner = OnlineLearner(pair.draft, OsdConfig(update_interval=len(prompts) + 1))  # no update in this stream
    rows = list(simulate(pair, prompts, learner, max_new_tokens=24, speculation_length=4))
    assert learner.version == 0
    online = [(r["osd_drafted"], r["osd_accepted"], r["osd_tested"]) for r in rows]
    static = [(r["static_drafted"], r["static_accepted"], r["static_tested"]) for r in rows]
    assert online == static


def test_request_streams_shift_between_suites_or_mix_them():
    shifted = request_stream(StreamConfig(("gsm8k", "humaneval"), requests=10, shift_every=3))
    assert [p.suite for p in shifted] == ["gsm8k"] * 3 + ["humaneval"] * 3 + ["gsm8k"] * 3 + ["humaneval"]
    assert len({p.id for p in shifted[:3]} | {p.id for p in shifted[6:9]}) == 6  # a suite continues where it left off
    even = request_stream(StreamConfig(("gsm8k", "mbpp"), requests=9))
    assert [p.suite for p in even] == ["gsm8k"] * 5 + ["mbpp"] * 4
    repetitive = request_stream(StreamConfig(("gsm8k",), requests=6, distinct=2))
    assert [p.id for p in repetitive[:2]] * 3 == [p.id for p in repetitive]
    mixed = request_stream(StreamConfig(("gsm8k", "mbpp"), requests=40, mixed=True))
    assert {p.suite for p in mixed} == {"gsm8k", "mbpp"}
    with pytest.raises(specviz.SpecvizError):
        StreamConfig(())


def test_moving_alpha_and_token_precision_recall():
    assert moving_alpha([1, 0, 3], [2, 2, 4], window=2) == [0.5, 0.25, 0.5]
    assert moving_alpha([0], [0], window=5) == [None]
    actual = np.array([5, 5, 7, 7, 9])
    before = np.array([7, 5, 5, 7, 9])  # 5: guessed twice, right once; recall 1/2
    after = np.array([5, 5, 7, 7, 9])
    table = {r["token"]: r for r in token_table(before, after, actual, top=3)}
    assert table[5]["precision_before"] == 0.5 and table[5]["recall_before"] == 0.5
    assert table[5]["precision_after"] == table[5]["recall_after"] == 1.0
    assert table[9]["precision_before"] == 1.0
    assert token_table(before, after, actual, top=3)[-1]["token"] == 9  # sorted by precision gain


def test_the_online_figures_build_from_simulator_rows(repetitive_stream_rows):
    rows, learner = repetitive_stream_rows
    fig = acceptance_over_stream(rows, learner.updates, window=3)
    names = [t.name for t in fig.data]
    assert "online draft (OSD), last 3 requests" in names and "static draft, last 3 requests" in names
    assert "loss at its last step" in names
    shifted = [dict(r, suite="gsm8k" if r["request"] < 4 else "mbpp") for r in rows]
    assert shift_points(shifted) == [4]
    marks = [a.text for a in acceptance_over_stream(shifted, [], window=3).layout.annotations]
    assert marks.count("shift to mbpp") == 1  # the shift marker
    assert len(acceptance_per_domain(shifted, window=3).data) == 4
    tokens = [
        {
            "token": 5,
            "text": "a",
            "count": 3,
            "precision_before": 0.2,
            "precision_after": 0.6,
            "recall_before": 0.1,
            "recall_after": 0.3,
        }
    ]
    fig = token_precision(tokens)  # bars across: a token's text reads level on a phone
    assert list(fig.data[1].x) == [0.6] and list(fig.data[1].y) == ["'a'"] and fig.data[1].orientation == "h"
    assert fig.layout.legend.orientation == "h" and "precision" in fig.layout.xaxis.title.text
    assert fig.layout.xaxis.range[1] > 1  # a recall gain of 1 (a diamond at x = 1) was cut in half at the edge


def test_the_stream_figure_marks_each_new_draft_and_says_when_there_is_none_yet(repetitive_stream_rows):
    """Issue 38 item 6: until the first update the two lines are one on top of the other; the figure says
    why, draws the static line dashed over the online one, and marks where each new draft version serves."""
    rows, learner = repetitive_stream_rows
    fig = acceptance_over_stream(rows[:4], learner.updates[:3], window=3)
    assert [a.text for a in fig.layout.annotations if a.text.startswith("draft v")] == [
        "draft v1",
        "draft v2",
        "draft v3",
    ]
    lines = [t for t in fig.data if t.mode == "lines" and t.name.endswith("last 3 requests")]
    assert [t.name.split(",")[0] for t in lines] == ["online draft (OSD)", "static draft"]  # static drawn on top
    assert lines[1].line.dash == "dash" and lines[1].line.width < lines[0].line.width
    before = acceptance_over_stream(rows[:1], [], window=3)
    assert any(a.text.startswith("no update yet") for a in before.layout.annotations)
    assert before.layout.xaxis2.title.text == "requests served" and tuple(before.layout.xaxis2.range) == (0.5, 1.5)
    assert before.layout.xaxis2.dtick == 1  # whole requests: a short stream had ticks at 0.5, 1.5, ...


def test_greedy_parity_while_learning_after_every_request(perturbed_pair, random_pair, reduced_pair):
    for pair in (perturbed_pair, random_pair, reduced_pair):
        learner = OnlineLearner(pair.draft, OsdConfig(update_interval=1, lr=1e-2, steps=1))
        for prompt in (PROMPT, "Janet's ducks lay 16 eggs per day.", PROMPT):
            ref = specviz.generate("autoregressive", pair, prompt, max_new_tokens=24).summary.output_ids
            got = specviz.generate("osd", pair, prompt, max_new_tokens=24, session=learner)
            assert got.summary.output_ids == ref
            assert {r.extras(OnlineExtra).draft_version for r in got.records} == {
                learner.version - 1
            }  # one draft per request
        assert learner.version == 3
        assert all(np.isfinite(u["loss_first"]) for u in learner.updates), "a reduced head's loss stays finite"
        changed = [
            not torch.equal(a, b) for a, b in zip(learner.serving.parameters(), pair.draft.parameters(), strict=True)
        ]
        assert any(changed), "the draft learned something"
        assert all(
            torch.equal(a, b) for a, b in zip(learner.serving.parameters(), learner.trainee.parameters(), strict=True)
        )
        assert all(p.grad is None for p in learner.trainee.parameters()), "no gradients kept between updates"


def test_background_updates_swap_in_between_requests(random_pair):
    learner = OnlineLearner(random_pair.draft, OsdConfig(update_interval=1, background=True, steps=2, lr=1e-2))
    specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=learner)
    assert learner.version == 0  # the update runs in the worker; nothing is swapped mid-stream
    learner.wait()
    assert learner.version == 1 and learner.updates[0]["ms"] > 0


@pytest.mark.parametrize("background", [False, True])
def test_the_draft_learns_when_requests_run_without_autograd(random_pair, background):
    """The app steps every run under torch.inference_mode (runner.without_autograd); an update, which
    comes at the end of a request, still trains and swaps in, request after request."""
    from specviz.runner import without_autograd

    learner = OnlineLearner(random_pair.draft, OsdConfig(update_interval=1, lr=1e-2, steps=1, background=background))
    ids = specviz.encode_prompt(random_pair, PROMPT)
    ref = [t for r in specviz.run("autoregressive", random_pair, ids, max_new_tokens=12) for t in r.emitted]
    for _ in range(3):
        got = [
            t
            for r in without_autograd(specviz.run("osd", random_pair, ids, max_new_tokens=12, session=learner))
            for t in r.emitted
        ]
        assert got == ref
    learner.wait()
    assert learner.version == 3 and len(learner.updates) == 3
    assert not all(
        torch.equal(a, b) for a, b in zip(learner.serving.parameters(), random_pair.draft.parameters(), strict=True)
    )


def test_save_and_load_roundtrip(tmp_path, random_pair):
    learner = OnlineLearner(random_pair.draft, OsdConfig(update_interval=1, lr=1e-2, steps=1))
    specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=learner)
    path = learner.save(tmp_path / "draft.safetensors")
    fresh = OnlineLearner(random_pair.draft)
    fresh.load(path)
    adapted = load_adapted_draft(random_pair, path)
    for a, b, c in zip(
        learner.serving.state_dict().values(),
        fresh.trainee.state_dict().values(),
        adapted.draft.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not all(
        torch.equal(a, b) for a, b in zip(adapted.draft.parameters(), random_pair.draft.parameters(), strict=True)
    )


def test_the_session_gives_each_series_its_own_learner(random_pair):
    """Learners copy on write: they serve the pair's draft until their first update, then their own."""
    spec = get_method("osd")
    a, b = new_session(spec, random_pair), new_session(spec, random_pair)
    assert a is not b and a.serving is random_pair.draft and a._trainee is None  # no copy held yet
    before = [p.clone() for p in random_pair.draft.parameters()]
    a.config = OsdConfig(update_interval=1, lr=1e-2, steps=1)
    specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=a)
    assert a.version == 1 and a.serving is not random_pair.draft and b.serving is random_pair.draft
    assert all(
        torch.equal(x, y) for x, y in zip(before, random_pair.draft.parameters(), strict=True)
    )  # the pair's draft untouched


def test_at_most_capacity_learners_hold_their_own_weights(random_pair):
    """A server's bound on adapted drafts: one more learner taking its weights makes the least
    recently used give its own back; that learner serves the pair's draft again, still losslessly."""
    from specviz.serving.pools import AdaptedDrafts

    pool = AdaptedDrafts(capacity=2)
    learners = [
        OnlineLearner(random_pair.draft, OsdConfig(update_interval=1, lr=1e-2, steps=1), pool=pool) for _ in range(3)
    ]
    ref = specviz.generate("autoregressive", random_pair, PROMPT, max_new_tokens=16).summary.output_ids
    for learner in learners[:2]:
        specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=learner)
    specviz.generate(
        "osd", random_pair, PROMPT, max_new_tokens=16, session=learners[0]
    )  # learner 1 is now the least recent
    assert [x.adapted for x in learners] == [True, True, False] and len(pool) == 2
    specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=learners[2])
    first, second, third = learners
    assert first.adapted and third.adapted and not second.adapted and len(pool) == 2
    assert second.serving is random_pair.draft and second._trainee is None and second._optimizer is None
    assert second.releases == 1 and second.version == 0 and len(second.updates) == 1  # its history stays
    again = specviz.generate("osd", random_pair, PROMPT, max_new_tokens=16, session=second)
    assert again.summary.output_ids == ref and {r.extras(OnlineExtra).draft_version for r in again.records} == {0}
    assert second.adapted and not first.adapted  # it learns again, from the pair's draft; the least recent gave way


def test_bad_options_raise_a_clear_error(random_pair):
    with pytest.raises(specviz.SpecvizError, match="loss"):
        OsdConfig(loss="mse")
    with pytest.raises(specviz.SpecvizError, match="OnlineLearner"):
        specviz.run("osd", random_pair, PROMPT, session="not a learner")
    with pytest.raises(specviz.SpecvizError, match="no session"):
        specviz.run("vanilla", random_pair, PROMPT, session=new_session(get_method("osd"), random_pair))


def test_the_experiment_reports_alpha_at_the_start_and_end_of_each_suite_stretch():
    from specviz.experiments.osd import segments

    def row(i, suite, osd):
        return {
            "request": i,
            "suite": suite,
            "osd_accepted": osd,
            "osd_tested": 4,
            "static_accepted": 1,
            "static_tested": 4,
        }

    rows = [row(i, "gsm8k", 1 + (i >= 2)) for i in range(4)] + [row(i, "mbpp", 0 + 2 * (i >= 6)) for i in range(4, 8)]
    segs = segments(rows, window=2)
    assert [s["requests"] for s in segs] == [[0, 3], [4, 7]] and [s["suite"] for s in segs] == ["gsm8k", "mbpp"]
    assert (segs[0]["osd_alpha_start"], segs[0]["osd_alpha_end"]) == (0.25, 0.5)
    assert (segs[1]["osd_alpha_start"], segs[1]["osd_alpha_end"]) == (0.0, 0.5)  # the dip at the shift, then recovery
    assert segs[1]["static_alpha_start"] == segs[1]["static_alpha_end"] == 0.25
    assert len(segments(rows[:4], window=50)) == 1


def test_full_and_top_k_distributions_do_not_concatenate():
    """One buffer holds one form: mixing them is refused whichever comes first (a full part first used
    to give a top-k buffer without indices; a top-k part first, a TypeError from torch.cat)."""
    logits = torch.randn(3, 16)
    full, top = TargetDistributions.from_logits(logits, top_k=0), TargetDistributions.from_logits(logits, top_k=4)
    for parts in ([full, top], [top, full]):
        with pytest.raises(ValueError, match="full distributions with top-k"):
            TargetDistributions.cat(parts)
    assert TargetDistributions.cat([top, top]).indices.shape == (6, 4)
    assert TargetDistributions.cat([full, full]).indices is None
