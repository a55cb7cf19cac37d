"""What a finished race says: who won and why, which of its timings cannot be trusted (the checks are
`specviz.serving.timing`'s), and where the prompt stands against the shipped benchmarks. Pure
functions of a `Race` (no torch)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache

from specviz.cost.families import c_text
from specviz.methods import BASELINE, get_method
from specviz.plots.summary import NOISE, Standing, standings
from specviz.serving.race import MethodRun, Race
from specviz.serving.timing import timing_flags
from specviz.ui.panels import DISTURBED, md_text

EVEN = 0.05  # a speedup within this of 1: neither a gain nor a loss on a shared machine


@dataclass(frozen=True)
class Shipped:
    """One method's speedups in the shipped benchmark run the Leaderboard tab reads for it."""

    folder: str  # under benchmarks/
    prompts: str  # which prompts, in words (the run's title)
    machine: str  # where it ran
    overall: float  # Σ the target alone's seconds ÷ Σ the method's: the benchmark README's figure
    per_prompt: tuple[float, ...]  # the target alone's wall time ÷ the method's, prompt by prompt
    suites: tuple[str, ...] = ()  # the suites every method's run has (the ones its race is compared on)
    on_suites: float = float("nan")  # Σ-time speedup over its prompts of those suites
    per_prompt_on_suites: tuple[float, ...] = ()  # the per-prompt speedups on those suites


def shipped_speedups(pair: str) -> dict[str, Shipped]:
    """method -> its speedup in the first shipped run that measured it (`specviz.leaderboard`'s
    declaration: the runs behind the README's figures), for the default pair, the only pair with
    shipped results; {} where benchmarks/ is not installed (a wheel, a Space). Read once; a saved
    race's pair name is not a key of any cache (each upload's name, up to megabytes, was kept)."""
    return _default_speedups() if pair == "default" else {}


@cache
def _default_speedups() -> dict[str, Shipped]:
    from specviz.errors import SpecvizError
    from specviz.leaderboard import SUITES_BENCHMARK, leaderboard_rows, shared_columns

    try:
        rows = leaderboard_rows()
    except (OSError, SpecvizError, KeyError, ValueError):  # not shipped with this installation, or unreadable
        return {}
    suites = shared_columns(rows[rows["benchmark"] == SUITES_BENCHMARK])
    out = {}
    for method, group in rows.groupby("method", sort=False):
        first = group[group["source"] == group["source"].iloc[0]]
        common = first[first["column"].isin(suites)]
        out[str(method)] = Shipped(
            str(first["source"].iloc[0]),
            str(first["title"].iloc[0]),
            str(first["machine"].iloc[0]),
            float(first["ar_s"].sum() / first["method_s"].sum()),
            tuple(float(x) for x in first["ar_s"] / first["method_s"]),
            tuple(suites) if not common.empty else (),
            float(common["ar_s"].sum() / common["method_s"].sum()) if not common.empty else float("nan"),
            tuple(float(x) for x in common["ar_s"] / common["method_s"]),
        )
    return out


def prompt_place(speedup: float, shipped: Shipped) -> str:
    """Where this prompt's speedup stands among the method's shipped benchmark prompts, in words: on the
    suites every method's run has (so every method is placed against the same suites), named."""
    if shipped.per_prompt_on_suites:
        ratios, average = shipped.per_prompt_on_suites, shipped.on_suites
        *rest, last = shipped.suites
        suites = f"{', '.join(rest)} and {last}" if rest else last
        where = f"its {len(ratios)} {suites} prompts in the shipped benchmarks (the suites every method ran)"
    else:
        ratios, average = shipped.per_prompt, shipped.overall
        where = f"its {len(ratios)} prompts in the shipped benchmarks ({shipped.prompts})"
    below = sum(s < speedup for s in ratios)
    n = len(ratios)
    share = below / n if n else 0.5
    ease = (
        "an easy prompt for it"
        if share >= 0.75
        else "a hard prompt for it"
        if share <= 0.25
        else "a typical prompt for it"
    )
    return (
        f"{speedup:.2f}× here against {average:.2f}× on average over {where}, on {shipped.machine}; "
        f"faster here than on {below} of them: {ease}"
    )


def ranked(race: Race, disturbed: Collection[str] = ()) -> list[tuple[MethodRun, Standing]]:
    """The finished runs with their standing, fastest first: the race's one ranking (specviz.plots.summary's
    `standings`), which the summary table and the status line read too. `disturbed`: runs without a place."""
    runs = {r.name: r for r in race.finished()}
    return [(runs[s.method], s) for s in standings({n: r.records for n, r in runs.items()}, disturbed)]


def ranking(race: Race) -> list[tuple[MethodRun, float | None]]:
    """The finished runs with their speedup vs the target alone, fastest first (None: no baseline)."""
    return [(run, s.speedup) for run, s in ranked(race)]


