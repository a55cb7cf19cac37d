"""The leaderboard of specviz's own methods, read from the benchmark runs the project ships.

`benchmarks/leaderboard.json` names, for each method, the run that measured it and the variant of
its rows; this module pairs every method's prompt with the target alone's on the same prompt in
the same run, and summarises a method × column table:

- speedup: the target alone's time over the method's, summed over the column's prompts (so it is
  the ratio of tokens/s the benchmark README quotes: greedy outputs are the same tokens), with the
  spread of the per-prompt ratios (25th-75th percentile);
- tokens per target pass: new tokens ÷ target forward passes (1.0 for the target alone).

Each method's "all" column sums its own run's prompts, which differ between methods (DISCO's run has
MBPP, Vanilla SD's MT-Bench): methods are ranked on the `SHARED` column instead, over the columns
every method of the benchmark was measured on.

Plain data in, pandas out; no torch, no method names (they come from the declaration)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specviz.errors import SpecvizError
from specviz.methods import BASELINE  # every run's reference: the target alone, on the same prompts
from specviz.paths import ASSETS
from specviz.prompts import column_of

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
DECLARATION = BENCHMARKS / "leaderboard.json"
RACES = ASSETS / "races"  # one saved race per leaderboard column (specviz.tools.shipped_races records them)

SUITE_COLUMNS = {"humaneval": "HumanEval", "gsm8k": "GSM8K", "mtbench": "MT-Bench", "mbpp": "MBPP"}
BENCHMARK_OF = {"specbench": "Spec-Bench (by category)"}  # other suites: "Code, math and chat suites"
SUITES_BENCHMARK = "HumanEval · GSM8K · MT-Bench · MBPP"
ALL = "all"  # the summary's column over every prompt of the method's own run (differs per method)
SHARED = "shared"  # the summary's column over the columns every method of the benchmark ran (for ranking)


@dataclass(frozen=True)
class Source:
    """One shipped run and the rows the leaderboard takes from it."""

    path: Path  # results.json[.gz] under benchmarks/
    title: str  # what was run: suites, prompts, tokens
    take: dict[str, str | None]  # method -> variant label of its rows (None: its only variant)
    machine: str | None = None  # where it ran, for a file that does not record its device

    @property
    def name(self) -> str:
        """The run's name in words: the heading of the README nearest its folder, else the folder."""
        return readme_title(self.path.parent) or self.folder

    @property
    def folder(self) -> str:
        """The run's folder, as the tab names it (under benchmarks/ when it is a shipped run)."""
        parent = self.path.parent
        return str(parent.relative_to(BENCHMARKS)) if parent.is_relative_to(BENCHMARKS) else str(parent)


@cache
def readme_title(folder: Path) -> str | None:
    """The first heading of the README.md in `folder` or the nearest folder above it under benchmarks/
    (markdown marks left out); None where there is none."""
    for where in (folder, *folder.parents):
        readme = where / "README.md"
        if readme.is_file():
            heading = next(
                (line for line in readme.read_text(encoding="utf-8").splitlines() if line.startswith("#")), ""
            )
            return heading.lstrip("#").replace("`", "").replace("*", "").strip() or None
        if where == BENCHMARKS or not where.is_relative_to(BENCHMARKS):
            return None
    return None


def load_declaration(path: Path = DECLARATION) -> list[Source]:
    """The runs named in benchmarks/leaderboard.json, in order."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    return [
        Source(path.parent / run["path"], run["title"], dict(run["take"]), run.get("machine")) for run in spec["runs"]
    ]


def read_run(path: Path) -> dict[str, Any]:
    """A results file as the bench and the experiments write it (gzip or plain JSON)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def machine_of(run: dict[str, Any]) -> str:
    """The machine a run was measured on, in words (its `device` record; the GPU's name when there is one)."""
    device = run.get("device")
    if not isinstance(device, dict):
        raise SpecvizError("a leaderboard run records no device: name its machine in benchmarks/leaderboard.json")
    if device.get("gpu"):
        return str(device["gpu"])
    threads = device.get("threads")
    return f"CPU ({device.get('cpu', '?')}, {threads} threads)" if threads else "CPU"


def _rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    rows = run.get("runs", run.get("speed_runs"))
    if not isinstance(rows, list):
        raise SpecvizError("a leaderboard run has no per-prompt rows ('runs' or 'speed_runs')")
    return rows


def _column(row: dict[str, Any]) -> tuple[str, str]:
    """(benchmark, column) of a row: Spec-Bench's leaderboard columns, else the suite's name."""
    suite = row.get("suite", "")
    if suite in BENCHMARK_OF:
        return BENCHMARK_OF[suite], column_of(row.get("category", ""))
    return SUITES_BENCHMARK, SUITE_COLUMNS.get(suite, suite)


