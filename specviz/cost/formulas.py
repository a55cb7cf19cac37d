"""Closed-form speedups of speculative decoding, in the papers' notation.

alpha (α): probability that one drafted token is accepted (i.i.d. per token, Leviathan et al. 2023).
gamma (γ): speculation length, drafted tokens per iteration.
c: cost of one draft forward relative to one target forward, T_draft / T_target (Leviathan).
   PEARL writes c the other way round (T_target / T_draft); its functions say `c_pearl`.
verify_ratio: T_target(γ+1) / T_target(1), the measured (or roofline) cost of a verification pass
   relative to a plain decoding step; Leviathan assumes 1, SSSD measures it (Fig. 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[tokens per iteration] = (1 - α^(γ+1)) / (1 - α)  (Leviathan et al., eq. 1).

    Accepted drafts plus the target's own token (correction or bonus); γ+1 when α = 1.
    """
    _check_alpha(alpha)
    if alpha == 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_tokens_by_position(rates: Sequence[float], gamma: int) -> float:
    """E[tokens per iteration] with an acceptance measured per draft position: 1 + Σ_{k≤γ} Π_{j≤k} α_j,
    α_j conditional on position j-1 accepted (`specviz.metrics.position_counts`); with every α_j = α
    it is `expected_tokens`. Needs a rate for each of the γ positions."""
    if gamma > len(rates):
        raise ValueError(f"γ = {gamma} needs the acceptance at {gamma} positions, got {len(rates)}")
    total, reach = 1.0, 1.0
    for alpha in rates[:gamma]:
        _check_alpha(alpha)
        reach *= alpha
        total += reach
    return total


def which_gamma(rates: Sequence[float], pass_ratio: float, gamma0: int) -> list[tuple[int, float, float, float]]:
    """(γ, E[tokens per pass], pass cost in target steps, speedup) for γ = 1..len(rates), from a run at γ0
    whose pass cost `pass_ratio` target steps (drafting and verifying, measured). A pass's cost is taken
    as linear in γ through the two measured points: 1 step at γ = 0 (the target alone) and pass_ratio
    at γ0. Positions past the measured ones are not guessed."""
    rows = []
    for g in range(1, len(rates) + 1):
        cost = 1.0 + (pass_ratio - 1.0) * g / gamma0
        tokens = expected_tokens_by_position(rates, g)
        rows.append((g, tokens, cost, tokens / cost))
    return rows


def improvement_factor(alpha: float, gamma: int, c: float) -> float:
    """Expected walltime improvement (1 - α^(γ+1)) / ((1 - α)(γc + 1))  (Leviathan et al., Thm 3.8).

    One iteration costs γ draft forwards (γc target-forward units) plus one verification pass
    assumed to cost the same as one decoding step.
    """
    return expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def speedup_with_verify_cost(alpha: float, gamma: int, c: float, verify_ratio: float) -> float:
    """Improvement factor with a measured verification cost: E[tokens] / (γc + T(γ+1)/T(1)).

    With verify_ratio = 1 this is `improvement_factor`; with c = 0 it is SSSD's Fig. 2 speedup
    E[tokens](S) / (T(S)/T(1)) of a draft that costs nothing (a datastore lookup).
    """
    return expected_tokens(alpha, gamma) / (gamma * c + verify_ratio)


def optimal_gamma(
    alpha: float,
    c: float,
    max_gamma: int = 64,
    verify_ratio: Callable[[int], float] | Sequence[float] | None = None,
) -> int:
    """argmax over γ in 1..max_gamma of the improvement factor (Leviathan et al., Fig. 3 / OSD Fig. 2).

    verify_ratio: None (Leviathan: verification as cheap as one step), a function γ -> T(γ+1)/T(1),
    or a sequence indexed by γ (entry 0 unused) e.g. from `specviz.cost.roofline.verify_cost_ratio`.
    """
    gammas = range(1, max_gamma + 1)
    return max(gammas, key=lambda g: speedup_with_verify_cost(alpha, g, c, _ratio(verify_ratio, g)))


def tree_budget(scores: Sequence[float], verify_ratio: Sequence[float], draft_cost: float = 0.0) -> int:
    """How many of a tree's best nodes to verify: the n in 0..len(scores) that maximises expected tokens
    per unit of cost, (1 + scores[0] + ... + scores[n-1]) / (draft_cost + verify_ratio[n]).

    scores: each candidate's chance of being accepted, best first (EAGLE-2 reads a node's cumulative
    draft probability so: the target keeps a node only if it keeps the whole path to it, and the
    expected accepted length is the sum of these chances; the 1 is the target's own token).
    verify_ratio[n]: T(n+1)/T(1), a pass over the n nodes (and the token before them) in decoding steps.
    draft_cost: what drafting the tree cost, in decoding steps (spent either way; it only weighs the
    fixed part of the iteration).
    """
    most = min(len(scores), len(verify_ratio) - 1)
    best, best_rate, tokens = 0, 1.0 / (draft_cost + verify_ratio[0]), 1.0
    for n in range(1, most + 1):
        tokens += scores[n - 1]
        rate = tokens / (draft_cost + verify_ratio[n])
        if rate > best_rate:
            best, best_rate = n, rate
    return best


