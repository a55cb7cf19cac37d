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
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specviz.errors import SpecvizError
from specviz.harness import Variant, check_writable, describe_machine, mark_parity, run_interleaved, summary_rows
from specviz.limits import MAX_SEED, check_count, check_temperature, check_unique
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
    # for every method with a speculation_length option (None: each its own default)
    speculation_length: int | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> its own options (override the above)
    repeats: int = 1  # runs of each (method, prompt); all are reported
    warmup: bool = True  # one short untimed run of each method first
    device: str = "auto"
    dtype: str = "auto"
    peers: tuple[str, ...] = ()  # Hugging Face generate() peers run alongside (specviz.peers)


def run_benchmark(cfg: BenchConfig, progress: bool = True) -> dict[str, Any]:
    """Every method (and peer) on every prompt (`specviz.harness`); returns the JSON-ready result."""
    from specviz.models.pair import load_pair

    pair = load_pair(cfg.pair, device=cfg.device, dtype=cfg.dtype)
    rows = run_interleaved(
        pair,
        variants(cfg),
        cfg.prompts,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=cfg.seed,
        repeats=cfg.repeats,
        warmup=cfg.warmup,
        progress=progress,
    )
    rows = mark_parity(rows, pair, cfg.prompts, greedy=cfg.temperature == 0)
    names = [*cfg.methods, *cfg.peers]
    columns = dict.fromkeys(column_of(r.category) for r in rows if r.category)  # Spec-Bench's layout
    return {
        "pair": {"name": pair.name, **pair.info},
        "device": describe_machine(pair.info.get("device", "cpu")),
        "config": {**asdict(cfg), "prompts": [p.id for p in cfg.prompts]},
        "runs": [r.to_dict() for r in rows],
        "summary": summary_rows(rows, names),
        "by_suite": [
            dict(row, suite=suite)
            for suite in dict.fromkeys(r.suite for r in rows)
            for row in summary_rows([r for r in rows if r.suite == suite], names)
        ],
        "by_category": [
            dict(row, category=col)
            for col in columns
            for row in summary_rows([r for r in rows if r.category and column_of(r.category) == col], names)
        ],
    }


def variants(cfg: BenchConfig) -> list[Variant]:
    """The methods, each at its options, then the Hugging Face peers, each with its counterpart's
    speculation length (a method's own default where none was given)."""
    from specviz.methods import get_method
    from specviz.peers import PEERS

    out = [Variant(m, m, method_options(cfg, m)) for m in cfg.methods]
    for name in cfg.peers:
        counterpart = PEERS[name].counterpart
        gamma = method_options(cfg, counterpart).get(
            "speculation_length", getattr(get_method(counterpart).options(), "speculation_length", None)
        )
        out.append(Variant(name, name, {} if gamma is None else {"speculation_length": gamma}, kind="peer"))
    return out


def method_options(cfg: BenchConfig, name: str) -> dict[str, Any]:
    """The options a method runs with: the shared speculation length if it takes one and one was
    given, then its own --option values."""
    from specviz.methods import get_method

    shared = {} if cfg.speculation_length is None else {"speculation_length": cfg.speculation_length}
    return {**get_method(name).select(shared), **cfg.options.get(name, {})}


def format_table(summary: list[dict[str, Any]]) -> str:
    import pandas as pd

    df = pd.DataFrame(summary).set_index("method")
    columns = {
        "runs": "runs",
        "new_tokens": "tokens",
        "tokens_per_s": "tok/s",
        "median_tokens_per_s": "median tok/s",
        "speedup_vs_autoregressive": "speedup",
        "acceptance_rate": "accept",
        "mean_accepted_length": "mean acc. len",
        "target_forwards_per_token": "target fwd/tok",
        "matches_autoregressive": "= AR",
    }
    if ("ties" in df and (df["ties"] > 0).any()) or ("differs" in df and (df["differs"] > 0).any()):
        columns |= {"ties": "ties", "differs": "differs"}  # outputs parted from AR at a tie of the dtype / for real
    if (df["kind"] == "peer").any():
        columns |= {"matches_hf_greedy": "= HF", "peer": "peer", "ratio_to_peer": "× peer"}
    df = df[list(columns)].rename(columns=columns)
    return df.to_string(float_format=lambda x: f"{x:.3f}", na_rep="-")


