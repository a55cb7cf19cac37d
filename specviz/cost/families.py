"""The families of speculative methods, and the formula that explains each one's speed.

A method's registry entry names its family (`register(..., family=CHAIN)`); the why table, the
Theory tab and `from_records.explain_run` take the formula from there, so a new method of a known
family is explained with no edit anywhere else. Each `predict` reads a run's records with T(1), one
plain decoding step of the baseline in ms, and returns the formula's inputs and its prediction.

- target alone: autoregressive decoding, the baseline every speedup divides by; nothing to explain.
- chain: γ drafted tokens in a line, verified in one pass (Leviathan et al. 2023):
  E[tokens](α, γ) / (γc + T(γ+1)/T(1)).
- tree: S candidate nodes verified in one pass with a tree mask (SSSD; SpecInfer's tree walk); the
  accepted path is at most the tree's depth D: E[tokens](α, D) / (Sc + T(S+1)/T(1)), α the chance a
  node on the path has a child the target accepts, c the drafting time per node (SSSD's Fig. 2 with
  c = 0).
- self-drafting tree: the same formula, the tree drafted by the target's own extra streams
  (Speculative Streaming).
- head-drafted tree: a tree grown level by level by a head over the target's features (EAGLE-2): its
  drafting costs P passes of the head per tree, whatever the nodes: E[tokens](α, D) / (Pc + T(S+1)/T(1)),
  c the time of one head pass.
- parallel: draft and target side by side (PEARL, Liu et al. 2025): tokens per step
  E_PEARL(α, γ) / max(γc, T(pass)/T(1)), T(pass) a target pass of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specviz.cost.formulas import (
    expected_tokens,
    pearl_speedup_with_verify_cost,
    pearl_tokens_per_step,
    speedup_with_verify_cost,
)
from specviz.cost.from_records import Family, estimate_alpha


def _nothing(records: Sequence[Any], t1: float) -> None:
    """The baseline: it is what every speedup divides by."""
    return None


def _drafting(records: Sequence[Any]) -> tuple[list[Any], float | None]:
    """The iterations that drafted, and α estimated from them (None: nothing was judged)."""
    drafting = [r for r in records if r.drafted_count]
    return drafting, estimate_alpha(drafting) if drafting else None


def _chain(records: Sequence[Any], t1: float) -> dict[str, Any] | None:
    """Leviathan's quantities: α from where each block stopped, mean γ, c = draft ms per drafted token / T(1)."""
    drafting, alpha = _drafting(records)
    if alpha is None:
        return None
    drafted = sum(r.drafted_count for r in drafting)
    gamma, c = drafted / len(drafting), sum(r.draft_ms for r in drafting) / drafted / t1
    ratio = sum(r.verify_ms for r in drafting) / len(drafting) / t1
    g = max(1, round(gamma))
    return {
        "alpha": alpha,
        "length": gamma,
        "length_text": f"γ = {gamma:.1f}",
        "c": c,
        "verify_ratio": ratio,
        "expected_tokens": expected_tokens(alpha, g),
        "iteration_cost": g * c + ratio,
        "cost_terms": f"{g}×{c:.3f} drafting + {ratio:.2f} verifying",
        "predicted_speedup": speedup_with_verify_cost(alpha, g, c, ratio),
    }


def _engine_chain(records: Sequence[Any], t1: float) -> dict[str, Any] | None:
    """An outside engine's chain (vLLM): α and γ from its per-step counts; its step is timed at the client as a
    whole (drafting inside it), so the cost is the measured step over T(1), with no split into γc and a verify."""
    drafting, alpha = _drafting(records)
    if alpha is None:
        return None
    gamma = sum(r.drafted_count for r in drafting) / len(drafting)
    ratio = sum(r.t_end - r.t_start for r in drafting) * 1e3 / len(drafting) / t1
    g = max(1, round(gamma))
    return {
        "alpha": alpha,
        "length": gamma,
        "length_text": f"γ = {gamma:.1f}",
        "c": None,
        "verify_ratio": ratio,
        "expected_tokens": expected_tokens(alpha, g),
        "iteration_cost": ratio,
        "cost_terms": f"{ratio:.2f} steps of T(1) per engine step, drafting included (timed at the client)",
        "predicted_speedup": expected_tokens(alpha, g) / ratio if ratio > 0 else None,
    }


def _tree(records: Sequence[Any], t1: float) -> dict[str, Any] | None:
    """A tree pass of S nodes: α along the accepted path, the mean depth D and size S, c = draft ms per node / T(1).
    A record's `drafted` is the tree's main path (the accepted nodes, then first children), so it
    ends at a rejection exactly when the last accepted node had children: the chain's estimate of α."""
    trees = [(r, t) for r in records if (t := r.tree()) is not None and t.tree_tokens]
    alpha = estimate_alpha([r for r, _ in trees])
    if not trees or alpha is None:
        return None
    nodes = sum(len(t.tree_tokens) for _, t in trees)
    size, depth = nodes / len(trees), sum(_depth(t.tree_parents) for _, t in trees) / len(trees)
    c = sum(r.draft_ms for r, _ in trees) / nodes / t1
    ratio = sum(r.verify_ms for r, _ in trees) / len(trees) / t1
    expected, cost = expected_tokens(alpha, max(1, round(depth))), size * c + ratio
    return {
        "alpha": alpha,
        "length": size,
        "depth": depth,
        "length_text": f"S = {size:.1f}, depth {depth:.1f}",
        "c": c,
        "verify_ratio": ratio,
        "expected_tokens": expected,
        "iteration_cost": cost,
        "cost_terms": f"{size:.1f}×{c:.3f} drafting + {ratio:.2f} verifying",
        "predicted_speedup": tree_speedup(alpha, depth, size, c, ratio),
    }


