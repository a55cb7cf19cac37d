"""The Race's timing checks for the tabs that time methods one after another on one prompt (DISCO,
PEARL): the target alone's pace probed right before each method, then `specviz.ui.verdict.timing_flags`
on the runs, so a figure other load disturbed is flagged there as on the Race's panels, not shown as
the method's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specviz.methods import BASELINE
from specviz.ui.panels import DISTURBED, MethodRun, Race
from specviz.ui.verdict import step_ms, timing_flags

PROBE_STEPS = 6  # plain decoding steps of the target alone timed right before each method (specviz.ui.verdict)


def probe_ms(pair: Any, prompt_ids: Sequence[int]) -> float | None:
    """The target alone's median milliseconds per decoding step on this prompt, now (the Race's probe)."""
    import specviz

    return step_ms(list(specviz.run(BASELINE, pair, list(prompt_ids), max_new_tokens=PROBE_STEPS + 1)))


def disturbed(
    pair_name: str, prompt_ids: Sequence[int], max_new_tokens: int, timed: Sequence[tuple[str, str, Any, float | None]]
) -> dict[str, list[str]]:
    """label -> why its timing cannot be the method's own, for the `timed` runs that fail the Race's checks:
    (registry name, label, its `RunResult`, the probe before it). Nothing is compared without the target alone
    and one method beside it, so fewer runs flag nothing."""
    if len(timed) < 2 or all(name != BASELINE for name, *_ in timed):
        return {}
    runs = [
        MethodRun(name, label, "", "done", records=list(result.records), probe_ms=probe)
        for name, label, result, probe in timed
    ]
    flags = timing_flags(Race(pair_name, "", list(prompt_ids), int(max_new_tokens), {}, runs))
    return {run.label: flags[run.name] for run in runs if run.name in flags}


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
