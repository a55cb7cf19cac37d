"""SSSD's comparison on one target (Marzollo et al. 2024, Fig. 4 and Fig. 6), as far as a CPU allows.

    python -m specviz.bench sssd --pair default --suites mtbench,gsm8k,humaneval --limit 8

1. References: the target's greedy output for every prompt (autoregressive, timed).
2. Fig. 4: mean accepted length (tokens per target forward) vs speculation length S for input-only,
   datastore-only and fused drafting, prompt lookup and a REST-style first-match datastore tree.
   Each drafter is replayed along the greedy reference: at every step it proposes from the
   committed tokens and the step keeps the longest tree path that the reference follows, plus one
   token. With greedy verification this is exactly what the method emits (greedy parity), so the
   numbers equal real runs without one target forward per point; `--check` confirms it on real runs.
3. Speed at B = 1: autoregressive vs `sssd`, interleaved prompt by prompt; tokens/s ratio and the
   share of each step spent retrieving drafts.
4. Fig. 6: a static batch of B prompts decoded together (`decode_batch`) for AR and SSSD, with S
   per sequence from the roofline budget for B and with a fixed S: throughput (tokens/s over the
   batch) vs mean latency per request (s until the request's last token).
5. `--grid`: the fusion weights by grid search on validation prompts (ShareGPT lines held out from
   every training set), scored by replayed mean accepted length.
Writes results.json, table.md and HTML figures under --out (default results/sssd/).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from specviz import metrics
from specviz.datastore import DEFAULT_PATH
from specviz.errors import SpecvizError
from specviz.harness import Variant, mark_parity, run_interleaved
from specviz.prompts import add_prompt_args

if TYPE_CHECKING:
    from specviz.datastore import Datastore
    from specviz.models.modelpair import ModelPair
    from specviz.prompts import Prompt

Proposer = Callable[[list[int], int, int], tuple[list[int], list[int]]]  # (ids, size, depth) -> (tokens, parents)


# --- replay: accepted lengths of any tree drafter along a greedy reference -------------------------


class Replayed(TypedDict):
    steps: int  # verification passes
    tokens: int  # tokens of the reference, all emitted
    draft_s: float  # seconds spent drafting


def replay(prompt_ids: list[int], reference: list[int], propose: Proposer, size: int) -> Replayed:
    """Greedy tree verification simulated along `reference`: steps, tokens, draft time."""
    from specviz.methods.trees import greedy_path

    ids, pos, steps, draft_s = list(prompt_ids), 0, 0, 0.0
    while pos < len(reference):
        remaining = len(reference) - pos
        t0 = time.perf_counter()
        tokens, parents = propose(ids, size, remaining - 1)
        draft_s += time.perf_counter() - t0
        accepted = len(greedy_path(tokens, parents, reference[pos : pos + remaining - 1]))
        emitted = min(accepted + 1, remaining)
        ids += reference[pos : pos + emitted]
        pos += emitted
        steps += 1
    return {"steps": steps, "tokens": len(reference), "draft_s": draft_s}


def proposers(datastore: Datastore | None, weights: dict[str, Any] | None = None) -> dict[str, Callable[[], Proposer]]:
    """Fig. 4's drafters; each factory gives a fresh proposer (per-request state) for one prompt."""
    from specviz.methods.ngram_tree import first_match_candidates, top_tree
    from specviz.methods.prompt_lookup import ngram_continuation
    from specviz.methods.sssd import NgramTreeDrafter, SSSDOptions
    from specviz.methods.trees import TreeContext

    def sssd(sources: str) -> Callable[[], Proposer]:
        def make() -> Proposer:
            opts = SSSDOptions(sources=sources, datastore="none", **(weights or {}))
            drafter = NgramTreeDrafter(datastore if sources != "input" else None, opts)

            def propose(ids: list[int], size: int, depth: int) -> tuple[list[int], list[int]]:
                tree = drafter.propose(TreeContext(ids, depth), size)
                return tree.tokens, tree.parents

            return propose

        return make

    def prompt_lookup() -> Proposer:
        def propose(ids: list[int], size: int, depth: int) -> tuple[list[int], list[int]]:
            tokens, _ = ngram_continuation(ids, min(size, depth), 3, 1)
            return tokens, list(range(-1, len(tokens) - 1))

        return propose

    def rest() -> Proposer:  # (offered only where there is a datastore: see below)
        def propose(ids: list[int], size: int, depth: int) -> tuple[list[int], list[int]]:
            tree = (
                top_tree(first_match_candidates(ids, datastore, min(depth, 8)), size)  # type: ignore[arg-type]
                if depth > 0
                else None
            )
            return (tree.tokens, tree.parents) if tree else ([], [])

        return propose

    out = {"input only": sssd("input"), "prompt lookup": prompt_lookup}
    if datastore is not None:
        out = {"fused (SSSD)": sssd("both"), "datastore only": sssd("datastore"), **out, "REST-style first match": rest}
    return out


