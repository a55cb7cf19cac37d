"""Tables a phone can read. A method-per-row table with eight or more columns cannot fit 390 px: on a
phone (style.py's `.sv-phone-only`, under 640 px) it is shown pivoted instead, one row per figure and
one column per method, so every number is on screen and the methods sit side by side to compare."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any


def _cell(value: Any) -> str:
    """A figure as the wide table shows it; nothing measured (None, NaN) as –."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return html.escape(str(value))


def pivot_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    key: str = "method",
    short: Mapping[str, str] | None = None,
    elem_id: str = "",
) -> str:
    """`rows` (one dict a method, `key` its name) as an HTML table with the methods as columns, headed by
    `short` names where given (a phone's column is ~60 px wide), and `columns` (less `key`) as rows; ''
    without a named method (an empty table's blank row)."""
    short = short or {}
    rows = [row for row in rows if row.get(key)]
    if not rows:
        return ""
    names = [str(row[key]) for row in rows]
    head = "".join(f'<th scope="col" title="{html.escape(n)}">{html.escape(short.get(n, n))}</th>' for n in names)
    body = "".join(
        f'<tr><th scope="row">{html.escape(column)}</th>'
        + "".join(f"<td>{_cell(row.get(column))}</td>" for row in rows)
        + "</tr>"
        for column in columns
        if column != key
    )
    at = f' id="{html.escape(elem_id)}"' if elem_id else ""
    return (
        f'<div class="sv-phone-only sv-pivot"{at}><table><thead><tr><th scope="col"></th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )
