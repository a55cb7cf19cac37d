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
    per_table: int = 0,
) -> str:
    """`rows` (one dict a method, `key` its name) as an HTML table with the methods as columns, headed by
    `short` names where given (a phone's column is ~60 px wide), and `columns` (less `key`) as rows; ''
    without a named method (an empty table's blank row). `per_table` > 0: at most that many methods a table,
    the tables one under another, as even as they can be (a dozen methods side by side were a dozen
    20-pixel columns)."""
    rows = [row for row in rows if row.get(key)]
    if not rows:
        return ""
    count = -(-len(rows) // per_table) if per_table > 0 else 1
    size, more = divmod(len(rows), count)  # as even as they can be: 13 methods by 3 as 3, 3, 3, 2, 2 (not ..., 1)
    ends = [(k + 1) * size + min(k + 1, more) for k in range(count)]
    tables = "".join(_table(rows[a:b], columns, key, short or {}) for a, b in zip([0, *ends[:-1]], ends, strict=True))
    at = f' id="{html.escape(elem_id)}"' if elem_id else ""
    return f'<div class="sv-phone-only sv-pivot"{at}>{tables}</div>'


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], key: str, short: Mapping[str, str]) -> str:
    """One pivoted table: a column a row of `rows`, a row a figure of `columns` (less `key`)."""
    names = [str(row[key]) for row in rows]
    head = "".join(f'<th scope="col" title="{html.escape(n)}">{html.escape(short.get(n, n))}</th>' for n in names)
    body = "".join(
        f'<tr><th scope="row">{html.escape(column)}</th>'
        + "".join(f"<td>{_cell(row.get(column))}</td>" for row in rows)
        + "</tr>"
        for column in columns
        if column != key
    )
    return f'<table><thead><tr><th scope="col"></th>{head}</tr></thead><tbody>{body}</tbody></table>'