def _head_tree(records: Sequence[Any], t1: float) -> dict[str, Any] | None:
    """The tree's quantities, the drafting priced per head pass (P a tree, c = ms per pass / T(1)) rather
    than per node: a pass of the head expands a whole level, so its cost does not grow with S."""
    row = _tree(records, t1)
    trees = [r for r in records if (t := r.tree()) is not None and t.tree_tokens]
    passes = sum(r.draft_forwards for r in trees)
    if row is None or not passes:
        return row
    per_tree, c = passes / len(trees), sum(r.draft_ms for r in trees) / passes / t1
    cost = per_tree * c + row["verify_ratio"]
    return {
        **row,
        "c": c,
        "draft_passes": per_tree,
        "iteration_cost": cost,
        "cost_terms": f"{per_tree:.1f} head passes×{c:.3f} drafting + {row['verify_ratio']:.2f} verifying",
        "predicted_speedup": row["expected_tokens"] / cost,
    }


def c_text(row: dict[str, Any], digits: int = 3) -> str:
    """ "c = 0.123" for a family's reading; an engine's chain has no c of its own (drafting is inside its step)."""
    return f"c = {row['c']:.{digits}f}" if row["c"] is not None else "c inside the engine's step"


def tree_speedup(alpha: float, depth: float, size: float, c: float, verify_ratio: float) -> float:
    """The tree family's formula: E[tokens](α, D) / (Sc + T(S+1)/T(1)); D the depth, S the nodes verified."""
    return expected_tokens(alpha, max(1, round(depth))) / (size * c + verify_ratio)


def _depth(parents: Sequence[int]) -> int:
    """Levels of a tree whose nodes are listed parents first (-1: a child of the committed context)."""
    depth: list[int] = []
    for parent in parents:
        depth.append(1 + (depth[parent] if parent >= 0 else 0))
    return max(depth, default=0)


def _parallel(records: Sequence[Any], t1: float) -> dict[str, Any] | None:
    """PEARL's quantities: α, its window γ, c = ms per draft forward / T(1), T(pass) = ms per target forward."""
    drafting = [r for r in records if r.drafted]
    pearl = [p for r in records if (p := r.pearl()) is not None]
    alpha = estimate_alpha(drafting)
    draft_forwards, target_forwards = sum(r.draft_forwards for r in records), sum(r.target_forwards for r in records)
    if not drafting or alpha is None or not pearl or not target_forwards:
        return None
    gamma = max(1, round(sum(p.window for p in pearl) / len(pearl)))
    c = sum(r.draft_ms for r in records) / draft_forwards / t1 if draft_forwards else 0.0
    ratio = sum(r.verify_ms for r in records) / target_forwards / t1
    side_by_side = any(phase.parallel for p in pearl for phase in p.phases)  # False: run with concurrent=False
    terms = (
        f"max({gamma}×{c:.3f} drafting, {ratio:.2f} verifying) side by side"
        if side_by_side
        else f"{gamma}×{c:.3f} drafting + {ratio:.2f} verifying, one after the other"
    )
    return {
        "alpha": alpha,
        "length": float(gamma),
        "length_text": f"γ = {gamma} (window)",
        "c": c,
        "verify_ratio": ratio,
        "expected_tokens": pearl_tokens_per_step(alpha, gamma),
        "iteration_cost": max(gamma * c, ratio) if side_by_side else gamma * c + ratio,
        "cost_terms": terms,
        "predicted_speedup": pearl_speedup_with_verify_cost(alpha, gamma, c, ratio, side_by_side),
    }


TARGET_ALONE = Family("target alone", "1× (the baseline)", "step", "T(1)", _nothing)
CHAIN = Family("chain", "E[tokens](α, γ) / (γc + T(γ+1)/T(1)) (Leviathan et al.)", "iteration", "T(γ+1)/T(1)", _chain)
TREE = Family(
    "tree", "E[tokens](α, D) / (Sc + T(S+1)/T(1)), D the tree's depth (SSSD)", "tree pass", "T(S+1)/T(1)", _tree
)
SELF_DRAFTING_TREE = Family(
    "self-drafting tree",
    "E[tokens](α, D) / (Sc + T(S+1)/T(1)), the target drafting with its own streams (Speculative Streaming)",
    "tree pass",
    "T(S+1)/T(1)",
    _tree,
)
HEAD_TREE = Family(
    "head-drafted tree",
    "E[tokens](α, D) / (Pc + T(S+1)/T(1)), P passes of a head over the target's features per tree (EAGLE-2)",
    "tree pass",
    "T(S+1)/T(1)",
    _head_tree,
)
PARALLEL = Family("parallel", "E_PEARL(α, γ) / max(γc, T(pass)/T(1)) (PEARL)", "step", "T(pass)/T(1)", _parallel)
ENGINE_CHAIN = Family(
    "engine chain",
    "E[tokens](α, γ) / (T(step)/T(1)), T(step) an engine step timed at the client, drafting included (vLLM)",
    "step",
    "T(step)/T(1)",
    _engine_chain,
)
FAMILIES = (TARGET_ALONE, CHAIN, TREE, SELF_DRAFTING_TREE, HEAD_TREE, PARALLEL, ENGINE_CHAIN)
CHAINS = (CHAIN, ENGINE_CHAIN)  # one draft a pass, verified left to right: its positions are one line
