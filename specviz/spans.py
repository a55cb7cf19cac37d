"""Records -> token spans, incrementally, while a run streams: what a race shows of each token (its HTML is
`specviz.ui.tokens`).

Byte-level BPE tokens are byte strings: one token may hold half of a UTF-8 character, and some
tokenizers drop or add a space depending on the neighbours. So the text of a token is never
`decode([token])`: `IncrementalDetokenizer` decodes a short window of the growing sequence and hands
out only text that is stable (the way vLLM and Hugging Face's TextStreamer stream). A token whose
bytes do not yet form a character gets empty text; the token that completes it carries it.

Span kinds (the app's legend):
- "accepted": a draft token the target kept;
- "target":   the token the target chose itself (the correction after a rejection, the bonus token
              after a full acceptance, or simply the next token of autoregressive decoding);
- "rejected": a draft token the target did not keep, shown where it was proposed, struck through.
              Only the first of an iteration's rejected drafts was tested (and turned down); the ones
              after it were never compared with the target (`tested` is False: drawn faded).

Iterations are shown counted from 1, as in the step-through (a record's `iteration` counts from 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specviz.metrics import tested
from specviz.records import IterationRecord
from specviz.text import visible

REPLACEMENT = "\ufffd"  # what a decoder writes for an incomplete UTF-8 sequence


class IncrementalDetokenizer:
    """Text of a growing token sequence, handed out token by token, only once it is stable."""

    def __init__(self, tokenizer: Any, context_ids: Sequence[int] = (), window: int = 6):
        self.tokenizer = tokenizer
        self.ids: list[int] = list(context_ids)[-window:]  # the prompt's tail gives the first token its context
        self.prefix_offset = 0  # start of the window decoded for context
        self.read_offset = len(self.ids)  # tokens before this have had their text handed out

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        """Append `token`; return the new stable text ('' while a character is still incomplete)."""
        self.ids.append(int(token))
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) <= len(prefix) or full.endswith(REPLACEMENT):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full[len(prefix) :]

    def flush(self) -> str:
        """Text still held back at the end of a run (an incomplete character comes out as U+FFFD)."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix) :]

    def peek(self, tokens: Sequence[int]) -> str:
        """The text `tokens` would add after the current sequence, without committing them
        (a rejected draft is shown where it was proposed, then forgotten)."""
        if not tokens:
            return ""
        base = self._decode(self.ids[self.prefix_offset :]).rstrip(REPLACEMENT)
        full = self._decode(self.ids[self.prefix_offset :] + [int(t) for t in tokens])
        return full[len(base) :] if full.startswith(base) else full


@dataclass(frozen=True, slots=True)  # slots: a loaded race holds up to ~10^5 of them in a visitor's state
class TokenSpan:
    """One token as the app draws it."""

    text: str  # stable text this token adds ('' when the next token completes its character)
    kind: str  # "accepted" | "target" | "rejected"
    iteration: int  # the speculative iteration that proposed or emitted it
    token_id: int
    p: float | None = None  # p(x): the target's probability of this drafted token
    q: float | None = None  # q(x): the draft's probability (None: a deterministic drafter, one-hot q)
    role: str = ""  # for target tokens: "correction" | "bonus" | "next token"; for drafts: "draft"
    greedy: bool = True  # the run decoded greedily (the rule that decided is the argmax, not min(1, p/q))
    tested: bool = True  # False: a draft after the iteration's first rejection, never compared with the target

    @property
    def ratio(self) -> float | None:
        """min(1, p/q): the chance the rejection-sampling rule keeps this draft (q one-hot: min(1, p/1))."""
        if self.p is None:
            return None
        q = 1.0 if self.q is None else self.q
        return 1.0 if q <= 0 else min(1.0, self.p / q)

    def title(self) -> str:
        """The token's tooltip: what it is, p and q, and the rule that decided, as applied (a draft
        after the first rejection met no rule: it was dropped untested)."""
        untested = self.kind == "rejected" and not self.tested
        what = {
            "accepted": "draft token, accepted by the target",
            "rejected": "draft token, rejected by the target",
            "target": f"chosen by the target ({self.role})",
        }[self.kind]
        if untested:
            what = (
                "draft token, untested: an earlier draft of this iteration was rejected, so this one was "
                "dropped without a test"
            )
        shown = visible(self.text) if self.text else "(its bytes end in the next token's character)"
        lines = [f"iteration {self.iteration + 1}: {what}", f"token {shown} (id {self.token_id})"]
        if self.p is not None:
            lines.append(f"p(target) = {self.p:.3f}")
            lines.append("q(draft) = one-hot (no draft distribution)" if self.q is None else f"q(draft) = {self.q:.3f}")
            if untested:
                lines.append("rule: not applied (whatever p is, a draft after a rejection is never kept)")
            elif self.greedy:
                lines.append(
                    "rule (greedy): kept only if it is the target's most likely token"
                    + (": it is" if self.kind == "accepted" else ": it is not")
                )
            else:
                lines.append(f"rule (sampling): kept with probability min(1, p/q) = {self.ratio:.3f}")
        return "\n".join(lines)