def tie_words(standing: Standing, labels: Mapping[str, str]) -> str:
    """Why a run shares its place ('' where it does not), in Markdown (`labels`: a saved race's, escaped here)."""
    if not standing.shares_with:
        return ""
    other = md_text(labels.get(standing.shares_with, standing.shares_with))
    if standing.same_work:
        return f"same drafts and counts as {other}: the gap is clock noise"
    return f"within {NOISE:.0%} of {other}: the gap is within the clock's noise"


def first_place(race: Race, disturbed: Collection[str] = ()) -> list[tuple[MethodRun, Standing]]:
    """The runs in first place (several where the clock cannot tell them apart; none without a trusted run)."""
    return [(run, s) for run, s in ranked(race, disturbed) if s.place == 1]


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def why_sentence(run: MethodRun, baseline: MethodRun, speedup: float | None) -> str:
    """One sentence from the run's measured α, draft cost c and verify cost: the tokens an iteration
    emitted against what it cost, in the target's decoding steps; the verb from the measured speedup
    (the counts leave out time outside the models' passes, so they can differ a little)."""
    from specviz.cost.from_records import explain_run

    if run.name == BASELINE:
        return "the baseline: one token per pass of the target."
    row = explain_run(run.records, baseline.records, get_method(run.name).family)
    if row is None or speedup is None:
        return "it drafted nothing the formula can explain."
    tokens, cost = row["measured_tokens_per_iteration"], row["iteration_cost"]
    verb = "gains" if speedup >= 1 + EVEN else "loses" if speedup <= 1 - EVEN else "breaks about even"
    apart = (tokens >= cost) != (speedup >= 1)  # the counts and the clock on two sides of 1
    return (
        f"{verb}: each {row['unit']} emitted {tokens:.2f} tokens (α = {row['alpha']:.2f}) for the time of "
        f"{cost:.2f} target steps ({row['cost_terms']}; {c_text(row)}), {tokens / cost:.2f}× by these counts"
        + (" (the rest: time outside the models' passes, which the counts leave out, or noise)." if apart else ".")
    )


def verdict_markdown(race: Race | None, flags: dict[str, list[str]] | None = None) -> str:
    """Who won and why, one line per method (fastest first), and the prompt's place against the
    shipped benchmarks; '' before a race. Its labels and flags may be a saved race's: escaped (`md_text`)."""
    if race is None or not race.finished():
        return ""
    flags = timing_flags(race) if flags is None else flags
    baseline = next((r for r in race.runs if r.name == BASELINE and r.status == "done"), None)
    if baseline is None:
        return "**Verdict:** none. Include *Autoregressive* in the race: it is the baseline every speedup divides by."
    order = ranked(race, flags)
    first = [(r, s) for r, s in order if s.place == 1]
    labels = {r.name: r.label for r in race.runs}
    if baseline.name in flags:
        head = (
            f"**Verdict: none this time — {md_text(baseline.label)}, which every speedup divides by, is {DISTURBED}.**"
        )
    elif not first:
        head = f"**Verdict: none this time — every run's {DISTURBED}.**"
    elif len(first) > 1:
        names = " and ".join(f"{md_text(r.label)} ({s.speedup:.2f}×)" for r, s in first if s.speedup is not None)
        head = f"**Verdict: no single winner: {names} share first place**: the clock cannot tell them apart."
    elif first[0][0].name == BASELINE:
        head = f"**Verdict: the target alone wins** — no method beat {md_text(baseline.label)} on this prompt."
    else:
        head = f"**Verdict: {md_text(first[0][0].label)} wins, {first[0][1].speedup:.2f}× the target alone.**"
    shipped = shipped_speedups(race.pair)
    lines = [head, ""]
    shares = [s.place for _, s in order]
    for run, standing in order:
        speedup = standing.speedup
        mark = " ★" if standing.place == 1 else ""
        shown = "–" if speedup is None else f"{speedup:.2f}×"
        if standing.place is None:
            where = "no place" + (" (its speedup divides by a disturbed baseline)" if run.name not in flags else "")
        else:
            tie = tie_words(standing, labels)
            shared = shares.count(standing.place) > 1
            where = _ordinal(standing.place) + (" (shared" + (f": {tie})" if tie else ")") if shared else "")
        if run.name in flags:
            why = f"⚠️ {DISTURBED} ({'; '.join(md_text(f) for f in flags[run.name])}): this figure is not the method's."
        else:
            why = why_sentence(run, baseline, speedup)
            if run.name in shipped and speedup is not None:
                place_words = prompt_place(speedup, shipped[run.name])
                why += f" {place_words[0].upper()}{place_words[1:]}."
        lines.append(f"- **{md_text(run.label)}**{mark} {shown}, {where}: {why}")
    if shipped and any(r.name in shipped for r, _ in order):
        lines += [
            "",
            (
                "The shipped benchmarks (the Leaderboard tab) ran the default pair at each method's defaults: a race "
                "with other options, other lengths or on other hardware compares with them loosely."
            ),
        ]
    return "\n".join(lines)