def format_positions(summary: list[dict[str, Any]]) -> str:
    """Each chain method's acceptance per draft position (conditional on the previous accepted, as
    `specviz.metrics` defines it) and, raced at one γ, which γ its figures favour; "" with none."""
    rows = [r for r in summary if r.get("acceptance_by_position")]
    if not rows:
        return ""
    width = max(len(r["method"]) for r in rows)
    lines = ["acceptance per draft position (accepted / reached, given the previous accepted):"]
    for r in rows:
        rates = " ".join("  -  " if a is None else f"{a:.3f}" for a in r["acceptance_by_position"])
        lines.append(f"  {r['method']:<{width}}  {rates}")
    for r in rows:
        answer = r.get("which_gamma")
        if answer:
            speeds = ", ".join(f"{g}: {s:.2f}x" for g, _, _, s in answer["rows"])
            lines.append(
                f"which γ, {r['method']} (raced at {answer['gamma']}, a pass {answer['pass_ratio']:.2f} "
                f"of {answer['baseline']}'s steps): {speeds} -> γ = {answer['best']}"
            )
    return "\n".join(lines)


def add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    """The bench's prompt flags: one prompt, suites or a file, and which of their prompts."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one prompt text")
    src.add_argument("--suite", help=f"comma-separated suites: {', '.join(SUITES)}")
    src.add_argument(
        "--prompts",
        type=Path,
        metavar="FILE",
        help="a prompt file: JSON lines with a 'prompt' or 'turns' field (and optionally 'category', "
        "'id'), or plain text, one prompt per line",
    )
    p.add_argument(
        "--category", default="", help="comma-separated categories to keep (Spec-Bench's: translation, qa, ...)"
    )
    p.add_argument(
        "--limit",
        type=int,
        help="prompts per suite, or per category where prompts have one (default: 5 of a suite, all of a file)",
    )
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts of each suite (or category) first")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specviz.bench",
        description=__doc__.split("\n\n")[0],
        epilog="paper experiments and tools (agreement, load): python -m specviz.bench EXPERIMENT --help, "
        "with EXPERIMENT one of: " + (", ".join(subcommands()) or "none yet"),
    )
    p.add_argument("--pair", default="default", help="tiny-random | default | a preset name | TARGET,DRAFT")
    p.add_argument(
        "--methods",
        default="autoregressive,vanilla",
        help="comma-separated registry names, or 'all' (every method specviz decodes; vLLM's rows by name)",
    )
    add_prompt_arguments(p)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--speculation-length",
        "--gamma",
        type=int,
        dest="speculation_length",
        help="for every method with a speculation_length option (default: each method's own)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="METHOD.NAME=VALUE",
        help="one option of one method, e.g. sssd.speculation_length=8 or disco.threshold=0.9 (repeatable); "
        "a method's options are the fields of its options class (python -m specviz.bench --list-options)",
    )
    p.add_argument("--list-options", action="store_true", help="print every method's options and exit")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument(
        "--device", default="auto", help="auto (a CUDA GPU, else MPS, else the CPU) | cpu | cuda | cuda:N | mps"
    )
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (float32 unless the pair is too big for it: lossless) | float32 | bfloat16 | float16",
    )
    p.add_argument(
        "--peers",
        action="store_true",
        help="also run Hugging Face generate() peers (greedy, assisted, prompt lookup) in the same run",
    )
    p.add_argument("--json", type=Path, help="write the full result here")
    p.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write results.json, summary.csv, summary.md and report.html (plotly figures) into DIR",
    )
    p.add_argument(
        "--vllm-url",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="run the vLLM row NAME (vllm, vllm_ngram, vllm_draft, vllm_suffix) on the vLLM server at URL; repeatable",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from specviz.methods import all_methods, get_method, method_names
    from specviz.peers import peers_for

    methods = (
        [s.name for s in all_methods() if not s.engine]  # vLLM's rows run where vLLM is installed: by name
        if args.methods == "all"
        else listed("--methods", args.methods, "method", f"or 'all' ({', '.join(method_names())})")
    )
    methods = [get_method(name).name for name in methods]  # an unknown name fails now, before any model loads
    check_unique("--methods", methods)  # vllm-ngram and vllm_ngram are one method
    from specviz.methods.vllm import give_urls

    give_urls(args.vllm_url)
    if args.json is not None:
        check_writable(args.json)
    if args.report is not None:
        check_writable(args.report / "results.json", make_folders=True)
    check_numbers(args)
    categories = tuple(listed("--category", args.category, "category")) if args.category.strip(" ,") else ()
    if args.prompt is not None:
        prompts = [Prompt("custom", "prompt/0", args.prompt)]
    elif args.prompts is not None:
        prompts = select(load_prompt_file(args.prompts), args.limit, args.offset, categories)
    else:
        suites = (
            ["humaneval"] if args.suite is None else listed("--suite", args.suite, "suite", f"({', '.join(SUITES)})")
        )
        prompts = [p for s in suites for p in take(s, 5 if args.limit is None else args.limit, args.offset, categories)]
    if not prompts:
        raise SpecvizError("no prompts selected: check --suite/--prompts, --category, --limit and --offset")
    cfg = BenchConfig(
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
    for name in cfg.methods:  # options that contradict each other (min_ngram above max_ngram) fail now too
        try:
            get_method(name).make_options(**method_options(cfg, name))
        except SpecvizError as e:
            raise SpecvizError(f"{name}'s options: {e}") from None
    return cfg


def listed(flag: str, text: str, what: str, known: str = "") -> list[str]:
    """The comma-separated names a flag gives, each once: an empty list is refused (never read as the
    default), and so is a name given twice (it would run twice). `known`: what the message suggests."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise SpecvizError(f"{flag} names no {what}: give comma-separated names {known}".rstrip())
    check_unique(flag, names)
    return names


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric flag in its range before any model loads (--max-new-tokens meets the pair's
    context once the pair is loaded)."""
    from specviz.sampling import SamplingConfig

    if args.limit is not None:
        check_count("--limit", args.limit, most=None)
    check_count("--offset", args.offset, most=None, least=0)
    check_count("--max-new-tokens", args.max_new_tokens, most=None)
    repeats = check_count("--repeats", args.repeats, most=None)
    check_count("--seed (repeat r runs with seed + r)", args.seed, most=MAX_SEED - (repeats - 1), least=0)
    if args.speculation_length is not None:
        check_count("--speculation-length", args.speculation_length)
    SamplingConfig(temperature=check_temperature(args.temperature, "--temperature"), top_p=args.top_p)


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
        if name in out.get(method, {}):
            raise SpecvizError(f"--option {text!r}: {method}.{name} is set twice: set each option once")
        try:
            out.setdefault(method, {})[name] = parse_option(get_method(method).options, name, value)
        except SpecvizError as e:
            raise SpecvizError(f"--option {text!r}: {e}") from None
    return out


def options_listing() -> str:
    """Every method's options, their ranges, defaults and help (for --list-options); those that are
    no widget (file paths, a build to compare) are the command line's and the library's only."""
    from specviz.methods import all_methods
    from specviz.methods.options import option_fields

    lines = []
    for spec in all_methods():
        fields_ = option_fields(spec.options, every=True)
        if fields_:
            lines.append(f"{spec.name} ({spec.label})")
        for f in fields_:
            span = (
                f" in [{f.least:g}, {f.most:g}]"
                if f.kind in ("int", "float")
                else (" one of " + "|".join(f.choices) if f.choices else "")
            )
            default = "tuned" if f.default is None else repr(f.default) if f.kind == "text" else f.default
            lines.append(f"  {spec.name}.{f.name}  {f.kind}{span}, default {default}: {f.help}")
    return "\n".join(lines)


def subcommands() -> dict[str, str]:
    """name -> module of the paper experiments (`specviz.experiments`) and tools (`specviz.tools`),
    each with `main(argv) -> int`."""
    import pkgutil

    import specviz.experiments
    import specviz.tools

    found = {
        m.name: f"{pkg.__name__}.{m.name}"
        for pkg in (specviz.experiments, specviz.tools)
        for m in pkgutil.iter_modules(pkg.__path__)
        if not m.name.startswith("_")
    }
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in subcommands():  # python -m specviz.bench <experiment> [options]
        import importlib

        try:
            return importlib.import_module(subcommands()[argv[0]]).main(argv[1:])
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
    print(
        f"pair {result['pair']['name']} on {result['device']['device']} in {result['pair']['dtype']}, "
        f"{len(cfg.prompts)} prompts, "
        f"max {cfg.max_new_tokens} new tokens, {'greedy' if cfg.temperature == 0 else f'T={cfg.temperature}'}"
    )
    print(format_table(result["summary"]))
    positions = format_positions(result["summary"])
    if positions:
        print(positions)
    from specviz.reports import write_atomically, write_report

    try:
        if args.json:
            write_atomically(args.json, json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        if args.report:
            paths = write_report(result, args.report, command="python -m specviz.bench " + " ".join(argv))
            print("wrote " + ", ".join(str(p) for p in paths))
    except OSError as e:
        print(f"error: could not write the results: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