def speedup_curve(
    alpha: float, c: float, gammas: Sequence[int], verify_ratio: Callable[[int], float] | Sequence[float] | None = None
) -> list[float]:
    """Improvement factor for each γ in `gammas` (plotting helper)."""
    return [speedup_with_verify_cost(alpha, g, c, _ratio(verify_ratio, g)) for g in gammas]


def osd_speedup(alpha_before: float, alpha_after: float, gamma: int, c: float) -> float:
    """How much faster decoding gets when online distillation lifts α from α₁ to α₂ (OSD, section 3):
    the ratio of the improvement factors at fixed γ and c, i.e. E[tokens](α₂) / E[tokens](α₁)."""
    return improvement_factor(alpha_after, gamma, c) / improvement_factor(alpha_before, gamma, c)


def alpha_from_tokens_per_iteration(tokens: float, gamma: int) -> float:
    """Invert E[tokens](α, γ) = tokens by bisection: the i.i.d. α that explains a measured mean
    number of tokens per iteration (accepted + 1) at speculation length γ."""
    if not 1.0 <= tokens <= gamma + 1:
        raise ValueError(f"tokens per iteration must lie in [1, γ+1] = [1, {gamma + 1}], got {tokens}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, gamma) < tokens else (lo, mid)
    return (lo + hi) / 2


# ----- PEARL (Liu et al. 2025): parallel drafting and verification -------------------------------


def pearl_window(c_pearl: float) -> int:
    """PEARL Theorem 1: the optimal window γ equals c = T_target / T_draft (drafting γ tokens then
    takes exactly one target forward, so neither model waits). Rounded, at least 1."""
    return max(1, round(c_pearl))


def pearl_tokens_per_step(alpha: float, gamma: int) -> float:
    """Expected tokens per PEARL step, (1 - α^γ) / ((1 - α)(1 + α - α^γ)), under the i.i.d.-α model.

    Our derivation from PEARL's Algorithm 1 (the paper proves bounds, not this closed form). In a
    step the target runs one forward while the draft writes a window of γ tokens beside it:
      - pre-verify state A: the target checks the window's first token; +1 token whatever the
        outcome (the draft's if accepted, the target's if not); accepted (α): go to P;
      - post-verify state P: the target checks the next γ tokens while the draft writes the next
        window; +(1 - α^γ)/(1 - α) tokens on average; all accepted (α^γ): stay in P, else go to A.
    Stationary weights π_A ∝ 1 - α^γ, π_P ∝ α give the formula; γ when α = 1, 1 when α = 0.
    """
    _check_alpha(alpha)
    if gamma < 1:
        raise ValueError("PEARL's window γ must be at least 1")
    if alpha == 1.0:
        return float(gamma)
    a_g = alpha**gamma
    return (1.0 - a_g) / ((1.0 - alpha) * (1.0 + alpha - a_g))


def pearl_speedup(alpha: float, c_pearl: float, gamma: int | None = None) -> float:
    """PEARL's expected speedup over autoregressive decoding: tokens per step / step time, where a
    step lasts max(1, γ/c) target forwards (the slower of the two models sets the pace).

    At α = 1 and γ = c this is c, while vanilla speculative decoding gets (c+1)/2 at best: the
    up-to-2x over SD that PEARL claims. γ defaults to Theorem 1's window c.
    """
    g = pearl_window(c_pearl) if gamma is None else gamma
    return pearl_tokens_per_step(alpha, g) / max(1.0, g / c_pearl)


def pearl_speedup_with_verify_cost(
    alpha: float, gamma: int, c: float, verify_ratio: float, side_by_side: bool = True
) -> float:
    """PEARL's speedup in Leviathan's c (T_draft / T_target) with a measured verification cost: tokens
    per step / the step's time in decoding steps, max(γc, T(pass)/T(1)) when the two models run side
    by side, γc + T(pass)/T(1) when they take turns. `pearl_speedup` is the side-by-side case with
    verify_ratio = 1 and c = 1 / c_pearl."""
    step = max(gamma * c, verify_ratio) if side_by_side else gamma * c + verify_ratio
    return pearl_tokens_per_step(alpha, gamma) / step


def vanilla_speedup_pearl_units(alpha: float, c_pearl: float, gamma: int) -> float:
    """Leviathan's improvement factor written with PEARL's c (T_target / T_draft): E / (γ/c + 1)."""
    return improvement_factor(alpha, gamma, 1.0 / c_pearl)


def _ratio(verify_ratio: Callable[[int], float] | Sequence[float] | None, gamma: int) -> float:
    if verify_ratio is None:
        return 1.0
    return float(verify_ratio(gamma)) if callable(verify_ratio) else float(verify_ratio[gamma])


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance rate α must lie in [0, 1], got {alpha}")
