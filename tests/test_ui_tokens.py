"""Token spans and their HTML: correct incremental detokenisation, kinds, hover text, escaping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specviz
from specviz.models.tiny import TINY_VOCAB, tiny_tokenizer
from specviz.records import IterationRecord
from specviz.spans import IncrementalDetokenizer, SpanBuilder, TokenSpan
from specviz.ui.tokens import plain_text, tokens_html

TEXTS = ["def fib(n):\n    return n", "héllo wörld — 你好 🎉 naïve café", "   spaces\tand\ttabs\n\n", "x"]


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_pieces_join_to_the_text_and_never_show_half_characters(text):
    tok = tiny_tokenizer()
    ids = tok(text)["input_ids"]
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(t) for t in ids] + [detok.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert len(ids) > len([p for p in pieces if p]) or text.isascii()  # multi-byte chars span tokens


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, TINY_VOCAB - 1), min_size=1, max_size=40), st.text(max_size=12))
def test_any_token_sequence_streams_to_its_full_decoding(ids, prompt):
    """Whatever the model emits (even invalid UTF-8) after a text prompt, the pieces add up."""
    tok = tiny_tokenizer()
    detok = IncrementalDetokenizer(tok, tok(prompt)["input_ids"])
    streamed = "".join(detok.push(t) for t in ids) + detok.flush()
    assert streamed == tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_peek_shows_a_rejected_continuation_without_committing_it():
    tok = tiny_tokenizer()
    a, b = tok("hello")["input_ids"], tok(" world")["input_ids"]
    detok = IncrementalDetokenizer(tok)
    for t in a:
        detok.push(t)
    assert detok.peek(b) == " world"
    assert detok.peek([]) == ""
    assert "".join(detok.push(t) for t in b) + detok.flush() == " world"


def record(iteration, drafted, accepted, emitted, p=None, q=None) -> IterationRecord:
    return IterationRecord(
        method="vanilla",
        iteration=iteration,
        position=0,
        speculation_length=len(drafted),
        drafted=tuple(drafted),
        accepted=accepted,
        emitted=tuple(emitted),
        p_target=p,
        q_draft=q,
        draft_forwards=len(drafted),
        target_forwards=1,
        t_start=0.0,
        t_end=0.1,
        draft_ms=1.0,
        verify_ms=1.0,
    )


def test_span_kinds_follow_the_record():
    tok = tiny_tokenizer()
    a, b, c, d = (tok(w)["input_ids"][0] for w in ("a", "b", "c", "d"))
    records = [
        record(0, [a, b, c], 1, [a, d], p=(0.9, 0.2, 0.1), q=(0.8, 0.5, 0.4)),  # accept a, reject b c, correct to d
        record(1, [a, b], 2, [a, b, c], p=(0.7, 0.6), q=None),  # all accepted + bonus c; deterministic drafter
        record(2, [], 0, [d]),  # autoregressive-style step
    ]
    spans = SpanBuilder(tok, []).extend(records)
    assert [(s.kind, s.text) for s in spans] == [
        ("accepted", "a"),
        ("rejected", "b"),  # each rejected draft with its own text (was: "bc" here and "" on the next)
        ("rejected", "c"),
        ("target", "d"),
        ("accepted", "a"),
        ("accepted", "b"),
        ("target", "c"),
        ("target", "d"),
    ]
    assert [s.role for s in spans if s.kind == "target"] == ["correction", "bonus", "next token"]
    assert plain_text(spans) == "adabcd"
    rejected = spans[1]
    assert (rejected.p, rejected.q, rejected.ratio) == (0.2, 0.5, pytest.approx(0.4))
    assert spans[5].ratio == pytest.approx(0.6)  # one-hot q: min(1, p / 1)
    title = rejected.title()
    assert "iteration 1:" in title and "p(target) = 0.200" in title and "q(draft) = 0.500" in title  # from 1
    assert f"token b (id {rejected.token_id})" in title  # the token's own text, not the rejected tail's
    assert (
        "rule (greedy): kept only if it is the target's most likely token: it is not" in title
    )  # the rule that decided
    sampled = SpanBuilder(tok, [], greedy=False).extend(records)
    assert "rule (sampling): kept with probability min(1, p/q) = 0.400" in sampled[1].title()


def test_drafts_after_the_first_rejection_are_untested_not_rejected():
    """Only the first refused draft met the rule; the ones after it were never compared with the target
    (the board called them rejected, "it is not the target's most likely token", even at p = 1)."""
    tok = tiny_tokenizer()
    a, b, c, d = (tok(w)["input_ids"][0] for w in ("a", "b", "c", "d"))
    records = [record(0, [a, b, c, a], 1, [a, d], p=(0.9, 0.2, 1.0, 1.0), q=(0.8, 0.5, 0.4, 0.9))]
    for greedy in (True, False):
        spans = SpanBuilder(tok, [], greedy=greedy).extend(records)
        first, *after = [s for s in spans if s.kind == "rejected"]
        assert first.tested and "rejected by the target" in first.title() and "rule (" in first.title()
        assert len(after) == 2 and not any(s.tested for s in after)
        for s in after:
            tip = s.title()
            assert "untested" in tip and "without a test" in tip and "rejected by the target" not in tip
            assert "rule (" not in tip and "it is not" not in tip and "p(target) = 1.000" in tip
            assert s.text and "completes" not in tip  # its own text, no note of a character it does not complete
    out = tokens_html(spans)
    assert out.count("sv-untested") == 2 and out.count('class="sv-rejgroup"') == 1
    budget = [record(0, [a, b, c], 1, [a], p=(0.9, 0.2, 0.1))]  # the budget ended the step: nothing refused
    assert [s.tested for s in SpanBuilder(tok, []).extend(budget) if s.kind == "rejected"] == [False, False]


def test_a_real_run_becomes_spans_that_spell_its_output(perturbed_pair):
    result = specviz.generate("vanilla", perturbed_pair, "def fibonacci(n):", max_new_tokens=40, speculation_length=4)
    spans = SpanBuilder(perturbed_pair.tokenizer, result.prompt_ids).extend(result.records)
    kinds = [s.kind for s in spans]
    assert kinds.count("accepted") == result.summary.accepted
    assert kinds.count("rejected") == sum(len(r.rejected) for r in result.records)
    assert kinds.count("target") == result.summary.new_tokens - result.summary.accepted
    assert kinds.count("rejected") > 0 and kinds.count("accepted") > 0  # the perturbed draft shows both
    assert plain_text(spans) == perturbed_pair.tokenizer.decode(list(result.summary.output_ids))


def test_html_is_escaped_and_grouped():
    spans = [
        TokenSpan("<b>&", "accepted", 0, 5, 0.5, 0.25, "draft"),
        TokenSpan('"x"', "rejected", 0, 6, 0.1, 0.9, "draft"),
        TokenSpan("", "rejected", 0, 7, 0.1, 0.9, "draft"),
        TokenSpan("\n", "target", 0, 8, role="correction"),
        TokenSpan("z", "target", 1, 9, role="next token"),
    ]
    out = tokens_html(spans)
    assert "<b>" not in out and "&lt;b&gt;&amp;" in out
    assert out.count('class="sv-rejgroup"') == 1  # one struck-through group per iteration
    assert 'class="sv-tok sv-accepted"' in out and 'class="sv-tok sv-target"' in out
    assert "&#8203;" in out  # an empty token stays hoverable
    assert "p(target) = 0.500" in out
    assert 'data-t="' not in out
    timed = tokens_html(spans, {0: 0.25, 1: 0.5})
    assert timed.count('data-t="0.2500"') == 4 and timed.count('data-t="0.5000"') == 1  # the replay's clock