def fig4(refs: list[dict], datastore: Datastore | None, sizes: list[int]) -> list[dict]:
    """Mean accepted length per suite x drafter x S (one row each)."""
    rows = []
    for name, make in proposers(datastore).items():
        for size in sizes:
            for suite in dict.fromkeys(r["suite"] for r in refs):
                runs = [replay(r["prompt_ids"], r["output_ids"], make(), size) for r in refs if r["suite"] == suite]
                steps, tokens = sum(x["steps"] for x in runs), sum(x["tokens"] for x in runs)
                rows.append(
                    {
                        "suite": suite,
                        "drafter": name,
                        "speculation_length": size,
                        "mean_accepted_length": tokens / steps,
                        "draft_ms_per_step": 1e3 * sum(x["draft_s"] for x in runs) / steps,
                    }
                )
    return rows


# --- real runs -------------------------------------------------------------------------------------


def references(
    pair: ModelPair, prompts: list[Prompt], max_new_tokens: int, progress: bool, batch: int = 8, tree_size: int = 16
) -> list[dict]:
    """The target's greedy output for every prompt, decoded in static batches with SSSD trees of
    `tree_size` nodes (greedy parity makes this the autoregressive output); 0: batched AR, cheaper
    where a forward's cost grows with its tokens (a CPU past S of a few tokens)."""
    from specviz.methods.sssd import SSSDOptions, decode_batch
    from specviz.models.pair import encode_prompt

    refs = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        ids = [encode_prompt(pair, p.text) for p in chunk]
        t0 = time.perf_counter()
        records = decode_batch(pair, ids, tree_size, max_new_tokens=max_new_tokens, opts=SSSDOptions(sources="input"))
        for p, prompt_ids, rs in zip(chunk, ids, records, strict=True):
            refs.append(
                {
                    "suite": p.suite,
                    "prompt_id": p.id,
                    "prompt_ids": prompt_ids,
                    "output_ids": [t for r in rs for t in r.emitted],
                }
            )
        if progress:
            print(
                f"  references {start + len(chunk)}/{len(prompts)} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr
            )
    return refs


def speed_b1(pair: ModelPair, prompts: list, refs: list[dict], options: dict, max_new_tokens: int) -> list[dict]:
    """AR and sssd on every prompt, interleaved (`specviz.harness`); plain per-run numbers.
    `matches_reference`: the output equals the (batched) greedy reference and AR's own output."""
    variants = [Variant("autoregressive", "autoregressive"), Variant("sssd", "sssd", options)]
    done = run_interleaved(pair, variants, prompts, max_new_tokens=max_new_tokens, keep_records=True, progress=False)
    reference = {r["prompt_id"]: r["output_ids"] for r in refs}
    runs = []
    for run in mark_parity(done, pair, prompts, judge=False):
        ref = reference[run.prompt_id]
        n = min(len(run.output_ids), len(ref))
        runs.append(
            {
                **run.to_dict(("suite", "prompt_id", "method", "new_tokens", "wall_s", "target_forwards")),
                "draft_ms": sum(x.draft_ms for x in run.records),
                "verify_ms": sum(x.verify_ms for x in run.records),
                "matches_reference": bool(run.matches_autoregressive) and run.output_ids[:n] == ref[:n],
            }
        )
    return runs


