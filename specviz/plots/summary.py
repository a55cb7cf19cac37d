"""The race's summary table: one row per method, fastest first, every number from `specviz.metrics`;
and the race's one ranking (`standings`), which the table, the verdict and the status line all read."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from specviz.methods import BASELINE
from specviz.metrics import speedup, summarize, summary_metrics, tested
from specviz.records import IterationRecord

WINNER = "★ fastest"  # the place of the fastest run whose timing is trusted, when no other run shares it
SHARED = "(shared)"  # after a place that runs the clock cannot tell apart share: "★ 1 (shared)", "2 (shared)"
DISTURBED = "timing disturbed"  # the place of a run whose timing is not the method's (specviz.serving.timing)
STOP_WORDS = {"max_new_tokens": "max new tokens", "eos": "end of text"}  # why a run stopped, in words
NOISE = 0.10  # speedups within this share of each other: one shared place (a shared machine's run-to-run noise)


@dataclass(frozen=True)
class Standing:
    """One run's place in the race: what the summary's "place" column, the verdict and the status line say."""

    method: str  # registry name
    speedup: float | None  # tokens/s ÷ the target alone's (None: the race has no baseline)
    place: int | None  # 1-based, among the runs whose timing is trusted (None: disturbed, or no speedup)
    shares_with: str = ""  # the method whose place it shares ('' where it does not)
    same_work: bool = False  # it shares because it did the same work as `shares_with` (else: within NOISE)
    disturbed: bool = False  # its timing failed a check (specviz.serving.timing): it keeps its row, not a place


def work(records: Sequence[IterationRecord]) -> list[tuple]:
    """What a run did, iteration by iteration, without its clock: drafts, accepted, emitted, passes."""
    return [(r.drafted, r.accepted, r.emitted, r.draft_forwards, r.target_forwards) for r in records]


def place_runs(ranked: Sequence[tuple[str, float | None, list[tuple]]], disturbed: Collection[str]) -> list[Standing]:
    """(method, speedup, work) fastest first -> each run's standing. A trusted run shares the place of the
    trusted runs above it when it did the same work as one of them (only the clock differs) or its speedup
    is within NOISE of the place's fastest; places count trusted runs only (1, 1, 3: competition ranking).
    A disturbed run, or one without a speedup, has no place."""
    out: list[Standing] = []
    group: list[tuple[str, float, list[tuple]]] = []  # the current place's runs, its fastest first
    trusted = 0  # trusted runs placed so far
    for method, fast, done in ranked:
        if method in disturbed or fast is None:
            out.append(Standing(method, fast, None, disturbed=method in disturbed))
            continue
        same = next((m for m, _, w in group if w == done), "")
        close = bool(group) and group[0][1] <= fast * (1 + NOISE)
        if group and (same or close):
            place = next(s.place for s in out if s.method == group[0][0])
            out.append(Standing(method, fast, place, same or group[0][0], bool(same)))
        else:
            group = []
            place = trusted + 1
            out.append(Standing(method, fast, place))
        group.append((method, fast, done))
        trusted += 1
    return out


def standings(runs: Mapping[str, Sequence[IterationRecord]], disturbed: Collection[str] = ()) -> list[Standing]:
    """method -> records  ->  every run's standing, fastest first (speedups vs the race's autoregressive run).
    Where the autoregressive run's timing is disturbed, so is every speedup, which divides by it: no run
    has a place."""
    if BASELINE in disturbed:
        disturbed = set(runs)
    summaries = {m: summarize(r) for m, r in runs.items() if r}
    baseline = summary_metrics(summaries[BASELINE])["tokens_per_s"] if BASELINE in summaries else None
    fast = {m: speedup(baseline, summary_metrics(s)["tokens_per_s"]) for m, s in summaries.items()}
    order = sorted(summaries, key=lambda m: -_or_lowest(fast[m]))
    return place_runs([(m, fast[m], work(runs[m])) for m in order], disturbed)


def place_words(standing: Standing, all_standings: Sequence[Standing]) -> str:
    """The summary's "place" cell: "★ fastest", "★ 1 (shared)", "2", "3 (shared)", "timing disturbed" or ''."""
    if standing.place is None:
        return DISTURBED if standing.disturbed else ""
    shared = sum(s.place == standing.place for s in all_standings) > 1
    if standing.place == 1:
        return f"★ 1 {SHARED}" if shared else WINNER
    return f"{standing.place} {SHARED}" if shared else str(standing.place)


def summary_table(
    runs: Mapping[str, Sequence[IterationRecord]],
    labels: Mapping[str, str] | None = None,
    disturbed: Collection[str] = (),
) -> pd.DataFrame:
    """method -> records  ->  a DataFrame in `standings` order, fastest first (rounded for display; speedup
    is vs the autoregressive run of the same race, empty when the race has none). `disturbed`: methods
    whose timing failed a check; they keep their row but have no place."""
    ranked = standings(runs, disturbed)
    rows = []
    for standing in ranked:
        method = standing.method
        s = summarize(runs[method])
        m = summary_metrics(s)
        judged = sum(tested(r) for r in runs[method])
        rows.append(
            {
                "place": place_words(standing, ranked),
                "method": (labels or {}).get(method, method),
                "tokens": s.new_tokens,
                "wall (s)": round(s.wall_s, 3),
                "tokens/s": _round(m["tokens_per_s"], 1),
                "speedup vs AR (×)": _round(standing.speedup, 2),
                "α (accepted ÷ tested)": _round(s.accepted / judged if judged else None, 2),
                "acceptance rate (%)": _round(None if m["acceptance_rate"] is None else 100 * m["acceptance_rate"], 1),
                "tokens per target pass": _round(m["mean_accepted_length"], 2),
                "target passes": s.target_forwards,
                "draft passes": s.draft_forwards,
                "stop": STOP_WORDS.get(s.stop_reason, s.stop_reason),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = [
    "place",
    "method",
    "tokens",
    "wall (s)",
    "tokens/s",
    "speedup vs AR (×)",
    "α (accepted ÷ tested)",
    "acceptance rate (%)",
    "tokens per target pass",
    "target passes",
    "draft passes",
    "stop",
]


def _or_lowest(x: float | None) -> float:
    return float("-inf") if x is None else x


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)