def _at(values: Sequence[float] | None, i: int) -> float | None:
    return float(values[i]) if values is not None and i < len(values) else None


class SpanBuilder:
    """Turns one run's records into spans as they arrive (keeps the detokenizer's state)."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int], greedy: bool = True):
        self.detok = IncrementalDetokenizer(tokenizer, prompt_ids)
        self.greedy = greedy
        self.spans: list[TokenSpan] = []

    def add(self, record: IterationRecord) -> list[TokenSpan]:
        """Spans of one iteration, in reading order: accepted drafts, rejected drafts, the target's token."""
        r = record
        new = [
            self._draft(r, i, self.detok.push(r.emitted[i]), "accepted") for i in range(min(r.accepted, len(r.emitted)))
        ]
        rejected = r.rejected
        judged = tested(r)  # drafts the target compared: the accepted ones and the first refused one
        shown = ""  # each rejected draft's own text: what it adds to the ones before it
        for j in range(len(rejected)):
            text = self.detok.peek(rejected[: j + 1])
            before = shown.rstrip(REPLACEMENT)  # a character the previous draft left incomplete, now whole
            own = text[len(before) :] if text.startswith(before) else text
            shown = text
            i = r.accepted + j
            new.append(self._draft(r, i, own, "rejected", tested=i < judged))
        # an outside engine counts the drafts it rejected without naming them: its correction follows them unseen
        role = "next token" if not r.drafted_count else "correction" if r.drafted_count > r.accepted else "bonus"
        new.extend(
            TokenSpan(self.detok.push(token), "target", r.iteration, token, role=role, greedy=self.greedy)
            for token in r.emitted[r.accepted :]
        )
        self.spans.extend(new)
        return new

    def _draft(self, r: IterationRecord, i: int, text: str, kind: str, tested: bool = True) -> TokenSpan:
        """Draft i of record r as a span (its token as written: emitted when kept, drafted when not), with p and q."""
        token = r.emitted[i] if kind == "accepted" else r.drafted[i]
        return TokenSpan(
            text, kind, r.iteration, token, _at(r.p_target, i), _at(r.q_draft, i), "draft", self.greedy, tested
        )

    def finish(self) -> list[TokenSpan]:
        """End of the run: give text still held back to the last token written."""
        text = self.detok.flush()
        written = [i for i, s in enumerate(self.spans) if s.kind != "rejected"]
        if text and written:
            i = written[-1]
            self.spans[i] = replace(self.spans[i], text=self.spans[i].text + text)
        return self.spans

    def extend(self, records: Iterable[IterationRecord]) -> list[TokenSpan]:
        for r in records:
            self.add(r)
        return self.finish()