def speed_table(runs: list[dict]) -> list[dict]:
    rows = []
    for suite in [*dict.fromkeys(r["suite"] for r in runs), "all"]:
        sel = [r for r in runs if suite in ("all", r["suite"])]
        tps = {
            m: metrics.tokens_per_s(
                sum(r["new_tokens"] for r in sel if r["method"] == m), sum(r["wall_s"] for r in sel if r["method"] == m)
            )
            for m in ("autoregressive", "sssd")
        }
        sssd_runs = [r for r in sel if r["method"] == "sssd"]
        rows.append(
            {
                "suite": suite,
                "prompts": len(sssd_runs),
                "ar_tokens_per_s": tps["autoregressive"],
                "sssd_tokens_per_s": tps["sssd"],
                "speedup": metrics.speedup(tps["autoregressive"], tps["sssd"]),
                "mean_accepted_length": metrics.mean_accepted_length(
                    sum(r["new_tokens"] for r in sssd_runs), sum(r["target_forwards"] for r in sssd_runs)
                ),
                "retrieval_share": sum(r["draft_ms"] for r in sssd_runs)
                / sum(r["draft_ms"] + r["verify_ms"] for r in sssd_runs),
                "greedy_parity": all(r["matches_reference"] for r in sel),
            }
        )
    return rows


def fig6(
    pair: ModelPair,
    refs: list[dict],
    batch_sizes: list[int],
    fixed: int,
    hardware: str,
    max_new_tokens: int,
    options: dict,
) -> list[dict]:
    """Static batches of the first B prompts: AR, SSSD with roofline S(B), SSSD with fixed S."""
    from specviz.methods.sssd import SSSDOptions, batch_tree_size, decode_batch

    opts = SSSDOptions(**options)
    prompts = [r["prompt_ids"] for r in refs]
    context = int(np.mean([len(p) for p in prompts])) + max_new_tokens // 2
    rows = []
    decode_batch(pair, prompts[:2], 4, max_new_tokens=4, opts=opts)  # warm-up
    for B in batch_sizes:
        if len(prompts) < B:
            break
        budget = batch_tree_size(pair, B, context, hardware)
        for label, size in (("AR", 0), ("SSSD (roofline S)", budget), (f"SSSD (S={fixed})", fixed)):
            t0 = time.perf_counter()
            records = decode_batch(pair, prompts[:B], size, max_new_tokens=max_new_tokens, opts=opts)
            wall = time.perf_counter() - t0
            tokens = sum(len(r.emitted) for rs in records for r in rs)
            latency = [rs[-1].t_end for rs in records]
            steps = max(len(rs) for rs in records)
            parity = all(
                [t for r in rs for t in r.emitted] == ref["output_ids"]
                for rs, ref in zip(records, refs[:B], strict=True)
            )
            rows.append(
                {
                    "batch_size": B,
                    "variant": label,
                    "speculation_length": size,
                    "tokens": tokens,
                    "wall_s": wall,
                    "throughput_tokens_per_s": tokens / wall,
                    "mean_latency_s": float(np.mean(latency)),
                    "iterations": steps,
                    "greedy_parity": parity,
                }
            )
    return rows


# --- fusion weights --------------------------------------------------------------------------------


def grid_search(refs: list[dict], datastore: Datastore | None, size: int) -> list[dict]:
    """Replayed mean accepted length of fused drafting on validation references for each weight set."""
    from specviz.methods.ngram_tree import FusionWeights
    from specviz.methods.sssd import NgramTreeDrafter, SSSDOptions
    from specviz.methods.trees import TreeContext

    rows = []
    for scale, depth_decay, short in itertools.product(
        (0.2, 0.4, 0.6, 0.8, 1.0), (0.7, 0.8, 0.9, 1.0), (0.4, 0.6, 0.8)
    ):
        steps = tokens = 0
        for r in refs:
            drafter = NgramTreeDrafter(
                datastore, SSSDOptions(datastore="none"), FusionWeights(scale, depth_decay, short)
            )

            def propose(
                ids: list[int], s: int, depth: int, d: NgramTreeDrafter = drafter
            ) -> tuple[list[int], list[int]]:
                tree = d.propose(TreeContext(ids, depth), s)
                return tree.tokens, tree.parents

            out = replay(r["prompt_ids"], r["output_ids"], propose, size)
            steps, tokens = steps + out["steps"], tokens + out["tokens"]
        rows.append(
            {
                "input_scale": scale,
                "input_depth_decay": depth_decay,
                "short_match_decay": short,
                "mean_accepted_length": tokens / steps,
            }
        )
    return sorted(rows, key=lambda r: -r["mean_accepted_length"])


