"""Command-line benchmark: run methods on prompts, print a table, write JSON.

    python -m specviz.bench --pair tiny-random --methods all --suite humaneval --limit 3 \
        --max-new-tokens 32 --json out.json

    python -m specviz.bench --pair default --methods autoregressive,vanilla,heuristic,prompt_lookup \
        --peers --suite humaneval,gsm8k,mtbench --limit 20 --report benchmarks/cpu

    python -m specviz.bench --suite specbench --limit 5 --report out    # 5 prompts per category, Spec-Bench's table
    python -m specviz.bench --prompts my_prompts.jsonl --methods all     # your own prompts (JSONL or text lines)

Methods (and, with --peers, Hugging Face generate() doing the same job) run interleaved prompt by
prompt (their order rotates), after a warm-up, so that drift of the machine hits every one alike.
Speed figures are ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.limits import check_unique
from specviz.prompts import SUITES, Prompt, column_of, load_prompt_file, select, take


@dataclass(frozen=True)
class BenchConfig:
    pair: str  # pair name: tiny-random | default | a preset | TARGET,DRAFT
    methods: tuple[str, ...]  # registry names, in display order
    prompts: tuple[Prompt, ...]  # what every method decodes
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    speculation_length: int | None = None  # for every method with a speculation_length option (None: each its own default)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> its own options (override the above)
    repeats: int = 1  # runs of each (method, prompt); all are reported
    warmup: bool = True  # one short untimed run of each method first
    device: str = "auto"
    dtype: str = "auto"
    peers: tuple[str, ...] = ()  # Hugging Face generate() peers run alongside (specviz.peers)


def run_benchmark(cfg: BenchConfig, progress: bool = True) -> dict[str, Any]:
    """Every method (and peer) on every prompt; returns the JSON-ready result."""
    from tqdm.auto import tqdm

    from specviz.methods import get_method, new_session
    from specviz.models.pair import load_pair
    from specviz.peers import PEERS

    pair = load_pair(cfg.pair, device=cfg.device, dtype=cfg.dtype)
    entries = [_MethodEntry(get_method(m), method_options(cfg, m), new_session(get_method(m), pair)) for m in cfg.methods]
    entries += [_PeerEntry(name, method_options(cfg, PEERS[name].counterpart)) for name in cfg.peers]
    shared = dict(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
    if cfg.warmup:
        for entry in entries:
            entry.run(pair, cfg.prompts[0], dict(shared, max_new_tokens=8), cfg.seed)
    runs = []
    bar = tqdm(total=len(cfg.prompts) * cfg.repeats * len(entries), desc="benchmark", unit="run", disable=not progress)
    for i, prompt in enumerate(cfg.prompts):
        for repeat in range(cfg.repeats):
            rotation = (i * cfg.repeats + repeat) % len(entries)  # A B C, B C A, ...: no entry always goes first
            for entry in entries[rotation:] + entries[:rotation]:
                bar.set_postfix_str(f"{entry.name} on {prompt.id}")
                run = entry.run(pair, prompt, shared, cfg.seed + repeat)
                runs.append(dict(run, suite=prompt.suite, category=prompt.category, prompt_id=prompt.id, repeat=repeat))
                bar.update()
    bar.close()
    _mark_parity(runs, greedy=cfg.temperature == 0)
    _mark_ties(runs, pair, cfg.prompts)
    names = [e.name for e in entries]
    columns = dict.fromkeys(column_of(r["category"]) for r in runs if r["category"])  # Spec-Bench's layout
    return {
        "pair": {"name": pair.name, **pair.info},
        "device": describe_machine(pair.info.get("device", "cpu")),
        "config": {**asdict(cfg), "prompts": [p.id for p in cfg.prompts]},
        "runs": runs,
        "summary": summary_rows(runs, names),
        "by_suite": [dict(row, suite=suite) for suite in dict.fromkeys(r["suite"] for r in runs)
                     for row in summary_rows([r for r in runs if r["suite"] == suite], names)],
        "by_category": [dict(row, category=col) for col in columns
                        for row in summary_rows([r for r in runs if r["category"] and column_of(r["category"]) == col], names)],
    }


def method_options(cfg: BenchConfig, name: str) -> dict[str, Any]:
    """The options a method runs with: the shared speculation length if it takes one and one was
    given, then its own --option values."""
    from specviz.methods import get_method

    shared = {} if cfg.speculation_length is None else {"speculation_length": cfg.speculation_length}
    return {**get_method(name).select(shared), **cfg.options.get(name, {})}


class _MethodEntry:
    """One of our methods, as the benchmark runs it (with its options and session, e.g. OSD's learner)."""

    def __init__(self, spec, options: dict, session: dict):
        self.spec, self.options, self.session, self.name, self.needs_draft = spec, options, session, spec.name, spec.needs_draft

    def run(self, pair, prompt: Prompt, shared: dict, seed: int) -> dict[str, Any]:
        from specviz.runner import generate

        result = generate(self.name, pair, prompt.text, seed=seed, **shared, **self.options, **self.session)
        s = result.summary
        oracle = [r.oracle_sl for r in result.records if r.oracle_sl is not None]
        return {
            "method": self.name,
            "kind": "method",
            "output_ids": list(s.output_ids),
            "new_tokens": s.new_tokens,
            "wall_s": s.wall_s,
            "target_forwards": s.target_forwards,
            "draft_forwards": s.draft_forwards,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "iterations": s.iterations,
            "stop_reason": s.stop_reason,
            "oracle_sl_mean": sum(oracle) / len(oracle) if oracle else None,
        }


class _PeerEntry:
    """A Hugging Face generate() peer (specviz.peers), run on the same prompt ids with its
    counterpart's speculation length."""

    def __init__(self, name: str, counterpart_options: dict[str, Any]):
        from specviz.methods import get_method
        from specviz.peers import PEERS

        self.name, self.needs_draft = name, PEERS[name].needs_draft
        spec = get_method(PEERS[name].counterpart)
        gamma = counterpart_options.get("speculation_length", getattr(spec.options(), "speculation_length", None))
        self.options = {} if gamma is None else {"speculation_length": gamma}

    def run(self, pair, prompt: Prompt, shared: dict, seed: int) -> dict[str, Any]:
        from specviz.models.pair import encode_prompt
        from specviz.peers import run_peer

        return run_peer(self.name, pair, encode_prompt(pair, prompt.text), seed=seed, **shared, **self.options)


def _mark_parity(runs: list[dict], greedy: bool) -> None:
    """For greedy runs: does each output equal the autoregressive (and HF greedy) output on the same prompt?"""
    for reference_name, key in (("autoregressive", "matches_autoregressive"), ("hf_greedy", "matches_hf_greedy")):
        reference = {(r["prompt_id"], r["repeat"]): r["output_ids"] for r in runs if r["method"] == reference_name}
        for r in runs:
            ref = reference.get((r["prompt_id"], r["repeat"]))
            r[key] = (r["output_ids"] == ref) if greedy and ref is not None else None


def _mark_ties(runs: list[dict], pair, prompts: tuple[Prompt, ...]) -> None:
    """Where a greedy output differs from autoregressive decoding: at the first differing token, is it
    a tie of the target's dtype (`specviz.parity`) or a real difference? `parity`: same | tie | differs."""
    from specviz.models.pair import encode_prompt
    from specviz.parity import compare

    reference = {(r["prompt_id"], r["repeat"]): r for r in runs if r["method"] == "autoregressive"}
    prompt_ids = {p.id: encode_prompt(pair, p.text) for p in prompts}
    for r in runs:
        ref = reference.get((r["prompt_id"], r["repeat"]))
        if r.get("matches_autoregressive") is None or ref is None:
            continue
        if r["matches_autoregressive"]:
            r["parity"] = "same"
            continue
        parity = compare(pair, prompt_ids[r["prompt_id"]], ref["output_ids"], r["output_ids"])
        r["parity"], r["first_difference"] = parity.verdict, parity.first_difference


def summary_rows(runs: list[dict], methods: list[str]) -> list[dict[str, Any]]:
    """One row per method or peer: totals over all its runs (definitions in specviz.metrics), the
    median of per-prompt tokens/s, and for our methods the median ratio to their HF peer."""
    import statistics

    from specviz import metrics
    from specviz.peers import PEERS

    rows = []
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        new = sum(r["new_tokens"] for r in mine)
        tf = sum(r["target_forwards"] for r in mine)
        drafted = [r["drafted"] for r in mine if r["drafted"] is not None]
        per_prompt = [metrics.tokens_per_s(r["new_tokens"], r["wall_s"]) for r in mine]
        rows.append(
            {
                "method": method,
                "kind": mine[0].get("kind", "method"),
                "runs": len(mine),
                "new_tokens": new,
                "wall_s": sum(r["wall_s"] for r in mine),
                "tokens_per_s": metrics.tokens_per_s(new, sum(r["wall_s"] for r in mine)),
                "median_tokens_per_s": statistics.median(t for t in per_prompt if t is not None) if any(per_prompt) else None,
                "acceptance_rate": metrics.acceptance_rate(sum(r["accepted"] for r in mine), sum(drafted)) if drafted else None,
                "mean_accepted_length": metrics.mean_accepted_length(new, tf),
                "target_forwards_per_token": tf / new if new else None,
                "matches_autoregressive": _all_or_none(r.get("matches_autoregressive") for r in mine),
                "matches_hf_greedy": _all_or_none(r.get("matches_hf_greedy") for r in mine),
                "ties": sum(r.get("parity") == "tie" for r in mine),  # outputs that part from AR at a tie of the dtype
                "differs": sum(r.get("parity") == "differs" for r in mine),  # ... at a real difference: a fault
            }
        )
    ar = next((r["tokens_per_s"] for r in rows if r["method"] == "autoregressive"), None)
    for row in rows:
        row["speedup_vs_autoregressive"] = metrics.speedup(ar, row["tokens_per_s"])
        peer = next((p.name for p in PEERS.values() if p.counterpart == row["method"] and p.name in methods
                     and p.assistant != {}), None)  # HF's own defaults are a different algorithm: not a peer
        row["peer"] = peer
        row["ratio_to_peer"] = _median_paired_ratio(runs, row["method"], peer) if peer else None
    return rows


def _all_or_none(values) -> bool | None:
    known = [v for v in values if v is not None]
    return all(known) if known else None


def _median_paired_ratio(runs: list[dict], method: str, peer: str) -> float | None:
    """Median over (prompt, repeat) of method tokens/s / peer tokens/s, each pair measured back to back."""
    import statistics

    by_key = {(r["method"], r["prompt_id"], r["repeat"]): r for r in runs}
    ratios = []
    for (name, prompt_id, repeat), r in by_key.items():
        other = by_key.get((peer, prompt_id, repeat))
        if name == method and other and r["wall_s"] > 0 and other["wall_s"] > 0 and other["new_tokens"]:
            ratios.append((r["new_tokens"] / r["wall_s"]) / (other["new_tokens"] / other["wall_s"]))
    return statistics.median(ratios) if ratios else None


def describe_machine(device: str) -> dict[str, Any]:
    import torch

    info = {"device": device, "python": platform.python_version(), "torch": torch.__version__}
    info["cpu"] = platform.processor() or platform.machine()
    info["threads"] = torch.get_num_threads()
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def format_table(summary: list[dict[str, Any]]) -> str:
    import pandas as pd

    df = pd.DataFrame(summary).set_index("method")
    columns = {"runs": "runs", "new_tokens": "tokens", "tokens_per_s": "tok/s", "median_tokens_per_s": "median tok/s",
               "speedup_vs_autoregressive": "speedup", "acceptance_rate": "accept",
               "mean_accepted_length": "mean acc. len", "target_forwards_per_token": "target fwd/tok",
               "matches_autoregressive": "= AR"}
    if "ties" in df and (df["ties"] > 0).any() or "differs" in df and (df["differs"] > 0).any():
        columns |= {"ties": "ties", "differs": "differs"}  # outputs parted from AR at a tie of the dtype / for real
    if (df["kind"] == "peer").any():
        columns |= {"matches_hf_greedy": "= HF", "peer": "peer", "ratio_to_peer": "× peer"}
    df = df[list(columns)].rename(columns=columns)
    return df.to_string(float_format=lambda x: f"{x:.3f}", na_rep="-")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specviz.bench",
        description=__doc__.split("\n\n")[0],
        epilog="paper experiments and tools (agreement, load): python -m specviz.bench EXPERIMENT --help, with EXPERIMENT one of: "
        + (", ".join(experiments()) or "none yet"),
    )
    p.add_argument("--pair", default="default", help="tiny-random | default | a preset name | TARGET,DRAFT")
    p.add_argument("--methods", default="autoregressive,vanilla", help="comma-separated registry names, or 'all'")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one prompt text")
    src.add_argument("--suite", help=f"comma-separated suites: {', '.join(SUITES)}")
    src.add_argument("--prompts", type=Path, metavar="FILE",
                     help="a prompt file: JSON lines with a 'prompt' or 'turns' field (and optionally 'category', "
                          "'id'), or plain text, one prompt per line")  # fmt: skip
    p.add_argument("--category", default="", help="comma-separated categories to keep (Spec-Bench's: translation, qa, ...)")
    p.add_argument("--limit", type=int, help="prompts per suite, or per category where prompts have one "
                                             "(default: 5 of a suite, all of a file)")  # fmt: skip
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts of each suite (or category) first")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speculation-length", "--gamma", type=int, dest="speculation_length",
                   help="for every method with a speculation_length option (default: each method's own)")
    p.add_argument("--option", action="append", default=[], metavar="METHOD.NAME=VALUE",
                   help="one option of one method, e.g. sssd.speculation_length=8 or disco.threshold=0.9 (repeatable); "
                        "a method's options are the fields of its options class (python -m specviz.bench --list-options)")
    p.add_argument("--list-options", action="store_true", help="print every method's options and exit")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--device", default="auto", help="auto (a CUDA GPU, else MPS, else the CPU) | cpu | cuda | cuda:N | mps")
    p.add_argument("--dtype", default="auto", help="auto (float32 unless the pair is too big for it: lossless) | float32 | bfloat16 | float16")
    p.add_argument("--peers", action="store_true",
                   help="also run Hugging Face generate() peers (greedy, assisted, prompt lookup) in the same run")
    p.add_argument("--json", type=Path, help="write the full result here")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="write results.json, summary.csv, summary.md and report.html (plotly figures) into DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from specviz.methods import get_method, method_names
    from specviz.peers import peers_for

    methods = method_names() if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise SpecvizError(f"--methods names no method: give comma-separated names or 'all' ({', '.join(method_names())})")
    for name in methods:
        get_method(name)  # an unknown name fails now, before any model loads
    check_unique("--methods", methods)
    for path in (args.json, args.report and args.report / "results.json"):
        if path is not None:
            check_writable(path)
    categories = tuple(c.strip() for c in args.category.split(",") if c.strip())
    if args.limit is not None and args.limit < 1:
        raise SpecvizError("--limit must be at least 1")
    if args.prompt is not None:
        prompts = [Prompt("custom", "prompt/0", args.prompt)]
    elif args.prompts is not None:
        prompts = select(load_prompt_file(args.prompts), args.limit, args.offset, categories)
    else:
        suites = [s.strip() for s in (args.suite or "humaneval").split(",")]
        prompts = [p for s in suites for p in take(s, 5 if args.limit is None else args.limit, args.offset, categories)]
    if not prompts:
        raise SpecvizError("no prompts selected: check --suite/--prompts, --category, --limit and --offset")
    if args.repeats < 1:
        raise SpecvizError("--repeats must be at least 1")
    return BenchConfig(
        pair=args.pair,
        methods=tuple(methods),
        prompts=tuple(prompts),
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        speculation_length=args.speculation_length,
        options=parse_options(args.option, methods),
        repeats=args.repeats,
        warmup=not args.no_warmup,
        device=args.device,
        dtype=args.dtype,
        peers=tuple(peers_for(methods)) if args.peers else (),
    )


def parse_options(assignments: list[str], methods: list[str]) -> dict[str, dict[str, Any]]:
    """--option METHOD.NAME=VALUE flags as {method: {name: value}}, each checked now."""
    from specviz.methods import get_method
    from specviz.methods.options import parse_option

    out: dict[str, dict[str, Any]] = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        method, dot, name = key.strip().partition(".")
        if not (sep and dot and method and name):
            raise SpecvizError(f"--option {text!r}: write METHOD.NAME=VALUE, e.g. sssd.speculation_length=8")
        if method not in methods:
            raise SpecvizError(f"--option {text!r}: {method!r} is not among --methods")
        try:
            out.setdefault(method, {})[name] = parse_option(get_method(method).options, name, value)
        except SpecvizError as e:
            raise SpecvizError(f"--option {text!r}: {e}") from None
    return out


def options_listing() -> str:
    """Every method's options, their ranges, defaults and help (for --list-options); "text" ones
    (file paths) are the command line's and the library's only, never the app's."""
    from specviz.methods import all_methods
    from specviz.methods.options import option_fields

    lines = []
    for spec in all_methods():
        fields_ = option_fields(spec.options, text=True)
        if fields_:
            lines.append(f"{spec.name} ({spec.label})")
        for f in fields_:
            span = f" in [{f.least:g}, {f.most:g}]" if f.kind in ("int", "float") else (" one of " + "|".join(f.choices) if f.choices else "")
            default = "tuned" if f.default is None else repr(f.default) if f.kind == "text" else f.default
            lines.append(f"  {spec.name}.{f.name}  {f.kind}{span}, default {default}: {f.help}")
    return "\n".join(lines)


def check_writable(path: Path) -> None:
    """Fail before a long run, not after it, when its output cannot be written."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # --report creates missing folders
        folder = folder.parent
    try:
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a folder")
        with tempfile.TemporaryFile(dir=folder):  # permissions alone say little (root, read-only mounts)
            pass
    except OSError as e:
        raise SpecvizError(f"cannot write {path} ({e.strerror or e}): choose a file in a folder you can write to") from None


def experiments() -> list[str]:
    """The paper experiments: modules of `specviz.experiments`, each with `main(argv) -> int`."""
    import pkgutil

    import specviz.experiments as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in experiments():  # python -m specviz.bench <experiment> [options]
        import importlib

        try:
            return importlib.import_module(f"specviz.experiments.{argv[0]}").main(argv[1:])
        except SpecvizError as e:  # a user's mistake: one line, no traceback
            print(f"error: {e}", file=sys.stderr)
            return 2
    args = parse_args(argv)
    if args.list_options:
        print(options_listing())
        return 0
    try:
        cfg = config_from_args(args)
        result = run_benchmark(cfg, progress=not args.quiet)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"pair {result['pair']['name']} on {result['device']['device']} in {result['pair']['dtype']}, {len(cfg.prompts)} prompts, "
          f"max {cfg.max_new_tokens} new tokens, {'greedy' if cfg.temperature == 0 else f'T={cfg.temperature}'}")
    print(format_table(result["summary"]))
    try:
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        if args.report:
            from specviz.reports import write_report

            paths = write_report(result, args.report, command="python -m specviz.bench " + " ".join(argv))
            print("wrote " + ", ".join(str(p) for p in paths))
    except OSError as e:
        print(f"error: could not write the results: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
