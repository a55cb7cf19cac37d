"""Why each method of a race was fast or slow, in the formula's terms, and what the numbers mean.

One line per drafting method: its family, α (the per-token acceptance probability), its speculation
length (γ drafts, or a tree of S nodes), the draft cost c, the verify cost, the speedup its family's
formula predicts from them (`specviz.cost.families`, named by its registry entry) next to the one
measured, and a plain reading: an iteration of a chain is predicted to emit E[tokens] = (1 − α^(γ+1))
/ (1 − α) tokens (shown beside the tokens it emitted, measured) for the price of γc + T(γ+1)/T(1)
decoding steps, so the method pays when the tokens exceed the steps. Shared by the Race tab (under
the board) and the Theory tab. No torch here.

One vocabulary (`GLOSSARY`): α is only ever the per-token acceptance probability of Leviathan et al.
(accepted ÷ tested); accepted ÷ drafted is the "acceptance rate", and new tokens per target pass are
"tokens per target pass", each under its own name wherever it is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specviz.cost.families import CHAINS, FAMILIES, TARGET_ALONE, c_text
from specviz.cost.from_records import explain_run, gamma_answer
from specviz.methods import get_method
from specviz.metrics import position_counts
from specviz.serving.race import Race
from specviz.ui.panels import BASELINE, DISTURBED, md_text

# Shown in the Race tab; every metric label of a panel links to its entry (#sv-term-<key>).
GLOSSARY = {
    "alpha": (
        "α (per-token acceptance probability)",
        (
            "the chance that one drafted token is accepted given the ones before it were (Leviathan et al.): "
            "accepted ÷ tested, where the tested drafts are the accepted ones and the first rejected one of each "
            "iteration (the drafts after it are never tested). The only number called α here."
        ),
    ),
    "acceptance": (
        "acceptance rate (accepted ÷ drafted)",
        (
            "accepted draft tokens ÷ all drafted tokens, the untested ones after a rejection included; "
            "so it is lower than α, and falls as γ grows even when α does not."
        ),
    ),
    "accepted-length": (
        "tokens per target pass",
        (
            "new tokens per forward pass of the target (the mean accepted length, the bonus or correction token "
            "included): 1 for autoregressive decoding, up to γ + 1 for speculation."
        ),
    ),
    "c": ("c (draft cost)", "one draft token's time ÷ one target decoding step: what drafting costs per token."),
    "verify": (
        "verify cost",
        (
            "a verification pass ÷ one decoding step: T(γ+1)/T(1) over γ drafts and the bonus token, "
            "T(S+1)/T(1) over a tree of S nodes, T(pass)/T(1) for PEARL's mean target pass. "
            "Memory-bound hardware keeps it near 1; this CPU pays more."
        ),
    ),
    "family": (
        "family",
        "how a method drafts and verifies, which decides the formula that explains its speed: "
        + "; ".join(f"{f.name}: {f.formula}" for f in FAMILIES if f is not TARGET_ALONE)
        + ".",
    ),
    "oracle-sl": (
        "oracle speculation length",
        (
            "how many of the following tokens the draft would have guessed right at "
            "that iteration: the length a perfect policy would have drafted (DISCO's oracle)."
        ),
    ),
    "speedup": (
        "speedup vs AR",
        "this method's tokens/s ÷ the autoregressive run's tokens/s, on this prompt, each run alone.",
    ),
}


def glossary_html() -> str:
    """The glossary, each term with an anchor the panels link to."""
    items = "".join(f'<dt id="sv-term-{key}">{name}</dt><dd>{text}</dd>' for key, (name, text) in GLOSSARY.items())
    return f'<dl class="sv-glossary">{items}</dl>'


def explain_race(race: Race) -> list[dict[str, Any]]:
    """The formula's inputs and predicted vs measured speedup for every finished drafting method,
    labelled for display; [] without a finished autoregressive run."""
    runs = {r.name: r for r in race.finished()}
    base = runs.get(BASELINE)
    if base is None or base.status != "done":
        return []
    rows = []
    for name, run in runs.items():
        row = explain_run(run.records, base.records, get_method(name).family)  # the baseline's family explains nothing
        if row:
            rows.append({**row, "method": run.label, "name": name})
    return rows


def reading(row: dict[str, Any], disturbed: Sequence[str] | None = None) -> str:
    """One plain sentence from an `explain_run` row: the tokens an iteration is predicted to emit, by the
    formula from α, beside the ones it emitted (measured), against what an iteration cost; a run whose
    timing was disturbed (specviz.serving.timing) is not explained by its method."""
    if disturbed:
        return f"⚠️ {DISTURBED}: these timings are not the method's"
    predicted, measured, cost = row["expected_tokens"], row["measured_tokens_per_iteration"], row["iteration_cost"]
    apart = (measured >= cost) != (row["measured_speedup"] >= 1)  # the counts and the clock on two sides of 1
    return (
        f"{predicted:.2f} tokens per {row['unit']} predicted by the formula, {measured:.2f} measured, for the price "
        f"of {cost:.2f} steps ({row['cost_terms']}): {measured / cost:.2f}× by these counts"
        + (
            ", the clock says otherwise: the counts leave out time outside the models' passes, and noise"
            if apart
            else ""
        )
    )


def why_markdown(race: Race | None) -> str:
    """The Race tab's 'why' table, or what is missing for it (a saved race's labels escaped: `md_text`)."""
    if race is None:
        return ""
    rows = explain_race(race)
    flags = {r.name: r.flags for r in race.runs if r.flags}
    if not rows:
        return (
            "**Why fast or slow:** include *Autoregressive* in the race (it is the baseline every speedup "
            "divides by) and at least one drafting method."
        )
    lines = [
        (
            "**Why each method was fast or slow** — its [family](#sv-term-family)'s formula from this race's "
            "own counts and timings ([α](#sv-term-alpha), [c](#sv-term-c), [verify cost](#sv-term-verify)). "
            "The counts (α; γ, the drafts of an iteration, or S, the nodes of a tree) say what the draft did; "
            "the timings (c, verify cost) come from one run each and "
            "move from run to run on a shared CPU, so two methods with the same counts can show different c "
            "and speedups:"
        ),
        "",
        # short headers, and a ratio that breaks at its slash: 330 px hold every column but the family on a phone
        "| method | family | α | γ or tree size | c | verify cost | predicted speedup | measured speedup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {md_text(r['method'])} | {r['family']} | {r['alpha']:.2f} | {r['length_text']} | "
        f"{c_text(r).removeprefix('c = ')} | "
        f"{r['verify_label'].replace('/', ' / ')} = {r['verify_ratio']:.2f} | {r['predicted_speedup']:.2f}× | "
        f"{r['measured_speedup']:.2f}× |"
        for r in rows
    ]
    # the readings under the table, one a method: in a column they pushed the table off a 1440 px page
    lines += ["", *(f"- **{md_text(r['method'])}**: {reading(r, flags.get(r['name']))}." for r in rows)]
    lines += ["", "Predicted by " + "; ".join(dict.fromkeys(f"{r['family']}: {r['formula']}" for r in rows)) + "."]
    return "\n".join(lines)


def chain_runs(race: Race) -> list[Any]:
    """The race's finished runs of a chain method (one draft a pass: `families.CHAINS`), in the race's order."""
    return [r for r in race.finished() if r.records and get_method(r.name).family in CHAINS]


def position_rows(race: Race, order: list[str]) -> list[tuple[str, int, tuple[tuple[int, int], ...]]]:
    """(label, colour index in `order`, tested and accepted per draft position) of each chain run:
    what `plots.positions.acceptance_by_position` draws."""
    return [(r.label, order.index(r.name), position_counts(r.records)) for r in chain_runs(race) if r.name in order]


def _engine_baseline(race: Race, name: str) -> Any:
    """The finished target-alone run of the engine that ran `name` (specviz's autoregressive for its own)."""
    engine = get_method(name).engine
    return next(
        (
            r
            for r in race.finished()
            if r.status == "done" and get_method(r.name).family is TARGET_ALONE and get_method(r.name).engine == engine
        ),
        None,
    )


def gamma_markdown(race: Race | None) -> str:
    """'Which γ' for each chain run of a fixed γ: the speedup each shorter or equal γ would have had, from the
    race's acceptance per position and its passes' cost against the same engine's target alone."""
    if race is None or not race.finished():
        return ""
    lines = []
    for run in chain_runs(race):
        base = _engine_baseline(race, run.name)
        answer = gamma_answer(run.records, base.records) if base is not None else None
        if answer is None:
            continue
        best = answer["best"]
        figures = ", ".join((f"**{g}: {s:.2f}×**" if g == best else f"{g}: {s:.2f}×") for g, _, _, s in answer["rows"])
        disturbed = run.flags or base.flags  # a pass or a step slowed by other load: not the method's cost
        lines.append(
            f"- **{md_text(run.label)}** (raced at γ = {answer['gamma']}, a pass {answer['pass_ratio']:.2f} of "
            f"{md_text(base.label)}'s steps): γ = {figures}; by these figures γ = {best}"
            + (" is already the best." if best == answer["gamma"] else ".")
            + (f" ⚠️ {DISTURBED} ({md_text(run.label if run.flags else base.label)})." if disturbed else "")
        )
    if not lines:
        return (
            "**Which γ:** race a chain method of a fixed γ beside its engine's target alone (specviz's "
            "autoregressive for specviz's methods, vLLM's target alone for vLLM's) to see which γ its acceptance "
            "per position pays for."
        )
    head = (
        "**Which γ** — the speedup a shorter γ would have had: E[tokens per pass] from the acceptance per "
        "position (the plot), over a pass's cost, taken as linear in γ from 1 step at γ = 0 (the engine's "
        "target alone) to the measured pass at the raced γ; a longer γ needs positions not measured. "
        "Client-side times: a remote server's network is in them."
    )
    return "\n".join([head, "", *lines])
