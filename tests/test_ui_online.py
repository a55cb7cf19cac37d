"""The Online learning tab: its handlers on the tiny pair, without a server."""

from __future__ import annotations

import threading
import time

import gradio as gr
import pytest

from specviz.errors import SpecvizError
from specviz.serving.stops import KeyedStop
from specviz.ui import online
from tests.conftest import tab_context


def test_serving_a_stream_updates_the_visitors_own_learner(random_pair, tmp_path):
    states = list(
        online.serve_stream(
            "tiny-random", ["gsm8k"], 4, 0, False, 1, 8, 3, 2, 3e-3, "jsd", False, load_pair=lambda name: random_pair
        )
    )
    final = states[-1]
    assert len(final["rows"]) == 4 and final["learner"].version == 2
    assert final["learner"].serving is not random_pair.draft
    text = online.summary_markdown(final, window=3)
    assert "4 / 4 requests served" in text and "2 updates" in text
    fig, table = online.learned_tokens(final, window=4)
    assert fig.data and "\n| token |" in table
    assert (
        table.startswith("The draft's greedy guess")
        and "in the last 4 requests" in table
        and "after its 2 updates" in table
    )
    assert online.save_draft(final, tmp_path).endswith(".safetensors")
    assert online.save_draft(None) is None


def test_a_pair_without_a_draft_is_refused(random_pair):
    no_draft = random_pair.with_draft(None)
    with pytest.raises(SpecvizError, match="no draft"):
        next(
            online.serve_stream(
                "x", ["gsm8k"], 4, 0, False, 0, 8, 3, 2, 1e-3, "fkl", False, load_pair=lambda name: no_draft
            )
        )


def test_the_tab_offers_a_short_stream_within_the_limits():
    """Defaults a lecture can wait for (12 requests of 32 tokens, three updates: 16 took over two minutes
    on the default pair, 12 three minutes on a busy CPU), the requests slider capped at the
    deployment's limit, and the three losses of the paper."""
    from specviz.serving.limits import AppLimits

    with gr.Blocks() as demo:
        online.build_tab(tab_context(limits=AppLimits()))
    widgets = {getattr(b, "label", None): b for b in demo.blocks.values()}
    assert widgets["requests in the stream"].value == 12 and widgets["max new tokens per request"].value == 32
    assert widgets["update interval I (requests)"].value == 4
    with gr.Blocks() as demo:
        online.build_tab(tab_context(limits=AppLimits(osd_requests=4)))
    widgets = {getattr(b, "label", None): b for b in demo.blocks.values()}
    assert widgets["requests in the stream"].value == 4 and widgets["requests in the stream"].maximum == 4
    assert widgets["distillation loss (p: target, q: draft)"].choices == [
        ("fkl", "fkl"),
        ("rkl", "rkl"),
        ("jsd", "jsd"),
    ]


def _defaults(demo) -> list:
    """The values on_serve gets from the page as built (the pair, the widgets, the stop state)."""
    serve = next(f for f in demo.fns.values() if f.fn is not None and f.fn.__name__ == "on_serve")
    return [getattr(b, "value", None) for b in serve.inputs]


def test_the_default_stream_is_a_repeating_translation_stream(random_pair):
    """Issue 38 item 6: the default GSM8K stream at lr 3e-5 showed nothing (online and static α both 0.648).
    The default is now translation, a domain the default draft never saw, repeating 4 prompts, at lr 3e-4."""
    handlers, demo = _handlers(load_pair=lambda name: random_pair)
    _, suites, n, _, _, distinct, _, _, interval, lr, *_ = _defaults(demo)
    assert suites == [online.TRANSLATION] and (n, distinct, interval, lr) == (12, 4, 4, 3e-4)
    final = list(handlers["on_serve"](*_defaults(demo), None))[-1][0]
    rows = final["rows"]
    assert len(rows) == 12 and {r["suite"] for r in rows} == {"translation"}
    assert len({r["prompt_id"] for r in rows}) == 4 and final["learner"].version == 3
    from specviz.prompts import load_suite

    translation = {p.id for p in load_suite("translation")}
    assert {r["prompt_id"] for r in rows} <= translation and len(translation) == 80  # Spec-Bench's translation


