"""How a token's text is shown to a reader: whitespace and invisible characters made visible, an empty text marked."""

from __future__ import annotations


def _mark(char: str) -> str:
    """One character that prints as nothing (a control, format or separator character other than the space) as a
    mark: '␍' for a carriage return, '⟨U+200B⟩' for a zero-width space and the rest."""
    return "␍" if char == "\r" else f"⟨U+{ord(char):04X}⟩"


def marked(text: str) -> str:
    """`text` with every character that prints as nothing marked (a token of only '\\r' or '\\u200b' was drawn as
    nothing); spaces, line breaks and tabs kept as they are, for a page that lays text out as written."""
    if text.isprintable():  # the common case: letters, digits, punctuation and spaces
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else _mark(c) for c in text)


def visible(text: str) -> str:
    """Spaces as '·', line breaks as '⏎', tabs as '⇥', other invisible characters marked ('␍', '⟨U+200B⟩'),
    nothing as '∅' (not the tokenizer's own piece, e.g. 'Ġgran')."""
    return marked(text).replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅"