def validation_prompts(path: Path, lines: tuple[int, int], limit: int) -> list[Prompt]:
    """ShareGPT prompts from the held-out line range (no training set and no benchmark uses them)."""
    from specviz.prompts import Prompt

    out: list[Prompt] = []
    with path.open() as f:
        for i, line in enumerate(f):
            if lines[0] <= i < lines[1] and len(out) < limit:
                out.append(Prompt("sharegpt-val", f"sharegpt/{i}", json.loads(line)["prompt"]))
    return out


# --- output --------------------------------------------------------------------------------------


def write_outputs(out: Path, results: dict[str, Any]) -> list[Path]:
    from specviz.plots.sssd_figures import accepted_length_figure, batch_figure

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json"]
    paths[0].write_text(json.dumps(results, indent=1))
    lines = [f"# SSSD on {results['pair']}\n", f"Command: `{results['command']}`\n"]
    if results.get("fig4"):
        fig = accepted_length_figure(results["fig4"])
        paths.append(out / "fig4_accepted_length.html")
        fig.write_html(paths[-1], include_plotlyjs="cdn")
        lines += [
            "## Mean accepted length vs speculation length (replayed greedy verification)\n",
            _md(results["fig4"]),
            "",
        ]
    if results.get("speed_b1"):
        lines += ["## Speed at B = 1 (interleaved real runs)\n", _md(results["speed_b1"]), ""]
    if results.get("fig6"):
        fig = batch_figure(results["fig6"])
        paths.append(out / "fig6_batch.html")
        fig.write_html(paths[-1], include_plotlyjs="cdn")
        lines += ["## Static batches: throughput vs mean latency per request\n", _md(results["fig6"]), ""]
    if results.get("grid"):
        lines += ["## Fusion weight grid (validation, top 10)\n", _md(results["grid"][:10]), ""]
    paths.append(out / "table.md")
    paths[-1].write_text("\n".join(lines))
    return paths


