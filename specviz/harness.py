"""The benchmark harness: variants run interleaved over prompts, one typed row per run.

`specviz.bench` and every paper experiment (`specviz.experiments`) measure through this module:
`run_interleaved` warms every variant up (one short untimed run: first calls pay one-off costs),
then runs them prompt by prompt in a rotating order (A B C, B C A, ...), so that drift of the
machine hits every one alike; each run becomes one `RunRow`; `mark_parity` compares greedy outputs
with autoregressive decoding and tells the dtype's ties from real differences; `summary_rows`
totals the rows per method. Every metric is `specviz.metrics`'. This module imports neither
`specviz.bench` nor `specviz.experiments`: both import it. The experiments' common options
(`add_comparison_args`, `add_output_args`, each flag checked as it is parsed, before any work) and
prompt selection (`comparison_prompts`) are here too, with `check_writable`, which the benchmark's
--json and --report use as well.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specviz import metrics
from specviz.cost.from_records import best_gamma, fixed_gamma, median_pass_s
from specviz.errors import SpecvizError
from specviz.limits import check_count
from specviz.methods import BASELINE
from specviz.prompts import Prompt, add_prompt_args, prompt_sources, take

if TYPE_CHECKING:
    from specviz.models.modelpair import ModelPair
    from specviz.records import IterationRecord
    from specviz.runner import RunResult

WARMUP_TOKENS = 8  # new tokens of each variant's untimed warm-up run
REFERENCE = BASELINE  # the target alone: every greedy output must equal its output
HF_REFERENCE = "hf_greedy"  # Hugging Face generate() greedy (specviz.peers), when it runs alongside


@dataclass(frozen=True)
class Variant:
    """One row of a comparison: a method, or a Hugging Face generate() peer, with its options."""

    label: str  # row label, e.g. "SL-5" (the benchmark: the method's own name)
    method: str  # registry name (specviz.methods), or a peer's name (specviz.peers) when kind is "peer"
    options: dict[str, Any] = field(default_factory=dict)  # the method's own options, e.g. speculation_length
    kind: str = "method"  # "method": ours, through specviz.runner | "peer": Hugging Face generate()


@dataclass(frozen=True)
class RunRow:
    """One run of one variant on one prompt: plain values, as the benchmark's JSON `runs` hold them.

    `to_dict()` is that JSON row (`parity` once judged, `first_difference` where an output parts from
    AR's); `variant` and `records` stay in memory for the experiments' own tables and figures."""

    method: str  # registry name, or a peer's name
    kind: str  # "method" | "peer"
    output_ids: list[int]  # the generated tokens, prompt excluded
    new_tokens: int
    wall_s: float  # prefill included
    target_forwards: int
    draft_forwards: int
    drafted: int | None  # None: a peer (Hugging Face does not report what it drafted)
    accepted: int | None
    iterations: int
    stop_reason: str  # "eos" | "max_new_tokens"
    oracle_sl_mean: float | None  # mean oracle speculation length over the iterations (None: none had one)
    positions: list[list[int]] | None = None  # (tested, accepted) per draft position (metrics.position_counts)
    gamma: int | None = None  # drafts per pass when every pass drafted as many (cost.from_records.fixed_gamma)
    pass_s: float | None = None  # median seconds of a target pass, drafting included
    suite: str = ""
    category: str = ""  # Spec-Bench's category, or a prompt file's; "" for none
    prompt_id: str = ""
    repeat: int = 0  # which of the runs of this (variant, prompt); its seed is seed + repeat
    # greedy output == AR's, same prompt and repeat (None: sampled or no AR run)
    matches_autoregressive: bool | None = None
    matches_hf_greedy: bool | None = None  # greedy output == Hugging Face greedy's (None: sampled or no such peer)
    parity: str | None = None  # "same" | "tie" | "differs" against AR (specviz.parity); None: not judged
    # index of the first new token where a "tie" or "differs" output parts from AR's
    first_difference: int | None = None
    variant: str = ""  # the variant's label (in memory only)
    records: tuple[IterationRecord, ...] = ()  # the run's records, where run_interleaved keeps them (in memory only)

    @classmethod
    def of(cls, result: RunResult, variant: Variant, prompt: Prompt, repeat: int, keep_records: bool = False) -> RunRow:
        """The row of one of our runs (a `specviz.runner.RunResult`): its summary, flattened here only."""
        s = result.summary
        oracle = [r.oracle_sl for r in result.records if r.oracle_sl is not None]
        return cls(
            method=variant.method,
            kind="method",
            output_ids=list(s.output_ids),
            new_tokens=s.new_tokens,
            wall_s=s.wall_s,
            target_forwards=s.target_forwards,
            draft_forwards=s.draft_forwards,
            drafted=s.drafted,
            accepted=s.accepted,
            iterations=s.iterations,
            stop_reason=s.stop_reason,
            oracle_sl_mean=sum(oracle) / len(oracle) if oracle else None,
            positions=[list(c) for c in metrics.position_counts(result.records)],
            gamma=fixed_gamma(result.records),
            pass_s=median_pass_s(result.records),
            **_where(variant, prompt, repeat),
            records=tuple(result.records) if keep_records else (),
        )

    def to_dict(self, keys: Sequence[str] | None = None) -> dict[str, Any]:
        """The benchmark's JSON row; or, given `keys`, those fields in that order (an experiment's row)."""
        if keys is not None:
            return {k: getattr(self, k) for k in keys}
        skip = {"variant", "records"} | ({"parity"} if self.parity is None else set())
        skip |= {"first_difference"} if self.parity in (None, "same") else set()
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def every_s(seconds: float, say: Callable[[str], None]) -> Callable[[str], None]:
    """`say`, except that a line which only updates the last one said (the same text before its ":", e.g. a
    wait's seconds) is said at most every `seconds`: a terminal's progress, not a log."""
    last: list[Any] = ["", 0.0]  # the topic last said, and when

    def maybe(line: str) -> None:
        topic, now = line.partition(":")[0], time.monotonic()
        if topic != last[0] or now - last[1] >= seconds:
            last[:] = [topic, now]
            say(line)

    return maybe


def _where(variant: Variant, prompt: Prompt, repeat: int) -> dict[str, Any]:
    """A row's fields that say which run it is."""
    return {
        "suite": prompt.suite,
        "category": prompt.category,
        "prompt_id": prompt.id,
        "repeat": repeat,
        "variant": variant.label,
    }


def run_interleaved(
    pair: ModelPair,
    variants: Sequence[Variant],
    prompts: Sequence[Prompt],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    repeats: int = 1,
    warmup: bool = True,
    keep_records: bool = False,
    progress: bool = True,
    desc: str = "benchmark",
) -> list[RunRow]:
    """Every variant on every prompt, `repeats` times (seed + repeat), interleaved: prompt by prompt,
    the variants' order rotating (A B C, B C A, ...) so that no variant always goes first. One row
    per run, in the order they ran; `keep_records`: each row keeps its iteration records. The runs
    share one thread for a second lane (PEARL's target), warmed up with the rest."""
    from tqdm.auto import tqdm

    from specviz.runner import series_executor

    with series_executor() as lane:
        runners = [(v, _runner(pair, v, keep_records, lane)) for v in variants]
        sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p}
        if warmup:
            for _, run in runners:
                run(prompts[0], dict(sampling, max_new_tokens=WARMUP_TOKENS), seed, 0)
        rows = []
        bar = tqdm(total=len(prompts) * repeats * len(variants), desc=desc, unit="run", disable=not progress)
        for i, prompt in enumerate(prompts):
            for repeat in range(repeats):
                rotation = (i * repeats + repeat) % len(variants)
                for v, run in runners[rotation:] + runners[:rotation]:
                    bar.set_postfix_str(f"{v.label} on {prompt.id}")
                    rows.append(run(prompt, sampling, seed + repeat, repeat))
                    bar.update()
        bar.close()
        return rows


