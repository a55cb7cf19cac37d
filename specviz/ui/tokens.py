"""Token spans (`specviz.spans`) -> escaped HTML: each token coloured by its kind, a tooltip of what it
is, rejected drafts struck through where they were proposed (the app's legend)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from specviz.spans import TokenSpan
from specviz.text import marked


def _rejected_groups(spans: Sequence[TokenSpan]) -> list[list[TokenSpan]]:
    """Consecutive spans grouped so one iteration's rejected drafts form one struck-through run."""
    groups: list[list[TokenSpan]] = []
    for s in spans:
        if (
            s.kind == "rejected"
            and groups
            and groups[-1][0].kind == "rejected"
            and groups[-1][0].iteration == s.iteration
        ):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def span_html(span: TokenSpan, t: float | None = None) -> str:
    """One token; `t` (seconds: when its iteration ended) lets the page's replay reveal it on time."""
    tip = html.escape(span.title(), quote=True)  # shown by the page's tooltip (page.js): hover, focus or tap
    # written as it reads (spaces, line breaks), but a character that prints as nothing marked as the tooltip marks
    # it ('␍', '⟨U+200B⟩'); an empty token gets a zero-width space: it stays hoverable
    text = html.escape(marked(span.text)) if span.text else "&#8203;"
    when = "" if t is None else f' data-t="{t:.4f}"'
    kind = f"sv-{span.kind}" + ("" if span.tested else " sv-untested")
    return f'<span class="sv-tok {kind}"{when} tabindex="0" data-tip="{tip}">{text}</span>'


def tokens_html(spans: Sequence[TokenSpan], times: Mapping[int, float] | None = None) -> str:
    """The text of a run as escaped, coloured spans; `times`: iteration -> its end time (for replays)."""
    parts = []
    for group in _rejected_groups(spans):
        inner = "".join(span_html(s, None if times is None else times.get(s.iteration)) for s in group)
        parts.append(f'<span class="sv-rejgroup">{inner}</span>' if group[0].kind == "rejected" else inner)
    return "".join(parts)


def plain_text(spans: Sequence[TokenSpan]) -> str:
    """The generated text (rejected drafts left out): what the run actually wrote."""
    return "".join(s.text for s in spans if s.kind != "rejected")