def _md(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specviz.bench sssd", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="default", help="pair name, or a model folder (the target alone is enough)")
    add_prompt_args(ap, "mtbench,gsm8k,humaneval")
    ap.add_argument("--limit", type=int, default=8, help="prompts per suite")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--speed-limit", type=int, default=3, help="prompts per suite for the B = 1 timed runs")
    ap.add_argument("--speed-new-tokens", type=int, default=64)
    ap.add_argument("--datastore", default=str(DEFAULT_PATH))
    ap.add_argument("--sizes", default="1,2,4,8,12,16,24,32", help="speculation lengths S for Fig. 4")
    ap.add_argument(
        "--speculation-length", type=int, default=12, help="S for the B = 1 speed runs and the fixed-S batches"
    )
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--batch-new-tokens", type=int, default=64)
    ap.add_argument("--hardware", default="This machine (2-core CPU)", help="roofline preset for S per batch size")
    ap.add_argument("--stages", default="fig4,speed,fig6", help="any of fig4, speed, fig6, grid")
    ap.add_argument(
        "--validation", type=Path, help="JSONL of validation prompts for the grid stage (e.g. sharegpt_prompts.jsonl)"
    )
    ap.add_argument("--validation-lines", default="5500:6000")
    ap.add_argument("--out", type=Path, default=Path("results/sssd"))
    ap.add_argument(
        "--reference-tree",
        type=int,
        default=16,
        help="tree nodes per step when decoding the references (0: batched AR)",
    )
    ap.add_argument(
        "--references", type=Path, help="reuse the greedy references of an earlier results.json or .json.gz (same pair)"
    )
    ap.add_argument("--quiet", action="store_true")
    return ap


def _greedy_references(
    args: argparse.Namespace, pair: ModelPair, prompts: list, needs_refs: bool, progress: bool
) -> list[dict]:
    """The greedy references: reused from --references, decoded, or none when no stage needs them."""
    if needs_refs and args.references:
        from specviz.models.pair import encode_prompt
        from specviz.reports import read_json

        saved = {r["prompt_id"]: r["output_ids"] for r in read_json(args.references)["references"]}
        return [
            {"suite": p.suite, "prompt_id": p.id, "prompt_ids": encode_prompt(pair, p.text), "output_ids": saved[p.id]}
            for p in prompts
            if p.id in saved
        ]
    return references(pair, prompts, args.max_new_tokens, progress, tree_size=args.reference_tree) if needs_refs else []


def _speed_stage(
    args: argparse.Namespace, pair: ModelPair, prompts: list, refs: list[dict], options: dict
) -> list[dict]:
    """B = 1 timed runs on the first --speed-limit references of each suite."""
    per_suite: dict[str, int] = {}  # references seen per suite
    speed_refs = []  # the first --speed-limit of each suite
    for r in refs:
        per_suite[r["suite"]] = per_suite.get(r["suite"], 0) + 1
        if per_suite[r["suite"]] <= args.speed_limit:
            speed_refs.append(r)
    speed_ids = {r["prompt_id"] for r in speed_refs}
    return speed_b1(pair, [p for p in prompts if p.id in speed_ids], speed_refs, options, args.speed_new_tokens)


def _fig6_stage(
    args: argparse.Namespace, pair: ModelPair, prompts: list, refs: list[dict], options: dict
) -> list[dict]:
    """Static batches on references of --batch-new-tokens, suites mixed."""
    if args.batch_new_tokens <= args.max_new_tokens:  # a greedy output's prefix is the shorter run's output
        batch_refs = [{**r, "output_ids": r["output_ids"][: args.batch_new_tokens]} for r in refs]
    else:
        batch_refs = references(pair, prompts, args.batch_new_tokens, False, tree_size=args.reference_tree)
    by_suite = [[r for r in batch_refs if r["suite"] == s] for s in dict.fromkeys(r["suite"] for r in batch_refs)]
    batch_refs = [r for group in itertools.zip_longest(*by_suite) for r in group if r is not None]  # suites mixed
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    return fig6(pair, batch_refs, sizes, args.speculation_length, args.hardware, args.batch_new_tokens, options)


def _grid_stage(args: argparse.Namespace, pair: ModelPair, datastore: Datastore | None, progress: bool) -> list[dict]:
    """Fusion weights by grid search on references of the held-out validation prompts."""
    if args.validation is None:
        raise SpecvizError("the grid stage needs --validation PROMPTS.jsonl (prompts never used for the datastore)")
    lo, hi = (int(x) for x in args.validation_lines.split(":"))
    val = references(
        pair,
        validation_prompts(args.validation, (lo, hi), args.limit),
        args.max_new_tokens,
        progress,
        tree_size=args.reference_tree,
    )
    return grid_search(val, datastore, args.speculation_length)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    from specviz.methods.sssd import resolve_datastore
    from specviz.models.pair import load_target_pair
    from specviz.prompts import prompt_sources, take

    stages = set(args.stages.split(","))
    pair = load_target_pair(args.pair)
    datastore = resolve_datastore(args.datastore, pair.tokenizer) if args.datastore != "none" else None
    results: dict[str, Any] = {
        "pair": pair.name,
        "command": "python -m specviz.bench sssd " + " ".join(argv or sys.argv[1:]),
        "datastore": None if datastore is None else {"path": args.datastore, **datastore.info},
    }
    progress = not args.quiet
    prompts = [p for s in prompt_sources(args) for p in take(s, args.limit)]
    refs = _greedy_references(args, pair, prompts, bool(stages & {"fig4", "speed", "fig6"}), progress)
    results["references"] = [{k: v for k, v in r.items() if k != "prompt_ids"} for r in refs]
    options = {
        "speculation_length": args.speculation_length,
        "datastore": args.datastore if datastore is not None else "none",
    }
    if refs:
        write_outputs(args.out, results)  # every stage saves what is done so far
    if "fig4" in stages:
        results["fig4"] = fig4(refs, datastore, [int(s) for s in args.sizes.split(",")])
        write_outputs(args.out, results)
    if "speed" in stages:
        results["speed_runs"] = _speed_stage(args, pair, prompts, refs, options)
        results["speed_b1"] = speed_table(results["speed_runs"])
        write_outputs(args.out, results)
    if "fig6" in stages:
        results["fig6"] = _fig6_stage(args, pair, prompts, refs, options)
    if "grid" in stages:
        results["grid"] = _grid_stage(args, pair, datastore, progress)
    for path in write_outputs(args.out, results):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
