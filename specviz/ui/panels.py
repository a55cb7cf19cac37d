"""A race's HTML (`specviz.serving.race`: the race as data): one panel per method.

Everything here is a pure function of the records, so a live run, a finished run and a replay at
time t are drawn by the same code.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from specviz.cost.families import TARGET_ALONE
from specviz.methods import BASELINE, get_method
from specviz.metrics import speedup, summarize, summary_metrics
from specviz.records import IterationRecord
from specviz.serving.race import MethodRun, Race, default_options, resolved_options
from specviz.ui.tokens import tokens_html

DISTURBED = "timing disturbed by other load: re-run"  # a panel's flag (specviz.serving.timing's checks)
MARKDOWN_MARKUP = re.compile(r"([\\`*_\[\]|~$])")  # what makes emphasis, code, links, table cells, strikes, LaTeX


def md_text(text: str) -> str:
    """Text from a saved race or a visitor (a run's label, a flag, a pair's name) as Markdown shows it, literally:
    HTML escaped to entities, Markdown's markup behind backslashes (no tag, link, emphasis or table cell of its
    own), and line breaks as spaces (one would end the list item or table row the text sits in)."""
    return html.escape(MARKDOWN_MARKUP.sub(r"\\\1", " ".join(text.split())), quote=False)


def live_metrics(
    records: Sequence[IterationRecord], baseline_tps: float | None = None
) -> dict[str, float | int | None]:
    """The panel's numbers after the records so far: the run's totals as far as it got (specviz.metrics)."""
    if not records:
        return {
            "tokens": 0,
            "wall_s": 0.0,
            "tokens_per_s": None,
            "acceptance_rate": None,
            "mean_accepted_length": None,
            "target_forwards": 0,
            "draft_forwards": 0,
            "speedup": None,
        }
    s = summarize(records)
    m = summary_metrics(s)
    return {
        "tokens": s.new_tokens,
        "wall_s": s.wall_s,
        "tokens_per_s": m["tokens_per_s"],
        "acceptance_rate": m["acceptance_rate"],
        "mean_accepted_length": m["mean_accepted_length"],
        "target_forwards": s.target_forwards,
        "draft_forwards": s.draft_forwards,
        "speedup": speedup(baseline_tps, m["tokens_per_s"]),
    }


def _fmt(x: float | int | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def _metric(value: str, name: str, term: str | None = None) -> str:
    """A number and its label; `term` links the label to its glossary entry (specviz.ui.why)."""
    label = f'<a href="#sv-term-{term}">{name}</a>' if term else name
    return f'<div class="sv-metric"><b>{value}</b><span>{label}</span></div>'


def options_text(options: Mapping[str, Any], method: str | None = None, chosen: dict[str, str] | None = None) -> str:
    """The options a run was given and `method`'s others, each at its default named as such
    ("speculation_length = 4 (default)"), for its panel ("" when it has none). `chosen`: option ->
    what the method chose itself for it, shown instead ("window = 5 (auto: …)")."""

    def value(v: object) -> str:
        return "tuned" if v is None else str(v)

    defaults = {} if method is None else default_options(method)
    shown = [
        f"{k} = {chosen[k]}"
        if chosen and k in chosen
        else f"{k} = {value(v)}{' (default)' if k in defaults and v == defaults[k] else ''}"
        for k, v in {**defaults, **options}.items()
    ]
    return f" · {', '.join(shown)}" if shown else ""


def chosen_values(run: MethodRun) -> dict[str, str]:
    """option -> the value a run's method chose itself where its option left it to the method, read from
    the run's records by its registry entry (`MethodSpec.chosen`)."""
    spec = get_method(run.name)
    return spec.chosen(run.records, resolved_options(run.options, run.name)) if spec.chosen else {}


def _tree_tokens(record: IterationRecord) -> int:
    tree = record.tree()
    return len(tree.tree_tokens) if tree and tree.tree_tokens else 0


NOTHING_DRAFTED = "none drafted"  # the accepted ÷ drafted of a run that drafted nothing (not 0 of 0)


