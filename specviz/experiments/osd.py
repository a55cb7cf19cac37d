r"""OSD's Figures 3-5 on one pair: acceptance over a stream of requests, online draft vs the same draft kept static.

    python -m specviz.bench osd --pair default --suites gsm8k --requests 200 --max-new-tokens 64
    python -m specviz.bench osd --pair default --suites gsm8k,humaneval --shift-every 100   # distribution shift
    python -m specviz.bench osd --pair tiny-random --suites gsm8k --distinct 2 --requests 40 \
        --update-interval 2 --lr 3e-3

Greedy decoding. Every request is served for real by `osd` (the learner updates the draft every
--update-interval requests, between requests); the static draft's acceptance on the same request
is replayed from the target's output (exact for greedy, see `specviz.serving.stream`), and over the
last --measure-last requests the static draft also serves for real, for a measured speedup beside
the one OSD's formula implies. Writes results.json, rows.csv, tokens.md and figures (HTML) under --out.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specviz.osd.analysis import window_alpha
from specviz.prompts import add_prompt_args, prompt_sources

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair
    from specviz.osd.learner import OnlineLearner


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from specviz.osd.learner import OsdConfig

    d = OsdConfig()
    p = argparse.ArgumentParser(prog="python -m specviz.bench osd", description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="default")
    add_prompt_args(p, "gsm8k")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--shift-every", type=int, default=0, help="next suite every N requests (0: split evenly)")
    p.add_argument("--mixed", action="store_true", help="draw each request's suite at random")
    p.add_argument("--distinct", type=int, default=0, help="cycle through this many prompts per suite (0: all)")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--speculation-length", "--gamma", type=int, default=4, dest="speculation_length")
    p.add_argument("--update-interval", type=int, default=d.update_interval)
    p.add_argument("--loss", default=d.loss, choices=["fkl", "rkl", "jsd"])
    p.add_argument("--beta", type=float, default=d.beta)
    p.add_argument("--temperature", type=float, default=d.temperature, help="distillation temperature")
    p.add_argument("--positions", default=d.positions, choices=["wrong", "all"])
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--buffer-cap", type=int, default=d.buffer_cap)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-requests", type=int, default=d.batch_requests)
    p.add_argument("--optimizer", default=d.optimizer, choices=["adamw", "sgd"])
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--background", action="store_true", help="train in a worker thread")
    p.add_argument("--window", type=int, default=50, help="requests in the moving acceptance window")
    p.add_argument(
        "--measure-last", type=int, default=10, help="also serve the last N requests with the static draft for real"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--save-draft", type=Path, help="write the adapted draft here (safetensors)")
    p.add_argument("--out", type=Path, default=Path("results/osd"))
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def summarize_stream(rows: list[dict], window: int, gamma: int) -> dict[str, Any]:
    """alpha of both drafts over the first and the last `window` requests; the speedups."""
    from specviz.cost.formulas import osd_speedup

    first, last = rows[:window], rows[-window:]
    out: dict[str, Any] = {
        f"{who}_alpha_{name}": window_alpha(part, who)
        for who in ("static", "osd")
        for name, part in (("first", first), ("last", last))
    }
    out["alpha_gain_last"] = out["osd_alpha_last"] - out["static_alpha_last"]
    draft_ms = sum(r["draft_ms"] for r in rows) / max(1, sum(r["draft_forwards"] for r in rows))
    verify_ms = sum(r["verify_ms"] for r in rows) / max(1, sum(r["target_forwards"] for r in rows))
    out["c_measured"] = draft_ms / verify_ms  # draft forward / verification pass, measured in the OSD runs
    if 0 < out["static_alpha_last"] < 1 and 0 < out["osd_alpha_last"] < 1:
        out["implied_speedup"] = osd_speedup(out["static_alpha_last"], out["osd_alpha_last"], gamma, out["c_measured"])
    out["segments"] = segments(rows, window)
    measured = [r for r in rows if "static_wall_s" in r]
    if measured:
        out["measured_requests"] = len(measured)
        out["measured_speedup"] = sum(r["static_wall_s"] for r in measured) / sum(r["osd_wall_s"] for r in measured)
        out["static_replay_exact"] = all(r["static_matches"] for r in measured)
        out["measured_speedup_vs_ar"] = sum(r["ar_wall_s"] for r in measured) / sum(r["osd_wall_s"] for r in measured)
        out["static_speedup_vs_ar"] = sum(r["ar_wall_s"] for r in measured) / sum(r["static_wall_s"] for r in measured)
        out["ar_matches"] = all(r["ar_matches"] for r in measured)
    return out


def segments(rows: list[dict], window: int) -> list[dict[str, Any]]:
    """alpha at the start and the end of each stretch of one suite (does alpha dip at a shift and recover?)."""
    from specviz.plots.online import shift_points

    bounds = (
        [0, *shift_points(rows, max_shifts=50), len(rows)] if len({r["suite"] for r in rows}) > 1 else [0, len(rows)]
    )
    out = []
    for lo, hi in itertools.pairwise(bounds):
        part, n = rows[lo:hi], max(1, min(window, (hi - lo) // 2))
        row = {"suite": part[0]["suite"], "requests": [lo, hi - 1]}
        for who in ("static", "osd"):
            for name, sub in (("start", part[:n]), ("end", part[-n:])):
                row[f"{who}_alpha_{name}"] = window_alpha(sub, who)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    from tqdm.auto import tqdm

    from specviz.errors import SpecvizError
    from specviz.models.pair import load_pair
    from specviz.osd.learner import OnlineLearner, OsdConfig
    from specviz.serving.stream import StreamConfig, request_stream, simulate

    args = parse_args(argv)
    try:
        stream_cfg = StreamConfig(
            tuple(prompt_sources(args)),
            args.requests,
            args.shift_every,
            args.mixed,
            args.distinct,
            args.offset,
            args.seed,
            files=True,
        )
        learner_cfg = OsdConfig(**{f.name: getattr(args, f.name) for f in fields(OsdConfig)})
        pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
        prompts = request_stream(stream_cfg)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    learner = OnlineLearner(pair.draft_model, learner_cfg)
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(prompts), desc="osd stream", unit="request", disable=args.quiet)
    for row in simulate(
        pair,
        prompts,
        learner,
        max_new_tokens=args.max_new_tokens,
        speculation_length=args.speculation_length,
        measure_static_from=len(prompts) - args.measure_last,
    ):
        rows.append(row)
        write_csv(args.out / "rows.csv", rows)  # so far: a long run stopped early still leaves its requests
        recent = rows[-args.window :]
        bar.set_postfix_str(" ".join(f"alpha {who} {window_alpha(recent, who) or 0:.3f}" for who in ("osd", "static")))
        bar.update()
    bar.close()
    learner.wait()
    summary = summarize_stream(rows, args.window, args.speculation_length)
    tokens = token_analysis(pair, learner, rows[-args.window :])
    result = {
        "pair": {"name": pair.name, **pair.info},
        "stream": asdict(stream_cfg),
        "learner": asdict(learner_cfg),
        "args": {k: str(v) for k, v in vars(args).items()},
        "summary": summary,
        "updates": learner.updates,
        "tokens": tokens,
        "rows": rows,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    write_csv(args.out / "rows.csv", rows)
    (args.out / "tokens.md").write_text(tokens_markdown(tokens))
    write_figures(args.out, rows, learner.updates, tokens, args.window)
    if args.save_draft:
        print(f"adapted draft: {learner.save(args.save_draft)}")
    print(
        f"pair {pair.name}, {len(rows)} requests from {', '.join(stream_cfg.suites)}, gamma {args.speculation_length}, "
        f"{len(learner.updates)} updates"
    )
    for key, value in summary.items():
        if key != "segments":
            print(f"  {key:22s} {value:.3f}" if isinstance(value, float) else f"  {key:22s} {value}")
    for seg in summary["segments"]:
        f = {k: "n/a" if v is None else f"{v:.3f}" for k, v in seg.items() if k.endswith(("_start", "_end"))}
        print(
            f"  {seg['suite']} requests {seg['requests'][0]}-{seg['requests'][1]}: alpha osd {f['osd_alpha_start']} -> "
            f"{f['osd_alpha_end']}, static {f['static_alpha_start']} -> {f['static_alpha_end']}"
        )
    print(f"wrote {args.out}/results.json, rows.csv, tokens.md, acceptance.html, tokens.html")
    return 0


def token_analysis(pair: ModelPair, learner: OnlineLearner, rows: list[dict], top: int = 100) -> list[dict]:
    """Figure 6 / Table 2: per-token precision and recall of the initial and the adapted draft,
    teacher-forced on the target's outputs of `rows`."""
    from specviz.oracle import draft_predictions
    from specviz.osd.analysis import token_table

    before, after, actual = [], [], []
    for r in rows:
        sequence, start = r["prompt_ids"] + r["output_ids"], len(r["prompt_ids"])
        before.append(draft_predictions(pair.draft, sequence, start))  # type: ignore[arg-type]  # OSD needs a draft
        after.append(draft_predictions(learner.serving, sequence, start))
        actual.append(np.asarray(r["output_ids"]))
    table = token_table(np.concatenate(before), np.concatenate(after), np.concatenate(actual), top)
    from specviz.models.pair import readable_token

    return [dict(t, text=readable_token(pair.tokenizer, t["token"])) for t in table]


def tokens_markdown(tokens: list[dict], show: int = 15) -> str:
    lines = ["| token | count | precision before | after | recall before | after |", "|---|---|---|---|---|---|"]
    lines += [
        f"| `{t['text']}` | {t['count']} | {t['precision_before']:.2f} | {t['precision_after']:.2f} | "
        f"{t['recall_before']:.2f} | {t['recall_after']:.2f} |"
        for t in tokens[:show]
    ]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    flat = [{k: v for k, v in r.items() if k not in ("output_ids", "prompt_ids", "update")} for r in rows]
    keys = list(dict.fromkeys(k for r in flat for k in r))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(flat)


def write_figures(out: Path, rows: list[dict], updates: list[dict], tokens: list[dict], window: int) -> None:
    from specviz.plots.online import acceptance_over_stream, acceptance_per_domain, token_precision

    acceptance_over_stream(rows, updates, window).write_html(out / "acceptance.html", include_plotlyjs="cdn")
    if len({r["suite"] for r in rows}) > 1:
        acceptance_per_domain(rows, window).write_html(out / "domains.html", include_plotlyjs="cdn")
    token_precision(tokens).write_html(out / "tokens.html", include_plotlyjs="cdn")


if __name__ == "__main__":
    sys.exit(main())
