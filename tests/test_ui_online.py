"""The Online learning tab: its handlers on the tiny pair, without a server."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz.errors import SpecvizError
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
    assert fig.data and table.startswith("| token |")
    assert online.save_draft(final).endswith(".safetensors")
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
    """Defaults a lecture can wait for (8 requests of 32 tokens, two updates: 16 took over two minutes
    on the default pair, 12 three minutes on a busy CPU), the requests slider capped at the
    deployment's limit, and the three losses of the paper."""
    from specviz.serving.limits import AppLimits

    with gr.Blocks() as demo:
        online.build_tab(tab_context(limits=AppLimits()))
    widgets = {getattr(b, "label", None): b for b in demo.blocks.values()}
    assert widgets["requests in the stream"].value == 8 and widgets["max new tokens per request"].value == 32
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


def test_learned_tokens_are_shown_as_text_not_tokenizer_pieces():
    from specviz.models.pair import readable_token

    class Pieces:  # decodes like a byte-level BPE tokenizer
        def decode(self, ids):
            return {1: " gran", 2: "\n", 3: ""}[ids[0]]

    assert [readable_token(Pieces(), i) for i in (1, 2, 3)] == ["·gran", "⏎", "∅"]
