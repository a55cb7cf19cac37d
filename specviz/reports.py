"""Benchmark reports: the same result as JSON, CSV, Markdown and a self-contained HTML page.

The repository keeps a run's results.json (gzip'd when large) but not its report.html, which inlines
plotly.js (4.9 MB); `python -m specviz.reports DIR` writes it again from DIR's results.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import html
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from specviz.errors import SpecvizError

if TYPE_CHECKING:
    from collections.abc import Callable

# Columns a reader needs, in order, with their printed names.
COLUMNS = {
    "method": "method",
    "kind": "kind",
    "runs": "runs",
    "new_tokens": "tokens",
    "tokens_per_s": "tok/s",
    "median_tokens_per_s": "median tok/s",
    "speedup_vs_autoregressive": "speedup vs AR",
    "acceptance_rate": "acceptance",
    "mean_accepted_length": "mean accepted length",
    "target_forwards_per_token": "target fwd/token",
    "matches_autoregressive": "= AR",
    "matches_hf_greedy": "= HF greedy",
    "peer": "HF peer",
    "ratio_to_peer": "× peer (median)",
}


def summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df]].rename(columns=COLUMNS)


def markdown(result: dict[str, Any], command: str | None = None) -> str:
    """A Markdown page: machine, command, the headline table and the per-suite table."""
    cfg, dev = result.get("config", {}), result.get("device", {})
    length = cfg.get("speculation_length") or "each method's own"
    lines = [f"# specviz benchmark: pair `{result['pair']['name']}`", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"- machine: {dev.get('cpu', '?')}, {dev.get('threads', '?')} threads, device {dev.get('device', '?')}"
        + (f" ({dev['gpu']})" if dev.get("gpu") else "")
        + f", torch {dev.get('torch', '?')}",
        f"- prompts: {len(cfg.get('prompts', []))}, max {cfg.get('max_new_tokens')} new tokens, "
        + ("greedy" if not cfg.get("temperature") else f"temperature {cfg['temperature']}")
        + f", speculation length {length}"
        + "".join(f", {m}.{k} = {v}" for m, opts in (cfg.get("options") or {}).items() for k, v in opts.items())
        + f", repeats {cfg.get('repeats')}",
        (
            "- speedup = tokens/s ÷ our autoregressive tokens/s (all prompts); × peer = median over prompts of "
            "our tokens/s ÷ the Hugging Face peer's on the same prompt, measured back to back"
        ),
        "",
        summary_frame(result["summary"]).to_markdown(index=False, floatfmt=".3f"),
        "",
    ]
    if result.get("by_category"):
        lines += ["## In Spec-Bench's layout", "", spec_bench_table(result), ""]
    if result.get("by_suite"):
        by = pd.DataFrame(result["by_suite"])
        pivot = by.pivot_table(index="method", columns="suite", values="speedup_vs_autoregressive", sort=False)
        if pivot.empty:  # no autoregressive run: there is nothing to divide by
            return "\n".join(lines)
        lines += ["## Speedup vs autoregressive, per suite", "", pivot.to_markdown(floatfmt=".3f"), ""]
    return "\n".join(lines)


def spec_bench_table(result: dict[str, Any]) -> str:
    """Speedup per category column, the mean accepted tokens per step and the overall speedup, one
    row per method: the layout of Spec-Bench's leaderboard (hemingkx/Spec-Bench Leaderboard.md)."""
    by = pd.DataFrame(result["by_category"])
    speedup = by.pivot_table(index="method", columns="category", values="speedup_vs_autoregressive", sort=False)
    overall = pd.DataFrame(result["summary"]).set_index("method")
    order = [m for m in overall.index if m in speedup.index]

    def fmt(unit: str) -> Callable[[float], str]:
        return lambda x: "–" if pd.isna(x) else f"{x:.2f}{unit}"

    table = speedup.reindex(order).map(fmt("x"))
    table["#Mean Accepted Tokens"] = overall["mean_accepted_length"].reindex(order).map(fmt(""))
    table["Overall"] = overall["speedup_vs_autoregressive"].reindex(order).map(fmt("x"))
    return table.to_markdown()


def html_page(result: dict[str, Any], command: str | None = None) -> str:
    """One self-contained HTML file (plotly.js inlined once) with the tables and figures."""
    from specviz.plots.bench import report_figures

    figures = report_figures(result)
    parts = [f.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False) for i, f in enumerate(figures)]
    table = summary_frame(result["summary"]).to_html(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>specviz benchmark</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right}</style>"
        f"</head><body><h1>specviz benchmark: {html.escape(result['pair']['name'])}</h1>"
        + (f"<pre>{html.escape(command)}</pre>" if command else "")
        + f"<pre>{html.escape(json.dumps(result.get('device', {})))}</pre>{table}"
        + "".join(parts)
        + "</body></html>"
    )


def write_report(result: dict[str, Any], out_dir: Path, command: str | None = None) -> list[Path]:
    """Write results.json, summary.csv, summary.md and report.html into `out_dir`, each whole or not
    at all (`write_atomically`); all four are made before the first is written."""
    out_dir = Path(out_dir)
    texts = {
        "results.json": json.dumps(dict(result, command=command), indent=1),
        "summary.csv": summary_frame(result["summary"]).to_csv(index=False),
        "summary.md": markdown(result, command),
        "report.html": html_page(result, command),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        write_atomically(out_dir / name, text)
    return [out_dir / name for name in texts]


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: into a temporary file in the same folder, then
    renamed over `path` (os.replace), so a failed write (a full disk, a quota) leaves the file that
    was there, never half of the new one, and no temporary behind. Its OSError names `path`."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # this process's own: no one else's file
    try:
        with temporary.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the file
        os.replace(temporary, path)
    except BaseException as e:
        with contextlib.suppress(OSError):  # gone already, or a folder that takes nothing
            temporary.unlink()
        if isinstance(e, OSError):
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def read_json(path: str | Path) -> Any:
    """A results file, plain or gzip'd: asked for `X.json` where only `X.json.gz` exists (as the
    repository keeps large results), this reads the compressed one."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    if not path.exists() and path.suffix == ".json" and packed.exists():
        path = packed
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return json.load(f)
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecvizError(f"no file {path} (nor {packed.name})") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m specviz.reports",
        description="Write a benchmark's report.html again from its results.json (or .json.gz).",
    )
    ap.add_argument("results", type=Path, help="a folder written by `specviz.bench --report`, or its results file")
    ap.add_argument("--out", type=Path, help="the page to write (default: report.html beside the results)")
    args = ap.parse_args(argv)
    path = args.results / "results.json" if args.results.is_dir() else args.results
    try:
        result = read_json(path)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or path.parent / "report.html"
    try:
        write_atomically(out, html_page(result, result.get("command")))
    except OSError as e:
        print(f"error: could not write the report: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