@pytest.mark.parametrize("suites", [["/etc/passwd"], ["specbench"], []])
def test_a_suite_the_tab_does_not_offer_is_refused(random_pair, suites):
    """Only the tab's own suites: never a file a visitor names, nor a suite the tab does not offer."""
    with pytest.raises(SpecvizError, match="choose prompt suites among translation, gsm8k"):
        next(
            online.serve_stream(
                "x", suites, 2, 0, False, 1, 8, 3, 2, 1e-3, "fkl", False, load_pair=lambda n: random_pair
            )
        )


def test_the_tab_names_alpha_as_the_race_does(random_pair):
    """Issue 38 item 3: α is accepted ÷ tested, under the Race tab's own name, in the summary and the figures."""
    from specviz.plots.online import acceptance_over_stream, acceptance_per_domain
    from specviz.plots.summary import COLUMNS

    final = _stream(random_pair)[-1]
    assert online.ALPHA in COLUMNS and online.ALPHA in online.summary_markdown(final, 4)
    for fig in (acceptance_over_stream(final["rows"], [], 4), acceptance_per_domain(final["rows"], 4)):
        assert fig.layout.yaxis.title.text == online.ALPHA and fig.layout.title.text.startswith("α ")


def test_learned_tokens_are_shown_as_text_not_tokenizer_pieces():
    from specviz.models.pair import readable_token

    class Pieces:  # decodes like a byte-level BPE tokenizer
        def decode(self, ids):
            return {1: " gran", 2: "\n", 3: ""}[ids[0]]

    assert [readable_token(Pieces(), i) for i in (1, 2, 3)] == ["·gran", "⏎", "∅"]


def _stream(pair, requests=4, interval=2, stop=None):
    return list(
        online.serve_stream(
            "tiny-random", ["gsm8k"], requests, 0, False, 1, 8, 3, interval, 3e-3, "jsd", False, lambda n: pair, stop
        )
    )


def test_a_download_is_written_once_per_draft_version_and_the_old_one_deleted(random_pair, tmp_path):
    """Each click wrote a new 96 MB file on the default pair, never deleted (+964 MB in 5 clicks, issue 41)."""
    from specviz.serving.pools import DRAFT_FILES

    final = _stream(random_pair)[-1]
    paths = {online.save_draft(final, tmp_path) for _ in range(5)}
    assert len(paths) == 1 and len(list(tmp_path.iterdir())) == 1
    first = paths.pop()
    final["learner"].version += 1  # as after one more update
    second = online.save_draft(final, tmp_path)
    assert second != first and [p.name for p in tmp_path.iterdir()] == [second.rsplit("/", 1)[-1]]
    capacity = DRAFT_FILES.capacity
    DRAFT_FILES.capacity = 2  # server-wide: three visitors' learners, two files kept
    try:
        others = [_stream(random_pair)[-1] for _ in range(2)]
        for st in others:
            online.save_draft(st, tmp_path)
        assert len(list(tmp_path.iterdir())) == 2 and not (tmp_path / second.rsplit("/", 1)[-1]).exists()
    finally:
        DRAFT_FILES.capacity = capacity


def test_a_draft_that_never_learned_is_not_written(random_pair, tmp_path):
    unlearned = _stream(random_pair, requests=1, interval=4)[-1]
    assert unlearned["learner"].version == 0
    with pytest.raises(gr.Error, match="has not learned yet"):
        online.save_draft(unlearned, tmp_path)
    assert not list(tmp_path.iterdir())


def test_stop_ends_the_stream_within_a_request(random_pair):
    stop = threading.Event()
    states = []
    for st in online.serve_stream(
        "tiny-random", ["gsm8k"], 6, 0, False, 1, 64, 3, 2, 3e-3, "jsd", False, lambda n: random_pair, stop
    ):
        states.append(len(st["rows"]))
        stop.set()  # after the first request: the second ends at its first iteration, without a row
    assert states == [1, 1]


