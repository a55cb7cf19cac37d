"""One speculative iteration, step by step: what a teacher walks a class through.

The record of an iteration says exactly what happened: the drafted tokens with p(x) and q(x), the
uniforms u the sampling rule tested them with (`specviz.verify`), how many were accepted and what
the target emitted. `explain_iteration` adds what the record does not keep, by running the same
context once more through the models (deterministic: no sampling happens here): the top-k of p at
each drafted position from one target pass, the top-k of q from one pass of the pair's draft (when
the method drafted with it unchanged), and the distribution the target's own token came from: the
residual norm(max(0, p − q)) after a rejection under sampling (`specviz.verify.residual`, the
function the run drew it from), p for a bonus token, p's argmax under greedy decoding. Without the
models (a race recorded elsewhere) it explains from the record alone. The result is plain values;
`specviz.ui.stepthrough` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.extras import EngineExtra, OnlineExtra
from specviz.metrics import tested
from specviz.records import IterationRecord

if TYPE_CHECKING:
    from specviz.methods import MethodSpec
    from specviz.models.pair import ModelPair

TOP_K = 5
CONTEXT_TOKENS = 48  # context shown before the iteration


@dataclass(frozen=True)
class DraftCheck:
    """One drafted token and the acceptance test it met."""

    index: int  # i: its place among the iteration's drafts
    token: int
    text: str
    p: float | None  # p(x_i) under the target (from the record)
    q: float | None  # q(x_i) under the draft (from the record); None: a deterministic drafter (one-hot q)
    u: float | None  # the uniform the sampling rule drew for it (None: greedy, or a tree walk)
    tested: bool  # False: after the first rejection, never tested
    accepted: bool
    rule: str  # the test as it was applied, in words
    p_top: tuple[tuple[int, str, float], ...] = ()  # top-k (id, text, probability) of p at its position (recomputed)
    q_top: tuple[tuple[int, str, float], ...] = ()  # the same for q


@dataclass(frozen=True)
class TreeView:
    """The tree a tree method verified (SSSD, Speculative Streaming), as texts: the animation draws it."""

    texts: tuple[str, ...]  # each node's token text
    parents: tuple[int, ...]  # each node's parent: -1 for a child of the committed context
    accepted_path: tuple[int, ...]  # the nodes the target accepted, from the root down
    sources: tuple[str, ...]  # where each node came from ("input", "datastore", ...)


@dataclass(frozen=True)
class Lanes:
    """PEARL's two lanes in one record, in milliseconds from the record's start (measured per pass)."""

    mode: str  # "pre-verify", "post-verify" or "verify"
    draft_passes: tuple[tuple[float, float], ...]  # (start, end) ms of each draft forward pass
    target_passes: tuple[tuple[float, float], ...]  # the same for the target
    phases: tuple[tuple[str, float, float], ...]  # (mode, start, end) ms of each round
    ahead: tuple[str, ...] = ()  # post-verify: the texts of the drafts made ahead while the target verified
    ahead_kept: bool | None = None  # post-verify: every pending draft was accepted, so the drafts ahead stand
    dropped: tuple[str, ...] = ()  # pre-verify: the drafts dropped after a rejected first one


@dataclass(frozen=True)
class IterationStep:
    """Everything the step-through shows for one iteration of one run."""

    method: str
    iteration: int
    iterations: int  # of the run
    greedy: bool
    context: str  # the text just before the iteration
    position: int  # tokens in context before it
    checks: tuple[DraftCheck, ...]
    accepted: int
    target_token: str  # the target's own token ("" when the iteration emitted none: cut, or PEARL's post-verify)
    target_token_id: int | None
    target_role: str  # "correction" | "bonus" | "next token" | ""
    target_from: str  # where that token came from, in words
    target_top: tuple[tuple[int, str, float], ...]  # top-k of the distribution it came from (recomputed)
    cache: tuple[str, ...]  # the KV cache before, during and after, in words
    source: str  # "recomputed" or why only the record is shown
    p_check: float | None = None  # max |recomputed p(x) − recorded p(x)|: the recompute reproduces the run
    notes: tuple[str, ...] = field(default_factory=tuple)
    draft_ms: float | None = None  # measured milliseconds of drafting (None: not measured)
    verify_ms: float | None = None  # measured milliseconds of the target's pass and the test (None: not measured)
    draft_forwards: int = 0  # forward passes of a draft model (0: drafts from text, or none)
    tree: TreeView | None = None  # the verified tree (tree methods)
    lanes: Lanes | None = None  # PEARL's overlapped lanes


def explain_iteration(
    records: Sequence[IterationRecord],
    i: int,
    prompt_ids: Sequence[int],
    options: Mapping[str, Any],
    *,
    pair: ModelPair | None = None,
    recompute: str = "",
    token_text: Any = None,
) -> IterationStep:
    """Iteration `i` of one run (its records, in order). `options`: the race's sampling options.
    `pair`: the loaded pair to recompute with, or None; `recompute`: "target" (p only) or
    "target+draft" (p and q) or "" (record only). `token_text`: id -> readable text (default:
    the pair's tokenizer)."""
    if not records:
        raise SpecvizError("this run has no iterations to step through")
    if not 0 <= i < len(records):
        raise SpecvizError(f"iteration {i} does not exist: this run has iterations 0 to {len(records) - 1}")
    r = records[i]
    context = [*prompt_ids, *(t for rec in records[:i] for t in rec.emitted)]
    if len(context) != r.position:
        raise SpecvizError(
            "the records do not follow each other (their positions disagree); the run cannot be stepped through"
        )
    if pair is not None and recompute:
        ids = [*context, *r.drafted]
        if max(ids) >= pair.vocab_size or min(ids) < 0 or len(ids) > pair.max_context:
            raise SpecvizError(
                f"these records hold token ids the pair '{pair.name}' does not have: they were recorded with "
                "other models"
            )
    text = token_text or (lambda t: _readable(pair, t))
    greedy = float(options.get("temperature", 0.0)) == 0.0
    dists = _recompute(pair, context, r, options, recompute) if pair is not None and recompute else None
    checks = _checks(r, greedy, text, dists)
    role, source_words, top = _target_token(r, greedy, text, dists)
    p_check = None
    if dists is not None and r.p_target:
        p_check = max(
            abs(float(dists["p"][j, t]) - p) for j, (t, p) in enumerate(zip(r.drafted, r.p_target, strict=True))
        )
    own = r.emitted[r.accepted :]
    k = len(r.drafted)
    return IterationStep(
        method=r.method,
        iteration=i,
        iterations=len(records),
        greedy=greedy,
        context=_context_text(context, text),
        position=r.position,
        checks=checks,
        accepted=r.accepted,
        target_token=text(own[0]) if own else "",
        target_token_id=own[0] if own else None,
        target_role=role if own else "",
        target_from=source_words,
        target_top=top,
        cache=_cache_story(r, k),
        source="recomputed" if dists is not None else _why_record_only(pair, recompute),
        p_check=p_check,
        notes=_notes(r),
        draft_ms=r.draft_ms if r.draft_ms > 0 or not k else None,  # drafts with no drafting time: not measured
        verify_ms=r.verify_ms if r.verify_ms > 0 else None,
        draft_forwards=r.draft_forwards,
        tree=_tree_view(r, text),
        lanes=_lanes(r, text),
    )


def _tree_view(r: IterationRecord, text: Any) -> TreeView | None:
    tree = r.tree()
    if tree is None or not tree.tree_tokens:
        return None
    return TreeView(tuple(text(t) for t in tree.tree_tokens), tree.tree_parents, tree.accepted_path, tree.tree_sources)


def _lanes(r: IterationRecord, text: Any) -> Lanes | None:
    """PEARL's passes on the record's own clock: milliseconds from its first round."""
    pearl = r.pearl()
    if pearl is None:
        return None
    starts = [s for s, _ in (*pearl.draft_intervals, *pearl.target_intervals)] + [p.start for p in pearl.phases]
    t0 = min([r.t_start, *starts])

    def ms(spans: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
        return tuple(((s - t0) * 1e3, (e - t0) * 1e3) for s, e in spans)

    return Lanes(
        mode=pearl.mode,
        draft_passes=ms(pearl.draft_intervals),
        target_passes=ms(pearl.target_intervals),
        phases=tuple((p.mode, (p.start - t0) * 1e3, (p.end - t0) * 1e3) for p in pearl.phases),
        ahead=tuple(text(t) for t in pearl.drafted_ahead or ()),
        ahead_kept=pearl.ahead_kept,
        dropped=tuple(text(t) for t in pearl.dropped or ()),
    )


def _readable(pair: ModelPair | None, token: int) -> str:
    from specviz.models.pair import readable_token

    return readable_token(pair.tokenizer, token) if pair is not None else f"#{token}"


def _context_text(context: list[int], text: Any) -> str:
    tail = context[-CONTEXT_TOKENS:]
    return ("…" if len(context) > len(tail) else "") + "".join(text(t) for t in tail)


def _recompute(
    pair: ModelPair, context: list[int], r: IterationRecord, options: Mapping[str, Any], what: str
) -> dict[str, Any]:
    """p (and q) rows at the iteration's positions, from one fresh pass of each model."""
    import torch

    from specviz.methods.drafting import fit_vocab
    from specviz.models.kv import CachedLM
    from specviz.sampling import SamplingConfig, probabilities

    cfg = SamplingConfig(temperature=float(options.get("temperature", 0.0)), top_p=float(options.get("top_p", 1.0)))
    k = len(r.drafted)
    with torch.inference_mode():
        logits = CachedLM(pair.target).forward([*context, *r.drafted], n_logits=k + 1)  # [k+1, V]
        out = {"p": probabilities(logits, cfg).float().cpu(), "argmax": logits.argmax(dim=-1).tolist()}
        if what == "target+draft" and k and pair.draft is not None:
            q_logits = CachedLM(pair.draft).forward([*context, *r.drafted[:-1]], n_logits=k)  # [k, V_draft]
            out["q"] = fit_vocab(probabilities(q_logits, cfg), pair.vocab_size).float().cpu()
    return out


def _top(dist: Any, text: Any, k: int = TOP_K) -> tuple[tuple[int, str, float], ...]:
    values, ids = dist.topk(k)
    return tuple((int(t), text(int(t)), round(float(v), 4)) for v, t in zip(values, ids, strict=True) if v > 0)


def _checks(r: IterationRecord, greedy: bool, text: Any, dists: dict | None) -> tuple[DraftCheck, ...]:
    uniforms = r.uniforms
    judged = tested(r)  # the accepted drafts and the first refused one (specviz.metrics)
    out = []
    for j, token in enumerate(r.drafted):
        p = r.p_target[j] if r.p_target and j < len(r.p_target) else None
        q = r.q_draft[j] if r.q_draft and j < len(r.q_draft) else None
        u = uniforms[j] if uniforms and j < len(uniforms) else None
        was_tested, accepted = j < judged, j < r.accepted
        out.append(
            DraftCheck(
                index=j,
                token=token,
                text=text(token),
                p=p,
                q=q,
                u=u,
                tested=was_tested,
                accepted=accepted,
                rule=_rule(r, j, greedy, p, q, u, text, dists)
                if was_tested
                else "not tested: an earlier draft was rejected",
                p_top=_top(dists["p"][j], text) if dists else (),
                q_top=_top(dists["q"][j], text) if dists and "q" in dists else (),
            )
        )
    return tuple(out)


def _rule(
    r: IterationRecord,
    j: int,
    greedy: bool,
    p: float | None,
    q: float | None,
    u: float | None,
    text: Any,
    dists: dict | None,
) -> str:
    """The acceptance test as applied to draft j (specviz.verify)."""
    accepted = j < r.accepted
    if greedy:
        if accepted:
            return "greedy: the target's most likely token is this one → accepted"
        best = dists["argmax"][j] if dists else (r.emitted[j] if j < len(r.emitted) else None)
        return (
            f"greedy: the target's most likely token is '{text(best)}', not this one → rejected"
            if best is not None
            else "greedy: not the target's most likely token → rejected"
        )
    if u is None or p is None:
        return "tree walk: a token drawn from p chose which child to follow" + (
            " → accepted" if accepted else " → this one was not it"
        )
    ratio = 1.0 if q is not None and q <= 0 else min(1.0, p / (q if q is not None else 1.0))
    bound = f"min(1, p/q) = min(1, {p:.3g}/{q:.3g})" if q is not None else f"p(x) = {p:.3g} (one-hot q)"  # 3 digits
    return f"u = {u:.3f} {'<' if accepted else '≥'} {bound} = {ratio:.3f} → {'accepted' if accepted else 'rejected'}"


def _target_token(r: IterationRecord, greedy: bool, text: Any, dists: dict | None) -> tuple[str, str, tuple]:
    """(role, where it came from in words, top-k of that distribution)."""
    k, n = len(r.drafted), r.accepted
    if not r.drafted:
        role = "next token"
    elif n < k:
        role = "correction"
    else:
        role = "bonus"
    if len(r.emitted) <= n:
        why = (
            "EOS or the token budget ended the run here"
            if r.stop
            else (
                "none: every draft was accepted and the method already holds drafts for the next position "
                "(PEARL's post-verify)"
            )
        )
        return "", why, ()
    if greedy:
        return (
            role,
            f"the target's most likely token after {n} accepted draft{'s' if n != 1 else ''}",
            _top(dists["p"][n], text) if dists else (),
        )
    if role == "correction":
        if dists is None:
            return role, "drawn from norm(max(0, p − q)): what p has beyond q, at the rejected position", ()
        if "q" not in dists and r.q_draft is not None:  # q from a draft we cannot rerun (OSD's online copy): show p
            return (
                role,
                "drawn from norm(max(0, p − q)) at the rejected position (q of that moment is not kept; p shown)",
                _top(dists["p"][n], text),
            )
        from specviz.verify import residual

        q_n = dists["q"][n] if "q" in dists else None  # None: a one-hot q, so p without the rejected token
        return (
            role,
            "drawn from norm(max(0, p − q)) at the rejected position",
            _top(residual(dists["p"][n], q_n, r.drafted[n]), text),
        )
    return (
        role,
        f"drawn from p at position {n}" + (" (every draft accepted: a bonus token)" if role == "bonus" else ""),
        _top(dists["p"][n], text) if dists else (),
    )


def _cache_story(r: IterationRecord, k: int) -> tuple[str, ...]:
    """The target's KV cache through the iteration (the draft's follows the same prefix)."""
    held = r.position - 1 if r.iteration else 0
    fed = (
        "the prompt"
        if not r.iteration
        else "the last context token (the target's own token from the previous iteration)"
    )
    tree = r.tree()
    nodes = (len(tree.tree_tokens) if tree else 0) or k
    if not k and not nodes:
        return (
            f"before: the target's cache holds {held} tokens",
            f"pass: {fed} is fed; the cache grows to {r.position} and the target predicts the next token",
            "no rollback: nothing was drafted",
        )
    kept, dropped = r.position + r.accepted, nodes - r.accepted
    if tree and tree.tree_tokens:  # a tree's accepted nodes are not a prefix of its entries: kept by index
        rollback = (
            f"rollback: the target's cache keeps the context and the {r.accepted} accepted node"
            f"{'s' if r.accepted != 1 else ''} of the path, moved up behind it ({kept} entries); the tree's other "
            f"{dropped} entr{'y' if dropped == 1 else 'ies'} dropped; "
            + (
                "the draft head's cache drops this tree's entries when it drafts next"
                if r.draft_forwards
                else "no draft model ran, so there is no draft cache to roll back"
            )
        )
    else:
        rollback = (
            f"rollback: cut back to {kept} entries (the context and {r.accepted} accepted); {dropped} "
            f"entr{'y' if dropped == 1 else 'ies'} of rejected or unused drafts dropped"
            + (
                "; the draft model's cache is cut to the same prefix"
                if r.draft_forwards
                else " (no draft model ran: its drafts came from text, so only the target's cache is cut)"
            )
        )
    return (
        f"before: the target's cache holds {held} tokens",
        (
            f"verify: one pass feeds {fed} and the {nodes} drafted token{'s' if nodes != 1 else ''}; the cache "
            "grows to "
            f"{r.position + nodes} entries, and every drafted position is scored at once"
        ),
        rollback,
        "after: the target's own token is fed with the next iteration's drafts"
        if len(r.emitted) > r.accepted
        else "after: no token of the target's own this iteration",
    )


def _notes(r: IterationRecord) -> tuple[str, ...]:
    notes, tree, pearl, online = [], r.tree(), r.pearl(), r.extras(OnlineExtra)
    if tree is not None and tree.tree_tokens:
        notes.append(
            f"a tree of {len(tree.tree_tokens)} candidate tokens was verified in one pass; shown: the path "
            "the verification took (accepted) and the main branch after it"
        )
    if pearl is not None:
        notes.append(f"PEARL mode: {pearl.mode}")
    if online is not None:
        notes.append(f"the online draft after {online.draft_version} update(s) drafted this iteration")
    engine = r.extras(EngineExtra)
    if engine is not None:
        notes.append(
            f"an outside engine's step: it drafted {r.speculation_length} and reports how many it kept, not p or q, "
            f"nor the ids of the {engine.unreported} it rejected; shown: its kept drafts, and the target's p of them "
            "where it was recomputed here"
            + ("" if engine.placed else "; which step this one-token step was is not certain from its counts")
            + (
                f"; {engine.steps_in_chunk} steps arrived together and share their time"
                if engine.steps_in_chunk > 1
                else ""
            )
        )
    return tuple(notes)


def recompute_for(spec: MethodSpec, pair: ModelPair, options: dict[str, Any]) -> str:
    """What explain_iteration may rerun for a method (a MethodSpec) run on `pair` with `options`:
    "target+draft" when it drafts with the pair's draft as loaded (its registry entry says so),
    "target" when only its verifier is the pair's target, "" when it verifies with another model
    (Speculative Streaming's tuned target)."""
    if spec.lossless_note(pair, options):
        return ""
    return "target+draft" if spec.drafts_with_pair_draft else "target"


def _why_record_only(pair: ModelPair | None, recompute: str) -> str:
    if pair is None:
        return "from the record only: the race's models are not loaded here"
    return "from the record only: this method verifies with another model than the pair's target"