def _runner(
    pair: ModelPair, v: Variant, keep_records: bool, lane: Any = None
) -> Callable[[Prompt, dict, int, int], RunRow]:
    """(prompt, sampling, seed, repeat) -> the row of one run of `v`; a method's session (e.g. OSD's
    learner) is made here, once, and carried across its runs; `lane`: the executor its runs are lent."""
    if v.kind == "peer":
        from specviz.models.pair import encode_prompt
        from specviz.peers import run_peer

        def peer(prompt: Prompt, sampling: dict, seed: int, repeat: int) -> RunRow:
            ids = encode_prompt(pair, prompt.text)
            return RunRow(
                **run_peer(v.method, pair, ids, seed=seed, **sampling, **v.options), **_where(v, prompt, repeat)
            )

        return peer
    from specviz.methods import get_method, new_session
    from specviz.models.pair import encode_prompt
    from specviz.runner import generate

    spec = get_method(v.method)
    session = new_session(spec, pair)
    prepared: list[bool] = []

    def method(prompt: Prompt, sampling: dict, seed: int, repeat: int) -> RunRow:
        if spec.prepare is not None and not prepared:  # a vLLM row's server, before its first run's clock
            ids = encode_prompt(pair, prompt.text)
            spec.prepare(
                pair, ids, spec.make_options(**v.options), every_s(30, lambda line: print(line, file=sys.stderr))
            )
            prepared.append(True)
        result = generate(
            v.method, pair, prompt.text, seed=seed, **sampling, **v.options, session=session, executor=lane
        )
        return RunRow.of(result, v, prompt, repeat, keep_records)

    return method