def paired_rows(source: Source) -> pd.DataFrame:
    """One row per (method, prompt) of a source: the method's and the target alone's seconds on
    that prompt (the median over repeats), its new tokens and target passes."""
    run = read_run(source.path)
    machine = source.machine or machine_of(run)
    times: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in _rows(run):
        method = row.get("method")
        if method == BASELINE or (method in source.take and source.take[method] in (None, row.get("variant"))):
            times.setdefault((method, row["prompt_id"]), []).append(row)
    out = []
    for (method, prompt), rows in times.items():
        if method == BASELINE or (BASELINE, prompt) not in times:
            continue
        ar = float(np.median([r["wall_s"] for r in times[(BASELINE, prompt)]]))
        wall = float(np.median([r["wall_s"] for r in rows]))
        first = rows[0]
        benchmark, column = _column(first)
        passes = first.get("target_forwards", first.get("iterations"))
        out.append(
            {
                "method": method,
                "benchmark": benchmark,
                "column": column,
                "prompt_id": prompt,
                "ar_s": ar,
                "method_s": wall,
                "new_tokens": first["new_tokens"],
                "target_passes": passes,
                "machine": machine,
                "source": source.folder,
                "name": source.name,
                "title": source.title,
            }
        )
    if not out:
        raise SpecvizError(f"{source.path}: none of {', '.join(source.take)} paired with the target alone")
    return pd.DataFrame(out)


@cache
def leaderboard_rows(path: Path = DECLARATION) -> pd.DataFrame:
    """Every declared run's paired rows, one frame (read once per process)."""
    return pd.concat([paired_rows(s) for s in load_declaration(path)], ignore_index=True)


def shared_columns(rows: pd.DataFrame) -> list[str]:
    """The columns every method in `rows` was measured on, in the runs' order ("all" and "shared" left
    out): the only ones on which two methods' figures compare."""
    measured = rows[~rows["column"].isin([ALL, SHARED])]
    per_method = [set(columns) for columns in measured.groupby("method", sort=False)["column"].unique()]
    common = set.intersection(*per_method) if per_method else set()
    return [c for c in dict.fromkeys(measured["column"]) if c in common]


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (machine, benchmark, method, column): speedup (Σ target-alone time ÷ Σ method time), the
    25th/75th percentiles of the per-prompt speedups, tokens per target pass, prompts, source; and
    per method two more columns: "all" (its own run's prompts) and "shared" (the benchmark's columns
    every method ran, the one to rank by)."""

    def one(group: pd.DataFrame) -> pd.Series:
        ratios = group["ar_s"] / group["method_s"]
        passes = group["target_passes"].sum()
        return pd.Series(
            {
                "speedup": group["ar_s"].sum() / group["method_s"].sum(),
                "p25": float(np.percentile(ratios, 25)),
                "p75": float(np.percentile(ratios, 75)),
                "tokens_per_pass": group["new_tokens"].sum() / passes if passes else float("nan"),
                "prompts": len(group),
                "source": group["source"].iloc[0],
                "name": group["name"].iloc[0],
                "title": group["title"].iloc[0],
            }
        )

    keys = ["machine", "benchmark", "method", "column"]
    per_column = rows.groupby(keys, sort=False).apply(one, include_groups=False).reset_index()
    overall = rows.groupby(keys[:3], sort=False).apply(one, include_groups=False).reset_index()
    overall["column"] = ALL
    common = [group[group["column"].isin(shared_columns(group))] for _, group in rows.groupby(keys[:2], sort=False)]
    common_rows = pd.concat(common, ignore_index=True)
    if common_rows.empty:
        return pd.concat([per_column, overall], ignore_index=True)
    shared = common_rows.groupby(keys[:3], sort=False).apply(one, include_groups=False).reset_index()
    shared["column"] = SHARED
    return pd.concat([per_column, overall, shared], ignore_index=True)


def race_file(benchmark: str, column: str) -> str:
    """The file name of a column's shipped race: `suites-humaneval.json.gz`, `spec-bench-translation.json.gz`."""
    prefix = "suites" if benchmark == SUITES_BENCHMARK else benchmark.split(" (")[0]
    words = "".join(ch if ch.isalnum() else " " for ch in f"{prefix} {column}".lower()).split()
    return "-".join(words) + ".json.gz"


def shipped_race(benchmark: str, column: str, folder: Path | None = None) -> Path | None:
    """The saved race of one of the column's prompts, where one is shipped (None: none is)."""
    path = (folder or RACES) / race_file(benchmark, column)
    return path if path.is_file() else None


def race_methods(path: Path) -> tuple[str, ...]:
    """The methods a shipped race holds (registry names, in its order): a column's race has the Race tab's
    default race, not every method of the leaderboard. Read once per version of the file; SpecvizError
    where it is not a readable saved race."""
    try:
        modified = path.stat().st_mtime_ns
    except OSError as e:
        raise SpecvizError(f"{path.name}: cannot read this saved race ({e})") from e
    return _race_methods(path, modified)


@cache
def _race_methods(path: Path, modified: int) -> tuple[str, ...]:
    """`race_methods` of one version of the file (`modified`: its mtime in ns, so a re-recorded race is read again)."""
    try:
        race = read_run(path)
    except (OSError, EOFError, ValueError) as e:  # not gzip, cut short, not JSON
        raise SpecvizError(f"{path.name}: not a readable saved race ({e})") from e
    runs = race.get("runs") if isinstance(race, dict) else None
    if not isinstance(runs, list):
        raise SpecvizError(f"{path.name}: not a saved race (it has no 'runs')")
    return tuple(str(run.get("name")) for run in runs if isinstance(run, dict))
