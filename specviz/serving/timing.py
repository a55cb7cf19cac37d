"""Whether a race's timings can be a method's own, checked against what is possible and against the
machine's pace. Pure functions of a `Race` (no torch); the Race's engine flags a run as soon as it
ends, the lab tabs flag their rows, a saved race is checked when loaded.

Timing on a shared machine: the methods run one after another, so another process that runs while
one of them runs makes that one slow (or makes the baseline slow, and every other method look fast).
`timing_problems` checks each run against what is possible and against the machine's own pace:

- a target pass over γ + 1 tokens costs at least one plain decoding step: verify cost
  T(γ+1)/T(1) ≥ 1 (less a noise margin), T(1) the baseline's mean step. A slowed baseline breaks
  it for every method. (The speedup bound, speedup ≤ tokens per target pass ÷ verify cost, then
  holds by itself: each run's wall time includes its own target passes. The issue's 2.64× at 1.58
  tokens per pass had a baseline slower than its steps, which this check and the next catch.)
- a run's target passes of one size take about the same time: where passes slower than twice their
  size's median hold a fifth of its verification time, load came and went during the run;
- the target alone, timed for a few steps right before each method (`MethodRun.probe_ms`), runs as
  fast as it did in the race's Autoregressive run.

A run that fails a check is flagged on its panel ("timing disturbed by other load: re-run") instead
of being explained as a property of the method.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from specviz.methods import BASELINE
from specviz.serving.race import MethodRun, Race

VERIFY_FLOOR = 0.9  # verify cost below this (1 − noise): a verification cheaper than one step, impossible
STALLED_SHARE = 0.2  # a run's verification time in passes over twice their size's median: load came and went
PROBE_TOLERANCE = 0.25  # the target alone's step time before a method off the race's by more than this share


def _pass_size(r: Any) -> tuple[int, str]:
    """The tokens a record's target pass read (a tree's nodes or the drafts, and one more), and PEARL's mode."""
    tree, pearl = r.tree(), r.pearl()
    return 1 + len((tree.tree_tokens if tree else ()) or r.drafted), pearl.mode if pearl else ""


def stalled_share(records: Sequence[Any]) -> float:
    """The share of a run's verification time in passes slower than twice the median of their size
    (the first record, which also reads the prompt, left out)."""
    sizes: dict[tuple[int, str], list[float]] = {}
    for r in records[1:]:
        if r.target_forwards:
            sizes.setdefault(_pass_size(r), []).append(r.verify_ms / r.target_forwards)
    total = sum(sum(times) for times in sizes.values())
    slow = sum(_slow(times) for times in sizes.values())
    return slow / total if total > 0 else 0.0


def _slow(times: list[float]) -> float:
    """The time in passes over twice the median of `times` (passes of one size; fewer than 3 have no median
    to speak of). The median once per size: taken per pass, a saved race of 58,001 passes stalled the server."""
    if len(times) < 3:
        return 0.0
    limit = 2 * statistics.median(times)
    return sum(t for t in times if t > limit)


def timing_problems(run: MethodRun, baseline: MethodRun | None, probes: Sequence[float] = ()) -> list[str]:
    """Why `run`'s timings cannot be the method's own (none: they can). `baseline`: the race's
    Autoregressive run; `probes`: the target alone's step time measured before each other method
    (for the baseline itself: whether they agree with its own)."""
    if not run.records or run.status not in ("done", "stopped"):
        return []
    problems = []
    stalled = stalled_share(run.records)
    if stalled > STALLED_SHARE:
        problems.append(f"{stalled:.0%} of its verification time went to passes over twice as slow as their like")
    steps = [r.verify_ms for r in baseline.records[1:] if r.target_forwards] if baseline else []
    if baseline is None or not steps:
        return problems
    t1, median = statistics.fmean(steps), statistics.median(steps)
    if run.name == BASELINE:
        off = [p for p in probes if abs(p / median - 1) > PROBE_TOLERANCE]
        if len(probes) >= 2 and len(off) > len(probes) / 2:
            problems.append(
                f"the target alone took {statistics.median(probes):.2f} ms a step when timed before the other "
                f"methods, {median:.2f} ms in this run"
            )
        return problems
    if run.probe_ms is not None and abs(run.probe_ms / median - 1) > PROBE_TOLERANCE:
        problems.append(
            f"the target alone took {run.probe_ms:.2f} ms a step right before this method, {median:.2f} ms in the "
            "Autoregressive run"
        )
    drafting = [r for r in run.records[1:] if r.drafted and r.target_forwards]
    if drafting:
        verify = sum(r.verify_ms for r in drafting) / sum(r.target_forwards for r in drafting) / t1
        if verify < VERIFY_FLOOR:
            problems.append(
                f"its target passes over the drafts took {verify:.2f} of a plain decoding step (verify cost); "
                "a pass over more tokens cannot cost less than one"
            )
    return problems


def timing_flags(race: Race) -> dict[str, list[str]]:
    """method -> why its timing is disturbed, for the race's finished runs that fail a check."""
    baseline = next((r for r in race.runs if r.name == BASELINE and r.status == "done"), None)
    probes = [r.probe_ms for r in race.runs if r.probe_ms is not None]
    flags = {r.name: timing_problems(r, baseline, probes) for r in race.finished()}
    return {name: problems for name, problems in flags.items() if problems}
