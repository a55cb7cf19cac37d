"""Which γ a benchmark's chain rows favour, read again from its JSON (issue 50's check at two γ values).

The bench prints this under its table (`harness.by_position`); this reads it from a results file, for the
prompts of another run if asked (so that a run at one γ predicts a run at another on the same prompts),
and prints the speedup measured there beside it. `--gamma METHOD=G` says a method of fixed γ raced at G,
for a file written before the bench recorded it per run (never for an n-gram row: its passes that found
no match draft nothing, so its passes are not all of one γ).

    python -m specviz.bench which_gamma benchmarks/vllm/bench1.json.gz --gamma vanilla=4 --gamma vllm_draft=4 \
        --prompts-of benchmarks/vllm/bench2.json.gz
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from specviz import metrics
from specviz.harness import RunRow, by_position, summary_rows
from specviz.reports import read_json


def rows_of(path: Path, prompts_of: Path | None, gammas: dict[str, int]) -> list[RunRow]:
    runs = read_json(path)["runs"]
    if prompts_of is not None:
        keep = {r["prompt_id"] for r in read_json(prompts_of)["runs"]}
        runs = [r for r in runs if r["prompt_id"] in keep]
    names = {f.name for f in dataclasses.fields(RunRow)}
    rows = [RunRow(**{k: v for k, v in r.items() if k in names}) for r in runs]
    return [dataclasses.replace(r, gamma=gammas[r.method]) if r.method in gammas else r for r in rows]


def method_gamma(text: str) -> tuple[str, int]:
    method, _, gamma = text.partition("=")
    if not gamma.isdigit() or int(gamma) < 1:
        raise argparse.ArgumentTypeError(f"takes METHOD=G, G a whole number of at least 1; got {text!r}")
    return method.strip(), int(gamma)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.bench which_gamma", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a bench --json file (or .json.gz)")
    ap.add_argument("--prompts-of", type=Path, help="only the prompts another results file ran")
    ap.add_argument(
        "--gamma", type=method_gamma, action="append", default=[], help="METHOD=G: it raced at a fixed γ of G"
    )
    args = ap.parse_args(argv)
    rows = rows_of(args.results, args.prompts_of, dict(args.gamma))
    methods = list(dict.fromkeys(r.method for r in rows))
    measured = {s["method"]: s["tokens_per_s"] for s in summary_rows(rows, methods)}
    print(f"{len({r.prompt_id for r in rows})} prompts of {args.results}")
    for method in methods:
        answer = by_position(rows, method).get("which_gamma")
        if not answer:
            continue
        base = answer["baseline"]
        print(
            f"{method} (γ = {answer['gamma']}, a pass {answer['pass_ratio']:.3f} of {base}'s steps; accepted per "
            f"position {' '.join(f'{a:.3f}' for a in answer['rates'])}): measured "
            f"{metrics.speedup(measured[base], measured[method]):.3f}x {base}"
        )
        for g, tokens, cost, speedup in answer["rows"]:
            print(f"  γ = {g}: {tokens:.3f} tokens a pass for {cost:.3f} steps: {speedup:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