def mark_parity(
    rows: Sequence[RunRow], pair: ModelPair, prompts: Sequence[Prompt], greedy: bool = True, judge: bool = True
) -> list[RunRow]:
    """The rows with their greedy outputs compared with AR's (and HF greedy's) on the same prompt and
    repeat; where one differs from AR's and `judge`: is the first differing token a tie of the
    target's dtype or a real difference (`specviz.parity`, one target forward pass per such row)?
    Callers that report only whether outputs match pass judge=False. Sampled rows (greedy False) are
    left unjudged (None)."""
    from specviz.models.pair import encode_prompt
    from specviz.parity import compare

    refs = {
        name: {(r.prompt_id, r.repeat): r.output_ids for r in rows if r.method == name}
        for name in (REFERENCE, HF_REFERENCE)
    }
    prompt_ids = {p.id: encode_prompt(pair, p.text) for p in prompts} if judge else {}
    out = []
    for r in rows:
        ar, hf = (refs[name].get((r.prompt_id, r.repeat)) for name in (REFERENCE, HF_REFERENCE))
        same = r.output_ids == ar if greedy and ar is not None else None
        parity, first = ("same" if same else None), None
        if same is False and judge and ar is not None:  # (same is False only where ar is known)
            judged = compare(pair, prompt_ids[r.prompt_id], ar, r.output_ids)
            parity, first = judged.verdict, judged.first_difference
        out.append(
            replace(
                r,
                matches_autoregressive=same,
                matches_hf_greedy=r.output_ids == hf if greedy and hf is not None else None,
                parity=parity,
                first_difference=first,
            )
        )
    return out


def summary_rows(rows: Sequence[RunRow], methods: Sequence[str]) -> list[dict[str, Any]]:
    """One row per method or peer: totals over all its runs (definitions in specviz.metrics), the
    median of per-prompt tokens/s, and for our methods the median ratio to their HF peer."""
    from specviz.peers import PEERS

    out: list[dict[str, Any]] = []
    for method in methods:
        mine = [r for r in rows if r.method == method]
        if not mine:
            continue
        new, wall, tf = (
            sum(r.new_tokens for r in mine),
            sum(r.wall_s for r in mine),
            sum(r.target_forwards for r in mine),
        )
        drafted = [r.drafted for r in mine if r.drafted is not None]
        per_prompt = [metrics.tokens_per_s(r.new_tokens, r.wall_s) for r in mine]
        out.append(
            {
                "method": method,
                "kind": mine[0].kind,
                "runs": len(mine),
                "new_tokens": new,
                "wall_s": wall,
                "tokens_per_s": metrics.tokens_per_s(new, wall),
                "median_tokens_per_s": statistics.median(t for t in per_prompt if t is not None)
                if any(per_prompt)
                else None,
                "acceptance_rate": (
                    metrics.acceptance_rate(sum(r.accepted for r in mine if r.accepted is not None), sum(drafted))
                    if drafted
                    else None
                ),
                "mean_accepted_length": metrics.mean_accepted_length(new, tf),
                "target_forwards_per_token": metrics.target_forwards_per_token(tf, new),
                "matches_autoregressive": _all_or_none(r.matches_autoregressive for r in mine),
                "matches_hf_greedy": _all_or_none(r.matches_hf_greedy for r in mine),
                "ties": sum(r.parity == "tie" for r in mine),  # outputs that part from AR at a tie of the dtype
                "differs": sum(r.parity == "differs" for r in mine),  # ... at a real difference: a fault
            }
        )
    for row in out:
        row.update(by_position(rows, row["method"]))
    ar = next((r["tokens_per_s"] for r in out if r["method"] == REFERENCE), None)
    for row in out:
        row["speedup_vs_autoregressive"] = metrics.speedup(ar, row["tokens_per_s"])
        peer = next(
            (
                p.name
                for p in PEERS.values()
                if p.counterpart == row["method"] and p.name in methods and p.assistant != {}
            ),
            None,
        )  # HF's own defaults are a different algorithm: not a peer
        row["peer"] = peer
        row["ratio_to_peer"] = _median_paired_ratio(rows, row["method"], peer) if peer else None
    return out