def nothing_drafted(run: MethodRun) -> str:
    """What a drafting method's panel says when its finished run drafted nothing ('' where it drafted)."""
    if get_method(run.name).family is TARGET_ALONE or run.status not in ("done", "stopped") or not run.records:
        return ""  # a target alone (specviz's or an engine's) drafts nothing by design
    if any(r.drafted or _tree_tokens(r) for r in run.records):
        return ""
    why = f": {when}" if (when := get_method(run.name).drafts_nothing_when) else ""
    return (
        f"Drafted nothing in this race{why}. Every token came from the target alone, one per pass, so there is no "
        "acceptance to show."
    )


def streamed_note(run: MethodRun) -> str:
    """What a panel says while its tokens arrive before their records ('' otherwise)."""
    if not run.streamed_tokens:
        return ""
    return (
        f"{run.streamed_tokens} tokens streamed so far, not yet coloured: vLLM reports how many drafts each step "
        "made and accepted only when the request ends, and the figures come then."
    )


def panel_html(run: MethodRun, baseline_tps: float | None, max_new_tokens: int) -> str:
    """One method's panel. Its spans carry their iteration's end time and the panel its finish time,
    so the page can replay every finished run on one clock without asking the server again. What a
    method chose (e.g. DISCO's tuned τ) comes from its records."""
    records, status = run.records, run.status
    paper = "the baseline: the target model alone, one token per pass" if run.name == BASELINE else run.paper
    m = live_metrics(records, None if run.name == BASELINE else baseline_tps)
    pearl = records[-1].pearl() if records else None
    idle = nothing_drafted(run)
    given = options_text(run.options, run.name, chosen_values(run))
    speed = "1.00×" if run.name == BASELINE and records else _fmt(m["speedup"], ".2f") + ("×" if m["speedup"] else "")
    metrics = "".join(
        [
            _metric(str(m["tokens"] or run.streamed_tokens), "tokens"),
            _metric(_fmt(m["tokens_per_s"], ".1f"), "tokens / s"),
            _metric(speed, "speedup vs AR", "speedup"),
            _metric(NOTHING_DRAFTED if idle else _fmt(m["acceptance_rate"], ".0%"), "accepted ÷ drafted", "acceptance"),
            _metric(_fmt(m["mean_accepted_length"], ".2f"), "tokens per target pass", "accepted-length"),
            _metric(f"{m['target_forwards']} / {m['draft_forwards']}", "target / draft passes"),
        ]
        # methods with modes (PEARL: pre-verify / post-verify) show the latest step's
        + ([_metric(html.escape(pearl.mode), "mode")] if pearl else [])
    )
    progress = min(100.0, 100.0 * max(int(m["tokens"] or 0), run.streamed_tokens) / max(1, max_new_tokens))
    waiting = streamed_note(run)
    message = "".join(
        f'<div class="sv-message">{html.escape(m)}</div>' for m in (run.note, run.message, idle, waiting) if m
    )
    if run.flags:  # the timing cannot be the method's: say so here, where its numbers are
        message += f'<div class="sv-flag" role="alert"><b>⚠️ {DISTURBED}.</b> {html.escape("; ".join(run.flags))}.</div>'
    text = tokens_html(run.spans, {r.iteration: r.t_end for r in records})
    if run.streamed_tokens:
        text += f'<span class="sv-streamed">{html.escape(run.streamed_text)}</span>'
    finished = status in ("done", "stopped") and records
    replay = f' data-end="{records[-1].t_end:.4f}" data-tokens="{m["tokens"]}"' if finished else ""
    return (
        f'<div class="sv-panel sv-{status}" data-method="{html.escape(run.name)}" data-label="{html.escape(run.label)}"'
        f' data-max="{max_new_tokens}"{replay}>'
        f'<div class="sv-panel-head"><h3>{html.escape(run.label)}</h3>'
        f'<span class="sv-status sv-{status}">{status}</span></div>'
        f'<div class="sv-paper">{html.escape(paper)}{html.escape(given)}</div>'
        f'<div class="sv-metrics">{metrics}</div>'
        f'<div class="sv-bar"><div style="width:{progress:.1f}%"></div></div>'
        f"{message}"
        f'<div class="sv-text">{text}</div>'
        "</div>"
    )


def race_html(race: Race) -> str:
    """All panels of a race in one block (for the API and tests; the page updates panels one by one)."""
    baseline = race.baseline_tokens_per_s()
    return "".join(panel_html(r, baseline, race.max_new_tokens) for r in race.runs)
