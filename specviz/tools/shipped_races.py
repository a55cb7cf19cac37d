"""Record the saved races the Leaderboard tab links to: one per column it shows.

    python -m specviz.tools.shipped_races --pair default --out assets/races

For each (benchmark, column) of the shipped leaderboard (specviz.leaderboard), the first prompt the
benchmark ran in that column, raced with every method of the Race tab's default race, greedy, for
as many new tokens as the benchmark gave it (64 where that makes a file over 256 KiB), and written as
the Race tab's download writes it (`race_to_dict`), compact, numbers to 4 significant digits and gzipped
(`shipped_bytes`), which the Race tab's loader reads back.

Run it on a quiet machine: a race whose timing the Race tab would flag as disturbed (other load on
the processor, `specviz.serving.timing.timing_flags`) is not written, and the command fails naming it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.leaderboard import RACES, SUITE_COLUMNS, SUITES_BENCHMARK, leaderboard_rows, race_file
from specviz.prompts import load_suite

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

# The tracked tree travels with every call to a lent GPU machine and stays at most 40 MB (specviz.gpucheck), so the
# races ship gzipped, their numbers to 4 significant digits (timings to 0.1 % and probabilities to 1e-4 relative;
# the step-through shows 3): ten races of the default pair's seven methods take ~0.6 MB instead of 5.5 MB.
SIGNIFICANT = 4
MAX_FILE_BYTES = 256 * 2**10  # one shipped race, compressed
MAX_TOTAL_BYTES = 2**20  # every shipped race together
FALLBACK_TOKENS = 64  # new tokens when the benchmark's count makes a file over MAX_FILE_BYTES


@dataclass(frozen=True)
class ShippedPrompt:
    """One leaderboard column's prompt to race."""

    benchmark: str  # the leaderboard's benchmark (specviz.leaderboard.SUITES_BENCHMARK or a BENCHMARK_OF value)
    column: str  # its column (HumanEval, Translation, ...)
    prompt_id: str  # the suite's id of the prompt, as the benchmark's rows name it
    text: str  # the prompt
    max_new_tokens: int  # the most new tokens the benchmark's rows in this column have

    @property
    def file(self) -> str:
        return race_file(self.benchmark, self.column)


def shipped_prompts(rows: Any = None) -> list[ShippedPrompt]:
    """The first prompt of each leaderboard column, in the order the runs list them (default: the
    shipped leaderboard's rows)."""
    rows = leaderboard_rows() if rows is None else rows
    suite_of = {column: suite for suite, column in SUITE_COLUMNS.items()}
    out = []
    for (benchmark, column), group in rows.groupby(["benchmark", "column"], sort=False):
        suite = suite_of.get(column, "") if benchmark == SUITES_BENCHMARK else "specbench"
        prompt_id = str(group["prompt_id"].iloc[0])
        texts = {p.id: p.text for p in load_suite(suite)} if suite else {}
        if prompt_id not in texts:
            raise SpecvizError(f"{benchmark}, {column}: prompt {prompt_id!r} is in no shipped suite")
        out.append(ShippedPrompt(benchmark, column, prompt_id, texts[prompt_id], int(group["new_tokens"].max())))
    return out


def record(pair: ModelPair, prompt: str, methods: Sequence[str], max_new_tokens: int) -> Any:
    """One greedy race of `methods` on `prompt`, as the Race tab runs it (specviz.serving.racing.run_race)."""
    from specviz.serving.racing import RaceSettings, run_race

    settings = RaceSettings(prompt, tuple(methods), max_new_tokens)
    *_, race = run_race(pair, settings, {}, threading.Event())  # the race as it stands at the end
    return race


