"""Saved races as large as the Race tab's loader takes, to measure what one costs the server (issue 53).

    python -m specviz.bench hostile_races --kind vanilla --mb 16 --out big.json [--within-limits]

`big_race` writes a valid saved race (the Race tab's download format, `specviz.serving.saved`) of about
`mb` MB on the tiny pair, compact, records and token spans as the app writes them, every draft
rejected (so each record's drafts are shown as struck-through tokens). Its kind is a method's name:

- "autoregressive" (the target alone): one run, one token a record, as many records as fill the
  file (the hostile probe's 58,001-record run);
- a chain method's, e.g. "vanilla": the target alone and that method (γ = 4), the same number of
  records each.

Given the app's `limits`, the race is one the loader accepts under them: each run has at most
`limits.max_new_tokens` records, and a chain method's race fills the file with drafting runs (that
method, then the other chain methods whose records carry nothing a file has to invent) of that
many records, each drafting as many tokens an iteration as the loader allows (the larger of
`limits.speculation_length` and `limits.tree_nodes`). Without limits the file holds far more
records than a race under the default limits can, and the loader refuses it before checking them
(unless a deployment raised its limits to fit it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from specviz.serving.limits import AppLimits, app_limits

PAIR = "tiny-random"  # its vocabulary: 512 token ids (specviz.models.tiny.TINY_VOCAB)
VOCAB = 512
PROMPT = "def fibonacci(n):"
PROMPT_IDS = [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110]
STEP_S = 0.004  # one target pass, seconds
GAMMA = 4  # a drafting run's drafts a record without limits
TEXTS = ("a", " b", "c", " the", "\n", "(", "):")


def big_race(
    path: str | Path,
    kind: str | None = None,
    mb: float = 16.0,
    limits: AppLimits | None = None,
    most_records: int | None = None,
) -> Path:
    """Write a saved race of about `mb` MB (see the module's docstring; `kind` None: the target alone's) to
    `path`; returns the path. `most_records` (without `limits`): each run's records at most, a chain
    method's drafts a record then as many as fill the file (past the loader's bound on a run's tokens
    where that is more than `limits.speculation_length` or `limits.tree_nodes`)."""
    from specviz.methods import BASELINE

    kind = kind or BASELINE
    drafting = chain_methods()
    if kind != BASELINE and kind not in drafting:
        raise ValueError(f"kind must be {BASELINE!r} or a chain method ({', '.join(drafting)}), not {kind!r}")
    budget = int(mb * 2**20) - 1024  # room for the race's own fields
    if kind != BASELINE and limits is not None:
        order = [kind, *(m for m in drafting if m != kind)]
        return _write(path, _within(limits, budget, {m: drafting[m] for m in order}))
    runs = {BASELINE: (0, {})} if kind == BASELINE else {BASELINE: (0, {}), kind: (GAMMA, drafting[kind])}
    cap = limits.max_new_tokens if limits is not None else most_records
    n, used = 0, 0
    while cap is None or n < cap:  # a record a run at a time, while they fit
        more = sum(_size(_record(m, n, gamma, extra)) for m, (gamma, extra) in runs.items())
        if used + more > budget:
            break
        used, n = used + more, n + 1
    if kind != BASELINE and n == cap:  # capped: the file's size from fewer records, more drafts in each
        per_draft = sum(_size(_record(kind, i, GAMMA + 1, {})) - _size(_record(kind, i, GAMMA, {})) for i in range(n))
        runs[kind] = (GAMMA + (budget - used) // max(1, per_draft), drafting[kind])
    text = _runs(runs, n)
    while len(json.dumps(text, separators=(",", ":"))) > budget and runs.get(kind, (0,))[0] > GAMMA:
        runs[kind] = (runs[kind][0] - 1, drafting[kind])  # the estimate left out a few digits
        text = _runs(runs, n)
    return _write(path, text)


def _runs(runs: dict[str, tuple[int, dict[str, int]]], n: int) -> list[dict[str, Any]]:
    return [_run(m, n, gamma, extra) for m, (gamma, extra) in runs.items()]


def chain_methods() -> dict[str, dict[str, int]]:
    """Chain methods (Leviathan et al.'s formula) whose records a file can hold without inventing a
    distribution: -> the extra fields each record of theirs carries (whole numbers only, set to 0)."""
    from specviz.cost.families import CHAIN
    from specviz.extras import hints
    from specviz.methods import all_methods

    out = {}
    for spec in all_methods():
        if spec.family is not CHAIN or spec.is_oracle:
            continue
        required = {
            f.name: hints(family)[f.name]
            for family in spec.extra_families()
            for f in dataclasses.fields(family)
            if f.default is dataclasses.MISSING
        }
        if all(tp is int for tp in required.values()):
            out[spec.name] = dict.fromkeys(required, 0)
    return out


def _within(limits: AppLimits, budget: int, drafting: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """The target alone and drafting runs of `limits.max_new_tokens` records at the most drafts a record may
    hold under `limits`, as many as fill `budget` bytes (the last one's drafts fewer, to fit)."""
    from specviz.methods import BASELINE

    n, most = limits.max_new_tokens, max(limits.speculation_length, limits.tree_nodes)
    runs = [_run(BASELINE, n, 0, {})]
    used = _size((runs[0], []))
    for method, extra in list(drafting.items())[: limits.methods_per_race - 1]:
        full = _run(method, n, most, extra)
        if used + _size((full, [])) <= budget:
            runs.append(full)
            used += _size((full, []))
            continue
        bare = _size((_run(method, n, 0, extra), []))
        gamma = int((budget - used - bare) // ((_size((full, [])) - bare) / most))
        while gamma > 0 and used + _size((last := _run(method, n, gamma, extra), [])) > budget:
            gamma -= 1  # the estimate left out a few digits
        if gamma > 0:
            runs.append(last)
        break
    return runs


def _write(path: str | Path, runs: list[dict[str, Any]]) -> Path:
    n = max(len(r["records"]) for r in runs)
    data = {
        "format": "specviz-race",
        "version": 1,
        "pair": PAIR,
        "prompt": PROMPT,
        "prompt_ids": PROMPT_IDS,
        "max_new_tokens": n,  # every record writes one token
        "options": {"temperature": 0.0, "top_p": 1.0, "seed": 0, "max_new_tokens": n},
        "runs": runs,
    }
    path = Path(path)
    path.write_text(json.dumps(data, separators=(",", ":")))
    return path


def _size(parts: tuple[dict, list[dict]]) -> int:
    """Bytes a record (or a run) and its spans take in the file (a comma after each)."""
    record, spans = parts
    return sum(len(json.dumps(x, separators=(",", ":"))) + 1 for x in (record, *spans))


def _run(method: str, n: int, gamma: int, extra: dict[str, int]) -> dict[str, Any]:
    """A finished run of `method`: n records of γ rejected drafts each (0: the target alone) and their spans."""
    from specviz.methods import BASELINE, get_method

    records, spans = [], []
    for i in range(n):
        record, own = _record(method, i, gamma, extra)
        records.append(record)
        spans += own
    if records:
        records[-1]["extra"] = {**records[-1]["extra"], "stop": "max_new_tokens"}  # why the run ended
    spec = get_method(method)
    return {
        "name": method,
        "label": spec.label,
        "paper": spec.paper,
        "status": "done",
        "message": "",
        "note": "",
        "options": {},  # the method's defaults
        "records": records,
        "spans": spans,
        "probe_ms": None if method == BASELINE else STEP_S * 1e3,
        "flags": [],
    }


def _record(method: str, i: int, gamma: int, extra: dict[str, int]) -> tuple[dict, list[dict]]:
    """Record i of a run of `method` and its spans: γ drafts, all rejected, and the target's own token."""
    rng = random.Random(i * 31 + len(method))
    drafted = [rng.randrange(3, VOCAB) for _ in range(gamma)]
    token = rng.randrange(3, VOCAB)
    p = [round(rng.random(), 3) for _ in drafted]
    q = [round(rng.random(), 3) for _ in drafted]
    draft_s = STEP_S / 10 * len(drafted)
    start = round(i * (STEP_S * 1.2 + draft_s), 6)
    verify_s = STEP_S * (1 + rng.random() / 10)
    record = {
        "method": method,
        "iteration": i,
        "position": len(PROMPT_IDS) + i,
        "speculation_length": len(drafted),
        "drafted": drafted,
        "accepted": 0,
        "emitted": [token],
        "p_target": p or None,
        "q_draft": q or None,
        "draft_forwards": len(drafted),
        "target_forwards": 1,
        "t_start": start,
        "t_end": round(start + draft_s + verify_s, 6),
        "draft_ms": round(draft_s * 1e3, 3),
        "verify_ms": round(verify_s * 1e3, 3),
        "oracle_sl": 0,
        "extra": dict(extra),
    }
    rejected = [
        _span(TEXTS[t % len(TEXTS)], "rejected", i, t, p[j], q[j], "draft", tested=j == 0)
        for j, t in enumerate(drafted)
    ]
    own = _span(TEXTS[token % len(TEXTS)], "target", i, token, None, None, "correction" if drafted else "next token")
    return record, [*rejected, own]


def _span(text: str, kind: str, i: int, token: int, p: Any, q: Any, role: str, tested: bool = True) -> dict[str, Any]:
    return {
        "text": text,
        "kind": kind,
        "iteration": i,
        "token_id": token,
        "p": p,
        "q": q,
        "role": role,
        "greedy": True,
        "tested": tested,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default=None, help="autoregressive (one run, the default), or a chain method's name")
    parser.add_argument("--mb", type=float, default=16.0, help="the file's size (the loader takes at most 16 MB)")
    parser.add_argument(
        "--within-limits",
        action="store_true",
        help="a race the loader takes under the app's limits (from the environment)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the file to write")
    args = parser.parse_args(argv)
    try:
        path = big_race(args.out, args.kind, args.mb, app_limits() if args.within_limits else None)
    except ValueError as e:
        parser.error(str(e))
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MB")
    return 0
