"""The Leaderboard tab: every method of specviz on the benchmarks the project ships, from the runs
`benchmarks/leaderboard.json` names (specviz.leaderboard). Handlers are plain functions of widget
values (tested without a server); the runs are read once, on first use."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd

from specviz.errors import SpecvizError
from specviz.leaderboard import (
    ALL,
    BENCHMARK_OF,
    SHARED,
    SUITES_BENCHMARK,
    leaderboard_rows,
    race_methods,
    shared_columns,
    shipped_race,
    summarise,
)
from specviz.plots.leaderboard import METRICS, leaderboard_figure
from specviz.ui.feedback import problem_text

if TYPE_CHECKING:
    from specviz.ui.blocks import TabContext

TAB_TITLE = "Leaderboard"
TAB_ORDER = 10  # right after the Race: how the methods compare beyond one prompt

BENCHMARK_CHOICES = [SUITES_BENCHMARK, *BENCHMARK_OF.values()]
METRIC_CHOICES = [("speedup vs the target alone", "speedup"), ("tokens per target pass", "tokens_per_pass")]
INTRO = (
    "Every figure here was measured by the benchmark runs the project ships (greedy decoding, the default "
    "pair: SmolLM2-135M-Instruct and its distilled draft, float32), not by this page. Each method is read "
    "from the run that measured it; its speedup divides the target alone's time by the method's, both "
    "measured in that same run on the same prompts, summed over the column's prompts (the ratio of tokens/s, "
    "since every output equals the target's). Below a speedup: the 25th–75th percentile of the per-prompt "
    "ratios. Methods are ranked on the suites every one of them ran; where a method's run covered others "
    "too, its figure over its own run's prompts is shown last, not for comparing. "
    "*Oracle SL* peeks at the target's answer: an upper bound for a chain of one draft, not a method. "
    "Online SD learns over a stream of requests: its figures are on the Online learning tab. "
    "To see one prompt, race it on the Race tab (its Example suite list holds these suites)."
)


OWN_RUN = "speedup (×), its own run's prompts (differ per method)"  # the table's column not to rank by


def _labels() -> dict[str, str]:
    from specviz.methods import all_methods

    return {spec.name: spec.label for spec in all_methods()}


def _columns(table: pd.DataFrame) -> tuple[list[str], str, dict[str, str]]:
    """(the benchmark's columns in the order the runs list them, the column to rank by, their headers):
    "shared" (the columns every method ran) before "all" (each method's own run) where they differ."""
    measured = [*dict.fromkeys(c for c in table["column"] if c not in (ALL, SHARED))]
    common = shared_columns(table)
    if common == measured:  # every method ran every column: its own run's total compares
        return [*measured, ALL], ALL, {ALL: "all prompts<br>(every method<br>ran them)"}
    headers = {
        SHARED: f"{' +<br>'.join(common)}<br>(every method<br>ran these)",
        ALL: "its own run's<br>prompts (differ<br>per method)",
    }
    return [*measured, SHARED, ALL], SHARED, headers


def machines() -> list[str]:
    """The machines the shipped runs were measured on (this CPU; a GPU once its runs are committed)."""
    return list(dict.fromkeys(leaderboard_rows()["machine"]))


def _selection(benchmark: str, metric: str, machine: str) -> pd.DataFrame:
    """The summary's cells of one benchmark on one machine (a choice the radios do not offer: an error)."""
    if benchmark not in BENCHMARK_CHOICES or metric not in METRICS or machine not in machines():
        raise gr_error(f"unknown choice: {benchmark!r}, {metric!r}, {machine!r}")
    summary = summarise(leaderboard_rows())
    return summary[(summary["benchmark"] == benchmark) & (summary["machine"] == machine)]


def leaderboard_view(benchmark: str, metric: str, machine: str) -> tuple[Any, pd.DataFrame, str]:
    """(heatmap, table, sources) for one benchmark, metric and machine."""
    table = _selection(benchmark, metric, machine)
    if table.empty:
        message = f"No shipped run measured {benchmark} on {machine}."
        return leaderboard_figure(table, metric, [], {}, message), pd.DataFrame(), message
    labels, (columns, rank_by, headers) = _labels(), _columns(table)
    title = f"{benchmark}, measured on {machine}"
    return (
        leaderboard_figure(table, metric, columns, labels, title, headers, rank_by, watch_methods(benchmark)),
        _table(table, labels, rank_by, headers[rank_by]),
        _sources(table, machine, labels),
    )


def phone_view(benchmark: str, metric: str, machine: str) -> str:
    """The heatmap and the table as a phone shows them (style.py's `.sv-phone-only`): one card a method, best
    first, its figure on the ranking column as its headline and each column's figure (its spread over
    prompts below a speedup) in a two-column grid, tinted as the heatmap is (blue wins, vermillion loses)."""
    table = _selection(benchmark, metric, machine)
    if table.empty:
        message = html.escape(f"No shipped run measured {benchmark} on {machine}.")
        return f'<div class="sv-lb-phone"><p>{message}</p></div>'
    labels, (columns, rank_by, headers) = _labels(), _columns(table)
    axis, fmt, neutral = METRICS[metric]
    cells = table.set_index(["method", "column"])
    ranked = table[table["column"] == rank_by].sort_values(metric, ascending=False)["method"]
    reach = max(abs(v - neutral) for v in table[metric]) or 1.0

    def words(column: str) -> str:
        return html.escape(headers.get(column, column).replace("<br>", " "))

    def figure(method: str, column: str) -> str:
        if (method, column) not in cells.index:
            return '<span class="sv-lb-none">not measured</span>'
        cell = cells.loc[(method, column)]
        value = float(cell[metric])
        spread = f"<small>{cell['p25']:.2f}–{cell['p75']:.2f}</small>" if metric == "speedup" else ""
        return f"<b>{fmt.format(value)}</b>{spread}"

    def tint(method: str, column: str) -> str:
        if (method, column) not in cells.index:
            return ""
        value = float(cells.loc[(method, column)][metric])
        rgb = "0,114,178" if value >= neutral else "213,94,0"  # Okabe-Ito blue / vermillion, as the heatmap
        return f' style="background: rgba({rgb},{0.4 * min(1.0, abs(value - neutral) / reach):.2f})"'

    cards = []
    for place, method in enumerate(ranked, 1):
        grid = "".join(
            f'<div class="sv-lb-cell"{tint(method, c)}><span>{words(c)}</span>{figure(method, c)}</div>'
            for c in columns
            if c != rank_by
        )
        cards.append(
            f'<li class="sv-lb-card"><div class="sv-lb-head"><span>{place}. {html.escape(labels.get(method, method))}'
            f'</span><span class="sv-lb-cell"{tint(method, rank_by)}>{figure(method, rank_by)}</span></div>'
            f'<div class="sv-lb-grid">{grid}</div></li>'
        )
    return (
        f'<div class="sv-lb-phone"><p><b>{html.escape(benchmark)}, measured on {html.escape(machine)}</b>: '
        f"{html.escape(axis)}"
        + (", each with its 25th–75th percentile over prompts below" if metric == "speedup" else "")
        + f". Ranked on {words(rank_by)}, each method's headline figure.</p>"
        f'<ol class="sv-lb-cards">{"".join(cards)}</ol></div>'
    )


WATCH_LABEL = "Watch a race on one prompt of a suite or category"
WATCH_INFO = "The benchmark's first prompt there, raced on a quiet machine"
# switch to the Race tab as the race is loaded (gradio runs this in the page first) ...
TO_RACE_JS = (
    "(benchmark, column) => { const tab = [...document.querySelectorAll('button[role=tab]')]"
    ".find(t => t.innerText.trim() === 'Race'); if (tab) tab.click(); return [benchmark, column]; }"
)
# ... then, once it is drawn, bring its status line into view (the button was far down the Leaderboard)
STATUS_IN_VIEW_JS = "() => { document.getElementById('sv-race-status')?.scrollIntoView({block: 'start'}); }"


def watchable(benchmark: str) -> list[str]:
    """The benchmark's columns with a readable shipped race (specviz.leaderboard.shipped_race), in the runs' order."""
    return list(watch_methods(benchmark))


def watch_methods(benchmark: str) -> dict[str, tuple[str, ...]]:
    """Each column of the benchmark with a shipped race -> the methods that race holds. A race that cannot
    be read is left out (its column offers no race): one bad file must not stop the app."""
    rows = leaderboard_rows()
    held = {}
    for column in dict.fromkeys(rows[rows["benchmark"] == benchmark]["column"]):
        path = shipped_race(benchmark, column)
        if path is None:
            continue
        try:
            held[column] = race_methods(path)
        except SpecvizError:
            continue
    return held


def watch_info(benchmark: str) -> str:
    """What the benchmark's shipped races hold: the methods raced in every one of them and the benchmark's
    methods missing from at least one (Speculative Streaming's cells lead to a race without a Streaming
    panel: say so)."""
    races = list(watch_methods(benchmark).values())
    if not races:
        return WATCH_INFO
    labels, rows = _labels(), leaderboard_rows()
    raced = [m for m in races[0] if all(m in r for r in races[1:])]
    absent = [m for m in dict.fromkeys(rows[rows["benchmark"] == benchmark]["method"]) if m not in raced]
    names = ", ".join(labels.get(m, m) for m in raced)
    missing = ", ".join(labels.get(m, m) for m in absent)
    lacking = "Not in it" if len(races) == 1 else "Not in every race"
    return f"{WATCH_INFO} by {names}." + (
        f" {lacking}: {missing} (tick them on the Race tab to race them)." if absent else ""
    )


def watch_update(benchmark: str) -> tuple[Any, Any]:
    """(the watch row, its column list and what its races hold) for a benchmark: hidden where it has no shipped race."""
    import gradio as gr

    columns = watchable(benchmark)
    return gr.update(visible=bool(columns)), gr.update(
        choices=columns, value=columns[0] if columns else None, info=watch_info(benchmark)
    )


def gr_error(message: str) -> Exception:
    """A one-line error for the page; gradio shows a gr.Error's message as HTML, and it may quote a visitor's
    value (an API call's choice), so it is escaped: text, not markup."""
    import gradio as gr

    return gr.Error(html.escape(message, quote=False))


def _table(table: pd.DataFrame, labels: dict[str, str], rank_by: str, ranked_on: str) -> pd.DataFrame:
    """One row per method, best first on `rank_by` (headed `ranked_on`), the column every method ran;
    where that is not all of each run's prompts, each run's own total last (the heatmap has each column's)."""
    ranked = table[table["column"] == rank_by].sort_values("speedup", ascending=False).set_index("method")
    out = pd.DataFrame(
        {
            "method": [labels.get(m, m) for m in ranked.index],
            f"speedup (×), {ranked_on.replace('<br>', ' ')}": [f"{v:.2f}" for v in ranked["speedup"]],
            "per prompt, 25th–75th pct.": [
                f"{a:.2f}–{b:.2f}" for a, b in zip(ranked["p25"], ranked["p75"], strict=True)
            ],
            "tokens per target pass": [f"{v:.2f}" for v in ranked["tokens_per_pass"]],
        }
    )
    own = table[table["column"] == ALL].set_index("method").loc[ranked.index]
    if rank_by != ALL:
        out[OWN_RUN] = [f"{v:.2f}" for v in own["speedup"]]
    runs = zip(own["name"], own["prompts"], strict=True)
    out["run (its prompts)"] = [f"{short_name(name)} ({int(n)} prompts)" for name, n in runs]
    return out


def short_name(name: str) -> str:
    """A run's name cut before its first colon or parenthesis ("DISCO on the default pair"), for a table cell."""
    return name.split(":")[0].split(" (")[0].strip() or name


def _sources(table: pd.DataFrame, machine: str, labels: dict[str, str]) -> str:
    """Which run each method comes from, what it ran, and the machine."""
    runs = table[table["column"] == ALL].drop_duplicates("source")
    lines = [f"**Measured on {machine}.** The runs each method is read from (the write-up's title, then what it ran):"]
    for _, run in runs.iterrows():
        methods = ", ".join(labels.get(m, m) for m in table[table["source"] == run["source"]]["method"].unique())
        lines.append(f"- **{methods}**: *{run['name']}*. {run['title']}")
    return "\n".join(lines)


def build_tab(ctx: TabContext) -> None:
    import gradio as gr

    gr.Markdown("### How every method does beyond one prompt")
    gr.Markdown(INTRO)
    try:
        found = machines()
    except (OSError, ValueError, KeyError, SpecvizError) as e:  # a missing or broken results file: say so, keep the app
        gr.Markdown(problem_text(e))
        return
    with gr.Row():
        benchmark = gr.Radio(
            BENCHMARK_CHOICES, value=BENCHMARK_CHOICES[0], label="benchmark", elem_id="sv-board-benchmark"
        )
        metric = gr.Radio(METRIC_CHOICES, value="speedup", label="figure", elem_id="sv-board-metric")
        machine = gr.Radio(found, value=found[0], label="machine", visible=len(found) > 1, elem_id="sv-board-machine")
    first = leaderboard_view(benchmark.value, metric.value, machine.value)
    # a heatmap of nine methods by six columns cannot be read at 390 px: a phone shows cards instead
    plot = gr.Plot(first[0], show_label=False, elem_id="sv-leaderboard-plot", elem_classes=["sv-desk-only"])
    table = gr.Dataframe(
        first[1],
        interactive=False,
        wrap=True,
        max_height=900,
        elem_id="sv-leaderboard-table",
        elem_classes=["sv-desk-only"],
    )
    phone = gr.HTML(
        phone_view(benchmark.value, metric.value, machine.value),
        elem_id="sv-leaderboard-phone",
        elem_classes=["sv-phone-only"],
    )
    watch_columns = watchable(benchmark.value)
    loader = ctx.show_saved  # the Race tab's saved-race loader (None if that tab failed to build)
    with gr.Row(visible=bool(watch_columns) and loader is not None, elem_id="sv-board-watch") as watch_row:
        watch_column = gr.Dropdown(
            watch_columns,
            value=watch_columns[0] if watch_columns else None,
            label=WATCH_LABEL,
            info=watch_info(benchmark.value),
            scale=3,
            elem_id="sv-board-watch-column",
        )
        watch_btn = gr.Button("Watch it on the Race tab", scale=1, elem_id="sv-board-watch-btn")
    sources = gr.Markdown(first[2], elem_id="sv-leaderboard-sources")
    if loader is not None:
        _wire_watch(loader, benchmark, watch_row, watch_column, watch_btn)
    for w in (benchmark, metric, machine):
        w.change(leaderboard_view, [benchmark, metric, machine], [plot, table, sources], show_progress="hidden")
        w.change(phone_view, [benchmark, metric, machine], phone, show_progress="hidden", api_visibility="private")


def _wire_watch(loader: tuple[Any, list], benchmark: Any, row: Any, column: Any, button: Any) -> None:
    """The watch row follows the benchmark; its button loads the column's shipped race onto the Race tab
    through the Race tab's own saved-race loader (the same checks, the same board)."""

    load, outputs = loader

    def watch(chosen: str, picked: str | None) -> Iterator[Any]:
        path = shipped_race(chosen, picked) if picked else None
        if path is None:
            raise gr_error(f"no race is shipped for {picked!r} of {chosen}")
        yield from load(str(path))

    benchmark.change(watch_update, benchmark, [row, column], show_progress="hidden", api_visibility="private")
    button.click(
        watch, [benchmark, column], outputs, js=TO_RACE_JS, concurrency_limit=1, api_visibility="private"
    ).then(None, js=STATUS_IN_VIEW_JS)