def rounded(value: Any) -> Any:
    """`value` (a saved race's JSON) with every float to SIGNIFICANT significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def shipped_bytes(saved: dict) -> bytes:
    """A saved race (`race_to_dict`) as it ships: compact JSON, floats rounded, gzipped (the Race tab's
    loader reads plain or gzipped JSON)."""
    return gzip.compress(json.dumps(rounded(saved), separators=(",", ":")).encode(), compresslevel=9, mtime=0)


def saved_bytes(race: Any) -> bytes:
    """The race as it ships (`shipped_bytes` of what the Race tab's download saves)."""
    from specviz.serving.saved import race_to_dict

    return shipped_bytes(race_to_dict(race))


def refuse_disturbed(race: Any, where: str) -> None:
    """A race that failed a method, or whose timing the Race tab would flag, is not shipped."""
    from specviz.serving.timing import timing_flags

    failed = [f"{r.label}: {r.status} {r.message}".strip() for r in race.runs if r.status != "done"]
    if failed:
        raise SpecvizError(f"{where}: not every method finished ({'; '.join(failed)})")
    flags = timing_flags(race)
    if flags:
        said = "; ".join(f"{name}: {' '.join(lines)}" for name, lines in flags.items())
        raise SpecvizError(
            f"{where}: its timing is flagged as disturbed, so it is not shipped ({said}). Rerun it alone"
        )


def record_shipped(
    pair: ModelPair, prompts: Iterable[ShippedPrompt], methods: Sequence[str], out: Path, log: Any = print
) -> list[Path]:
    """Race and write each prompt's saved race under `out`; a disturbed race is not written, and the
    first one fails the whole call after the others are written (so a rerun redoes only those)."""
    out.mkdir(parents=True, exist_ok=True)
    written, refused = [], []
    for shipped in prompts:
        where = f"{shipped.benchmark} / {shipped.column} ({shipped.prompt_id})"
        try:
            data = b""
            for tokens in dict.fromkeys([shipped.max_new_tokens, min(shipped.max_new_tokens, FALLBACK_TOKENS)]):
                race = record(pair, shipped.text, methods, tokens)
                refuse_disturbed(race, where)
                data = saved_bytes(race)
                if len(data) <= MAX_FILE_BYTES:
                    break
            size = len(data)
            if size > MAX_FILE_BYTES:
                raise SpecvizError(f"{where}: {size / 2**10:.0f} KiB gzipped even at {FALLBACK_TOKENS} tokens")
        except SpecvizError as e:
            refused.append(str(e))
            log(f"refused: {e}")
            continue
        path = out / shipped.file
        path.write_bytes(data)
        written.append(path)
        log(f"{path}: {size / 2**10:.0f} KiB gzipped, {race.max_new_tokens} new tokens, {len(race.runs)} methods")
    total = sum(p.stat().st_size for p in out.glob("*.json.gz"))
    if total > MAX_TOTAL_BYTES:
        refused.append(
            f"the races under {out} total {total / 2**20:.2f} MB, above {MAX_TOTAL_BYTES / 2**20:.0f} MB: "
            f"record them again with --max-new-tokens {FALLBACK_TOKENS}"
        )
    if refused:
        raise SpecvizError("; ".join(refused))
    return written


def main(argv: list[str] | None = None) -> int:
    from specviz.methods import default_race
    from specviz.ui.pairs import resolve_pair

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="default", help="the model pair (the leaderboard's is 'default')")
    parser.add_argument("--out", type=Path, default=RACES, help="where the races are written")
    parser.add_argument("--only", nargs="*", default=(), help="only these columns (HumanEval, Translation, ...)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="at most this many new tokens (default: the benchmark's)"
    )
    args = parser.parse_args(argv)
    pair, notice = resolve_pair(args.pair)
    if notice:  # the default pair did not load: its races would be the fallback's
        print(notice, file=sys.stderr)
        return 2
    prompts = [
        replace(p, max_new_tokens=min(p.max_new_tokens, args.max_new_tokens or p.max_new_tokens))
        for p in shipped_prompts()
        if not args.only or p.column in args.only
    ]
    try:
        record_shipped(pair, prompts, default_race(), args.out)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
