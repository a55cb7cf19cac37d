"""What the lab tabs (DISCO, PEARL) show of a comparison's timing flags (`specviz.serving.compare`):
the note above a table and a disturbed row marked, as the Race's panels say it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specviz.ui.panels import DISTURBED


def flags_markdown(flags: Mapping[str, Sequence[str]]) -> str:
    """The note above a tab's table for the methods whose timing is disturbed ('' for none), as the panels say it."""
    if not flags:
        return ""
    lines = [f"**⚠️ {DISTURBED}.** These figures are not the methods' own:"]
    lines += [f"- **{label}**: {'; '.join(problems)}." for label, problems in flags.items()]
    return "\n".join(lines) + "\n\n"


def flagged_rows(rows: Sequence[Mapping[str, Any]], flags: Mapping[str, Any], key: str = "method") -> list[dict]:
    """A table's rows, a disturbed method's name (`key`) marked ⚠️ (the note above the table says why)."""
    return [{**row, key: f"{row[key]} ⚠️"} if row[key] in flags else dict(row) for row in rows]
