"""How a token's text is shown to a reader: whitespace made visible, an empty text marked."""

from __future__ import annotations


def visible(text: str) -> str:
    """Spaces as '·', line breaks as '⏎', tabs as '⇥', nothing as '∅' (not the tokenizer's own
    piece, e.g. 'Ġgran')."""
    return text.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅"
