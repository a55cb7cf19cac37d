"""How a token's text is shown: every token visible, even one of characters that print as nothing."""

from __future__ import annotations

import pytest

from specviz.plots.tree import visible as tree_label
from specviz.spans import TokenSpan
from specviz.text import marked, visible
from specviz.ui.tokens import tokens_html


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (" the", "·the"),
        ("\n\t", "⏎⇥"),
        ("", "∅"),
        ("\r", "␍"),  # a carriage return alone was drawn as nothing
        ("\r\n", "␍⏎"),
        ("\u200b", "⟨U+200B⟩"),  # zero-width space (format character, Cf)
        ("\ufeffdef", "⟨U+FEFF⟩def"),  # byte order mark before a word
        ("\x00", "⟨U+0000⟩"),  # control character (Cc)
        ("\xa0", "⟨U+00A0⟩"),  # no-break space: a blank that is not the space '·' stands for
        ("\u2028", "⟨U+2028⟩"),  # line separator
        ("naïve €", "naïve·€"),  # printable text is left as it is
    ],
)
def test_every_token_text_is_visible(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_marked_keeps_layout_whitespace_and_marks_the_rest() -> None:
    """The board writes text as it reads (spaces, line breaks, tabs) but marks what would print as nothing."""
    assert marked("a b\n\tc") == "a b\n\tc"
    assert marked("x\r\n") == "x␍\n" and marked("\u200b") == "⟨U+200B⟩"


def test_tree_labels_and_the_board_show_invisible_tokens() -> None:
    assert tree_label("\u200b") == "⟨U+200B⟩" and tree_label("\r") == "␍"
    out = tokens_html([TokenSpan("\u200b", "target", 0, 5, role="next token"), TokenSpan("\r", "target", 1, 6)])
    assert ">⟨U+200B⟩</span>" in out and ">␍</span>" in out  # drawn on the board, not as nothing
    assert "token ⟨U+200B⟩ (id 5)" in out and "token ␍ (id 6)" in out  # and named in the tooltip
