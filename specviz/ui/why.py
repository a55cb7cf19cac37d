"""Why each method of a race was fast or slow, in the formula's terms, and what the numbers mean.

One line per drafting method: its family, α (how often a drafted token is accepted), its speculation
length (γ drafts, or a tree of S nodes), the draft cost c, the verify cost, the speedup its family's
formula predicts from them (`specviz.cost.families`, named by its registry entry) next to the one
measured, and a plain reading: an iteration of a chain emits E[tokens] = (1 − α^(γ+1)) / (1 − α)
tokens for the price of γc + T(γ+1)/T(1) decoding steps, so the method pays when the first exceeds
the second. Shared by the Race tab (under the board) and the Theory tab. No torch here.
"""

from __future__ import annotations

from typing import Any

from specviz.cost.families import FAMILIES, TARGET_ALONE
from specviz.cost.from_records import explain_run, reading
from specviz.methods import get_method
from specviz.ui.panels import BASELINE, Race

# Shown in the Race tab; every metric label of a panel links to its entry (#sv-term-<key>).
GLOSSARY = {
    "acceptance": (
        "acceptance rate",
        "accepted draft tokens ÷ drafted tokens. A fully accepted block counts every token; "
        "a rejection ends the block, and the tokens after it count as drafted but not accepted.",
    ),
    "alpha": (
        "α",
        "the chance that one drafted token is accepted given the ones before it were (Leviathan et al.), "
        "estimated from where each block stopped; higher than the acceptance rate, which counts the tokens after a rejection too.",
    ),
    "accepted-length": (
        "tokens / target fwd (mean accepted length)",
        "new tokens per forward pass of the target: 1 for autoregressive decoding, up to γ + 1 for speculation.",
    ),
    "c": ("c (draft cost)", "one draft token's time ÷ one target decoding step: what drafting costs per token."),
    "verify": (
        "verify cost",
        "a verification pass ÷ one decoding step: T(γ+1)/T(1) over γ drafts and the bonus token, "
        "T(S+1)/T(1) over a tree of S nodes, T(pass)/T(1) for PEARL's mean target pass. "
        "Memory-bound hardware keeps it near 1; this CPU pays more.",
    ),
    "family": (
        "family",
        "how a method drafts and verifies, which decides the formula that explains its speed: "
        + "; ".join(f"{f.name}: {f.formula}" for f in FAMILIES if f is not TARGET_ALONE)
        + ".",
    ),
    "oracle-sl": (
        "oracle speculation length",
        "how many of the following tokens the draft would have guessed right at "
        "that iteration: the length a perfect policy would have drafted (DISCO's oracle).",
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
            rows.append({**row, "method": run.label})
    return rows


def why_markdown(race: Race | None) -> str:
    """The Race tab's 'why' table, or what is missing for it."""
    if race is None:
        return ""
    rows = explain_race(race)
    if not rows:
        return (
            "**Why fast or slow:** include *Autoregressive* in the race (it is the baseline every speedup "
            "divides by) and at least one drafting method."
        )
    lines = [
        "**Why each method was fast or slow** — its [family](#sv-term-family)'s formula from this race's own counts and "
        "timings ([α](#sv-term-alpha), [c](#sv-term-c), [verify cost](#sv-term-verify)). The counts (α, γ) say what the "
        "draft did; the timings (c, verify cost) come from one run each and move from run to run on a shared CPU, so two "
        "methods with the same counts can show different c and speedups:",
        "",
        "| method | family | α | speculation length | c | verify cost | predicted | measured | reading |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['method']} | {r['family']} | {r['alpha']:.2f} | {r['length_text']} | {r['c']:.3f} | {r['verify_label']} = "
        f"{r['verify_ratio']:.2f} | {r['predicted_speedup']:.2f}× | {r['measured_speedup']:.2f}× | {reading(r)} |"
        for r in rows
    ]
    lines += ["", "Predicted by " + "; ".join(dict.fromkeys(f"{r['family']}: {r['formula']}" for r in rows)) + "."]
    return "\n".join(lines)