def _handlers(**ctx_overrides):
    with gr.Blocks() as demo:
        online.build_tab(tab_context(**ctx_overrides))
    return {f.fn.__name__: f.fn for f in demo.fns.values() if f.fn is not None}, demo


@pytest.mark.parametrize("lr", [1e308, 0.0, -1.0, float("nan")])
def test_the_learning_rate_is_bounded(random_pair, lr):
    """1e308 made the trainee's weights inf: "This is a bug" and a traceback (issue 41)."""
    handlers, demo = _handlers(load_pair=lambda name: random_pair)
    lr_box = next(b for b in demo.blocks.values() if getattr(b, "label", None) == "learning rate")
    assert (lr_box.minimum, lr_box.maximum) == (online.LEAST_LR, online.MOST_LR)
    with pytest.raises(gr.Error, match=r"learning rate must be from 1e-07 to 0\.01"):
        list(
            handlers["on_serve"](
                "tiny-random", ["gsm8k"], 2, 0, False, 1, 8, 3, 2, lr, "fkl", False, 5, KeyedStop(), None
            )
        )


def test_the_tabs_stop_reaches_the_running_stream(random_pair):
    handlers, _ = _handlers(load_pair=lambda name: random_pair)
    stop = KeyedStop()
    pages = handlers["on_serve"]("tiny-random", ["gsm8k"], 6, 0, False, 1, 64, 3, 2, 3e-3, "fkl", False, 5, stop, None)
    first = next(pages)
    assert "1 / 6 requests served" in first[1] and stop.keys
    stop.set()  # the Stop button: the stream's key is requested, the models' thread sees it
    rest = list(pages)
    assert "1 / 6 requests served" in rest[-1][1] and not stop.keys


def test_the_analysis_and_the_download_wait_for_their_turn_on_the_models(random_pair, tmp_path, monkeypatch):
    """They ran beside timed races (draft passes, a 96 MB write): issue 41."""
    from specviz.serving.turns import TURNS

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    handlers, _ = _handlers(load_pair=lambda name: random_pair)
    final = _stream(random_pair)[-1]
    done: list[str] = []
    holder = TURNS.join()
    try:
        for name, args in (("on_analyse", (final, 4)), ("save_draft", (final,))):
            worker = threading.Thread(target=lambda n=name, a=args: done.append((n, handlers[n](*a))[0]))
            worker.start()
            time.sleep(0.5)
            assert name not in done  # waits while another run holds the models
            TURNS.leave(holder)
            worker.join(60)
            assert name in done
            holder = TURNS.join()
    finally:
        TURNS.leave(holder)


def test_one_update_is_one_update(random_pair):
    final = _stream(random_pair, requests=2, interval=2)[-1]
    assert "1 update, " in online.summary_markdown(final, 4)  # it said "1 updates"


def test_before_the_first_update_nothing_is_said_to_be_learned(random_pair):
    """Issue 38 item 6: before the draft's first update the token table showed before = after rows (the
    static draft against itself). Now it says nothing was learned yet, and the two α agree exactly."""
    handlers, _ = _handlers(load_pair=lambda name: random_pair)
    unlearned = _stream(random_pair, requests=2, interval=4)[-1]
    assert unlearned["learner"].version == 0
    fig, note = online.learned_tokens(unlearned, 4)
    assert fig is None and "Nothing learned yet" in note and "every 4 requests" in note and "|" not in note
    plot, page_note = handlers["on_analyse"](unlearned, 4)
    assert plot["visible"] is False and page_note == note  # no empty figure box above the note
    assert [(r["osd_accepted"], r["osd_tested"]) for r in unlearned["rows"]] == [
        (r["static_accepted"], r["static_tested"]) for r in unlearned["rows"]
    ]
    summary = online.summary_markdown(unlearned, 4)
    assert (
        "no update yet (the first starts after 4 requests" in summary and "online draft is the static draft" in summary
    )
    learned = _stream(random_pair, requests=2, interval=2)[-1]
    plot, table = handlers["on_analyse"](learned, 4)
    assert plot["visible"] is True and plot["value"].data and "\n| token |" in table