def by_position(rows: Sequence[RunRow], method: str) -> dict[str, Any]:
    """A chain method's acceptance per draft position over its runs and, raced at one fixed γ, which γ
    would have done best (`cost.from_records.best_gamma`) against its engine's target alone's pass."""
    from specviz.cost.families import CHAINS, TARGET_ALONE
    from specviz.methods import all_methods

    spec = next((s for s in all_methods() if s.name == method), None)
    mine = [r for r in rows if r.method == method and r.positions is not None]
    if spec is None or spec.family not in CHAINS or not mine:
        return {}
    counts = [[0, 0] for _ in range(max(len(r.positions or ()) for r in mine))]
    for r in mine:
        for k, (t, a) in enumerate(r.positions or ()):
            counts[k][0] += t
            counts[k][1] += a
    out: dict[str, Any] = {
        "tested_by_position": [t for t, _ in counts],
        "acceptance_by_position": [a / t if t else None for t, a in counts],
    }
    base = next((s.name for s in all_methods() if s.family is TARGET_ALONE and s.engine == spec.engine), None)
    gammas = {r.gamma for r in mine}
    gamma0 = gammas.pop() if len(gammas) == 1 else None
    passes = [r.pass_s for r in mine if r.pass_s]
    steps = [r.pass_s for r in rows if r.method == base and r.pass_s]
    if gamma0 is not None and passes and steps:
        ratio = statistics.median(passes) / statistics.median(steps)
        answer = best_gamma([(t, a) for t, a in counts], gamma0, ratio)
        if answer is not None:
            out["which_gamma"] = {**answer, "baseline": base}
    return out


def _all_or_none(values: Iterable[bool | None]) -> bool | None:
    known = [v for v in values if v is not None]
    return all(known) if known else None


def _median_paired_ratio(rows: Sequence[RunRow], method: str, peer: str) -> float | None:
    """Median over (prompt, repeat) of method tokens/s / peer tokens/s, each pair measured back to back."""
    by_key = {(r.method, r.prompt_id, r.repeat): r for r in rows}
    ratios = []
    for (name, prompt_id, repeat), r in by_key.items():
        other = by_key.get((peer, prompt_id, repeat))
        ratio = (
            metrics.speedup(
                metrics.tokens_per_s(other.new_tokens, other.wall_s), metrics.tokens_per_s(r.new_tokens, r.wall_s)
            )
            if name == method and other
            else None
        )
        if ratio is not None:
            ratios.append(ratio)
    return statistics.median(ratios) if ratios else None


def describe_machine(device: str) -> dict[str, Any]:
    """Where a measurement ran: device, Python, torch, CPU, intra-op threads (and the GPU's name)."""
    import torch

    info: dict[str, Any] = {"device": device, "python": platform.python_version(), "torch": torch.__version__}
    info["cpu"] = platform.processor() or platform.machine()
    info["threads"] = torch.get_num_threads()
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def add_comparison_args(
    p: argparse.ArgumentParser, *, suites: str, limit: int, max_new_tokens: int, pair_help: str | None = None
) -> None:
    """An experiment's first options: --pair, its prompts (--suites or --prompts, --limit, --offset),
    --max-new-tokens."""
    p.add_argument("--pair", default="default", help=pair_help)
    add_prompt_args(p, suites)
    p.add_argument("--limit", type=_count("--limit"), default=limit, help="prompts per suite")
    p.add_argument("--offset", type=_count("--offset", least=0), default=0, help="skip this many prompts of each first")
    p.add_argument("--max-new-tokens", type=_count("--max-new-tokens"), default=max_new_tokens)


def add_output_args(p: argparse.ArgumentParser, name: str, warmup: bool = True) -> None:
    """An experiment's last options: --no-warmup (where it warms up), --out (results/<name>), --quiet."""
    if warmup:
        p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--out", type=_output_folder, default=Path(f"results/{name}"), help="folder for the results")
    p.add_argument("--quiet", action="store_true")


def comparison_prompts(args: argparse.Namespace) -> list[Prompt]:
    """The prompts `add_comparison_args`' options select: --limit of each suite (or file) after --offset."""
    return [q for source in prompt_sources(args) for q in take(source, args.limit, args.offset)]


def _count(flag: str, least: int = 1) -> Callable[[str], int]:
    """An argparse `type` for a count flag: the value checked by `check_count` as it is parsed, so a
    bad one is refused in one line (a SpecvizError, which the CLI prints) before any model loads."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise SpecvizError(f"{flag} must be an integer, got {text!r}") from None
        return check_count(flag, value, most=None, least=least)

    return parse


def _output_folder(text: str) -> Path:
    """An argparse `type` for --out: a folder the experiment can create and write into, checked as it
    is parsed (once it was written only after the whole run)."""
    folder = Path(text)
    check_writable(folder / "results.json", make_folders=True)
    return folder


def check_writable(path: Path, make_folders: bool = False) -> None:
    """Fail before a long run, not after it, when its output cannot be written. `make_folders`: the
    writer creates missing folders (--report, --out), so the nearest folder that exists must take a
    file; else (--json) the file's own folder must."""
    folder = path.parent
    while make_folders and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a folder")
        with tempfile.TemporaryFile(dir=folder):  # permissions alone say little (root, read-only mounts)
            pass
    except OSError as e:
        raise SpecvizError(
            f"cannot write {path} ({e.strerror or e}): choose a file in a folder you can write to"
        ) from None
