"""The Race tab: every chosen method on one prompt, one panel each, streaming, then plots and a table."""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.errors import SpecvizError
from specviz.limits import MAX_SEED, check_temperature
from specviz.methods import BASELINE, all_methods, default_race, get_method
from specviz.plots.acceptance import TITLE as ACCEPTANCE_TITLE
from specviz.plots.acceptance import running_acceptance
from specviz.plots.accepted_histogram import TITLE as HISTOGRAM_TITLE
from specviz.plots.accepted_histogram import accepted_histogram
from specviz.plots.frame import method_order, records_frame
from specviz.plots.positions import TITLE as POSITIONS_TITLE
from specviz.plots.positions import acceptance_by_position
from specviz.plots.speculation_length import TITLE as SL_TITLE
from specviz.plots.speculation_length import speculation_length_vs_oracle
from specviz.plots.summary import summary_table
from specviz.plots.theme import empty
from specviz.plots.tokens_vs_time import TITLE as TIME_TITLE
from specviz.plots.tokens_vs_time import tokens_vs_time
from specviz.prompts import SUITES, load_suite, shuffled
from specviz.serving.limits import AppLimits, check_prompt_text
from specviz.serving.race import Race
from specviz.serving.racing import RaceSettings, method_seconds, run_race
from specviz.serving.runs import method_runner
from specviz.serving.saved import load_race, race_to_dict
from specviz.serving.stops import KeyedStop
from specviz.serving.timing import timing_flags
from specviz.ui import stepthrough
from specviz.ui.feedback import user_error
from specviz.ui.options import method_option_widgets
from specviz.ui.panels import md_text, panel_html
from specviz.ui.phone import pivot_html
from specviz.ui.style import legend_html
from specviz.ui.verdict import first_place, verdict_markdown
from specviz.ui.why import gamma_markdown, glossary_html, position_rows, why_markdown

if TYPE_CHECKING:
    from specviz.methods import MethodSpec
    from specviz.ui.blocks import TabContext

TAB_TITLE = "Race"
TAB_ORDER = 0

DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
FAILED_NOTE = "Failed (the panel says why)"  # in a finished race's status line, before the failed methods' labels
EXAMPLES_SHOWN = 40  # examples listed per suite (Shuffle draws from the whole suite)
OWN = "your prompts"  # the example suite that stands for the visitor's uploaded prompt file
OWN_SHOWN, OWN_FILE_BYTES = 500, 2**20
SUMMARY_FIRST = ["method", "speedup vs AR (×)", "place"]  # the summary's first columns, in this order
# the summary's column widths (px), in SUMMARY_FIRST's order then the table's: each fits its header's longest
# word (cells wrap between words), 1185 px in all, so the twelve columns fit the table's 1214 px at 1440 px
SUMMARY_WIDTHS: list[str | int] = [165, 90, 110, 80, 80, 100, 110, 120, 80, 80, 80, 90]
REPLAY_JS = (Path(__file__).with_name("replay.js")).read_text()  # runs in the page: no server work
# the summary as a phone shows it (specviz.ui.phone): at most this many methods a table, each column ~65 px
# (at 4, 49 px: "Confidence" and "disturbed" ran past the screen)
PHONE_METHODS = 3
TIMING_NOTE = (
    "**How it is timed.** The methods run **one after another, each alone** on this machine (after a short "
    "untimed warm-up), so no method's tokens/s suffers from sharing the processor with the others; the page "
    "redraws a few times a second from another thread. Speedup is tokens/s divided by the autoregressive "
    "run's tokens/s on the same prompt. **Replay race** then plays all finished runs on one clock, at their "
    "measured speed, so you can watch who wins."
)


def example_choices(suite: str, own: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """(label, index) of the first examples of a prompt suite, or of the visitor's own prompts."""
    if suite == OWN:
        return [(f"{i + 1}: {' '.join(text.split())[:70]}", i) for i, text in enumerate(own[:OWN_SHOWN])]
    prompts = load_suite(suite)[:EXAMPLES_SHOWN]
    return [(f"{p.id}: {' '.join(p.text.split())[:70]}", i) for i, p in enumerate(prompts)]


def example_text(suite: str, index: Any, own: tuple[str, ...] = ()) -> str:
    """The prompt an example entry stands for (the visitor's own file only through their state)."""
    i = int(index)
    return own[i] if suite == OWN else load_suite(suite)[i].text


def own_prompts(path: str | None) -> tuple[str, ...]:
    """A visitor's prompt file (specviz.prompts.load_prompt_file's formats), bounded in size."""
    import os

    from specviz.prompts import load_prompt_file

    if not path:
        return ()
    if os.path.getsize(path) > OWN_FILE_BYTES:
        raise SpecvizError(
            f"the prompt file is {os.path.getsize(path) / 2**20:.1f} MB; here it may be at most "
            f"{OWN_FILE_BYTES // 2**20} MB"
        )
    return tuple(p.text for p in load_prompt_file(Path(path)))[:OWN_SHOWN]


def settings_from_widgets(
    prompt: Any, methods: Any, method_options: Any, max_new_tokens: Any, temperature: Any, top_p: Any, seed: Any
) -> RaceSettings:
    """The one place widget values become a config (sliders send floats; the API may send anything).
    method_options: {"method.option": value} for the options changed from their defaults."""
    if prompt is not None and not isinstance(prompt, str):
        raise SpecvizError(f"the prompt must be text, got {type(prompt).__name__}")
    if not isinstance(methods, (list, tuple, type(None))) or not all(isinstance(m, str) for m in methods or ()):
        raise SpecvizError("methods must be a list of method names")
    if not isinstance(method_options, (dict, type(None))) or not all(isinstance(k, str) for k in method_options or {}):
        raise SpecvizError(
            'method options must be an object of "method.option": value, e.g. {"sssd.speculation_length": 8}'
        )
    temperature = check_temperature(temperature)  # below its floor logits / T overflows: one line, not a traceback
    try:
        return RaceSettings(
            prompt=prompt or "",
            methods=tuple(methods or ()),
            max_new_tokens=whole("max new tokens", max_new_tokens),
            options=dict(method_options or {}),
            temperature=temperature,
            top_p=float(top_p),
            seed=whole("seed", seed or 0),
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise SpecvizError(f"an option is not a number: {e}") from None


def whole(name: str, value: Any) -> int:
    """A slider's or number box's value as an int (a slider sends 8.0), refused if it is not whole (16.7 is not 16)."""
    if isinstance(value, float) and not value.is_integer():
        raise SpecvizError(f"{name} must be a whole number, got {value:g}")
    return int(value)


def race_status_line(race: Race) -> str:
    """The line above the panels while a race runs: which method runs, or where it waits."""
    for run in race.runs:
        if run.status == "running":
            return f"Running **{run.label}** alone…"
        if run.status == "waiting":  # its message: "waiting for the models: 2 runs ahead of you (about 30 s)"
            return (
                f"**{run.label}** is {run.message}. Other visitors' runs go between this race's methods; "
                "Stop leaves the line."
            )
    return "Preparing…"


def race_outputs(race: Race) -> dict[str, Any]:
    """Everything drawn from a finished race: table, figures, method choices for the SL plot."""
    labels = {r.name: r.label for r in race.runs}
    finished = race.finished()
    df = records_frame([rec for r in finished for rec in r.records], labels)
    drafting = [r for r in finished if any(rec.drafted for rec in r.records)]
    chosen = sl_opening(drafting)
    return {
        "table": speedup_first(
            summary_table({r.name: r.records for r in finished}, labels, {r.name for r in race.runs if r.flags})
        ),
        "time": tokens_vs_time(df),
        "acceptance": running_acceptance(df),
        "histogram": accepted_histogram(df),
        "positions": acceptance_by_position(position_rows(race, method_order(df))),
        "gamma": gamma_markdown(race),
        "sl_choices": gr.update(choices=[(r.label, r.name) for r in drafting], value=chosen),
        "sl": speculation_length_vs_oracle(df, chosen or ""),
        "frame": df,
    }


def speedup_first(table: Any) -> Any:
    """The summary with its speedup beside the method: the number the table is sorted by, first read."""
    first = [c for c in SUMMARY_FIRST if c in table.columns]
    return table[first + [c for c in table.columns if c not in first]]


def summary_pivot(table: Any) -> str:
    """The summary as a phone shows it (specviz.ui.phone): a row a figure in the table's order, a column a
    method under its short name, at most PHONE_METHODS methods a table; its twelve columns were cut at 390 px."""
    short = {s.label: s.short_label for s in all_methods()}
    return pivot_html(
        table.to_dict("records"), list(table.columns), short=short, elem_id="sv-summary-pivot", per_table=PHONE_METHODS
    )


def winner_words(race: Race) -> str:
    """', Vanilla SD won at 1.52× the target alone' for the status line, from the verdict's ranking: runs
    the clock cannot tell apart share first place and none of them is called the winner ('' without a
    trusted winner)."""
    disturbed = [r for r in race.runs if r.flags]
    first = first_place(race, {r.name for r in disturbed})
    if not first or len(race.finished()) < 2:
        return ""
    # a disturbed run may show a higher speedup than the winner's: the line says why it is not counted
    unranked = f" ({_count(disturbed, 'run')} with disturbed timing ⚠️ not ranked)" if disturbed else ""
    if len(first) > 1:
        names = " and ".join(f"**{r.label}** ({s.speedup:.2f}×)" for r, s in first if s.speedup is not None)
        return f": no single winner, {names} share first place (the clock cannot tell them apart){unranked}"
    run, standing = first[0]
    if run.name == BASELINE:
        return f": no method beat the target alone{unranked}"
    return f": **{run.label}** won at {standing.speedup:.2f}× the target alone{unranked}"


def _count(items: list[Any], noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"


def sl_opening(drafting: list[Any]) -> str | None:
    """The method the speculation-length plot opens on: one whose length is dynamic (its registry entry
    says so: a flat line at γ teaches nothing) and, of those, the one whose length took the most values."""
    best = max(
        drafting,
        key=lambda r: (get_method(r.name).dynamic_length, len({rec.speculation_length for rec in r.records})),
        default=None,
    )
    return best.name if best else None


def write_downloads(race: Race, df: Any, folder: Path) -> list[str]:
    """The race's records as CSV (one row per iteration) and JSON (the saved race: records, token
    texts and settings, which the Race tab loads back)."""
    csv_path, json_path = folder / "race_records.csv", folder / "race_records.json"
    df.to_csv(csv_path, index=False)
    # compact: the C encoder (an indented dump ran in Python, seconds for a large race) and a file the loader takes
    # back (a 16 MB upload, indented, came back over its 16 MB bound)
    json_path.write_text(json.dumps(race_to_dict(race), separators=(",", ":")))
    return [str(csv_path), str(json_path)]


@dataclass(frozen=True)
class RaceWidgets:
    """The Race tab's widgets, in the order the page shows them: each section's builder returns its own
    (`_settings`, `_board`, `stepthrough.build_section`, `_plots`), and the wiring reads them here."""

    specs: list[MethodSpec]  # every registered method, in the registry's order
    limits: AppLimits
    # the settings: prompt, Run and Stop, examples, methods, decoding settings, the methods' options
    prompt: gr.Textbox
    run_btn: gr.Button
    stop_btn: gr.Button
    show_rejected: gr.Checkbox
    suite: gr.Dropdown
    example: gr.Dropdown
    shuffle: gr.Button
    prompt_file: gr.File
    methods: gr.CheckboxGroup
    all_btn: gr.Button
    none_btn: gr.Button
    max_new: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    seed: gr.Number
    method_options: gr.JSON  # {"method.option": value} for the options changed from their defaults
    option_groups: dict[str, gr.Column]  # a method's option widgets, shown while it is ticked
    # the board: replay, the panels, the verdict and the summary
    replay_btn: gr.Button
    speed: gr.Radio
    status: gr.Markdown
    track: gr.HTML
    placeholder: gr.HTML
    panels: dict[str, gr.HTML]  # by registry name
    verdict: gr.Markdown
    table: gr.Dataframe
    phone_table: gr.HTML
    why: gr.Markdown
    # the step-through
    step_method: gr.Dropdown
    step_iteration: gr.Number
    step_anim: gr.Plot
    step_view: gr.HTML
    step_plot: gr.Plot
    # the plots and the files
    plot_time: gr.Plot
    plot_acceptance: gr.Plot
    plot_hist: gr.Plot
    sl_method: gr.Dropdown
    plot_sl: gr.Plot
    plot_positions: gr.Plot
    gamma: gr.Markdown
    files: gr.File
    saved: gr.File


def build_tab(ctx: TabContext) -> None:
    specs = all_methods()
    settings = _settings(specs, ctx.limits)
    board = _board(specs)
    step = stepthrough.build_section(ctx)
    ui = RaceWidgets(specs=specs, limits=ctx.limits, **settings, **board, **step, **_plots())
    _wire_race(ctx, ui)
    _wire_saved(ctx, ui)
    _wire_helpers(ctx, ui)


def _settings(specs: list[MethodSpec], limits: AppLimits) -> dict[str, Any]:
    """Prompt, Run and Stop, examples, methods and decoding settings."""
    # ticked when the page opens (the registry's default race: the baseline and one method per paper, so the first
    # race is short)
    defaults = default_race() or [s.name for s in specs if not (s.is_oracle or s.engine)]
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, max_lines=12, elem_id="sv-prompt")
            with gr.Row(equal_height=True):  # right under the prompt: a newcomer sees it without scrolling
                run_btn = gr.Button("Run race", variant="primary", elem_id="sv-run", scale=3)
                stop_btn = gr.Button("Stop", variant="stop", elem_id="sv-stop", scale=1, min_width=90)
            # the colour key under Run, the column's full width: on a phone it is on the first screen, not
            # squeezed into a thin column beside the toggle
            gr.HTML(legend_html(), elem_id="sv-legend")
            show_rejected = gr.Checkbox(True, label="Show rejected draft tokens", elem_id="sv-show-rejected")
            with gr.Row():
                suite = gr.Dropdown(list(SUITES), value="humaneval", label="Example suite", scale=1, min_width=170)
                example = gr.Dropdown(example_choices("humaneval"), value=None, label="Example", scale=3)
                shuffle = gr.Button("Shuffle", scale=0, min_width=90)
            with gr.Accordion("Your own prompts", open=False):
                prompt_file = gr.File(
                    label="A prompt file: JSON lines with a 'prompt' or 'turns' field, or plain text, one "
                    "prompt per line. Its prompts become the examples above.",
                    file_types=[".jsonl", ".json", ".txt"],
                    type="filepath",
                    elem_id="sv-prompt-file",
                )
        with gr.Column(scale=2):
            methods = gr.CheckboxGroup(
                [(s.label, s.name) for s in specs],
                value=defaults,
                label="Methods",
                elem_id="sv-methods",
                info="Every registered method. Each runs alone, one after another. All ticks specviz's own; a vLLM "
                "row starts a vLLM server first (minutes).",
            )
            with gr.Row():
                all_btn = gr.Button("All", size="sm", min_width=60)
                none_btn = gr.Button("None", size="sm", min_width=60)
            max_new = gr.Slider(
                1,
                limits.max_new_tokens,
                value=min(128, limits.max_new_tokens),
                step=1,
                label="Max new tokens",
                elem_id="sv-max-new",
            )
            with gr.Accordion("Sampling", open=False):
                temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                seed = gr.Number(0, precision=0, label="Seed", minimum=0, maximum=MAX_SEED)
    with gr.Accordion(
        "Options of the ticked methods (γ, tree size, thresholds…); each runs at its own defaults unless changed here",
        open=False,
        elem_id="sv-method-options",
    ):
        method_options, option_groups = method_option_widgets(specs, limits, methods, defaults)
    return {
        "prompt": prompt,
        "run_btn": run_btn,
        "stop_btn": stop_btn,
        "show_rejected": show_rejected,
        "suite": suite,
        "example": example,
        "shuffle": shuffle,
        "prompt_file": prompt_file,
        "methods": methods,
        "all_btn": all_btn,
        "none_btn": none_btn,
        "max_new": max_new,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "method_options": method_options,
        "option_groups": option_groups,
    }


def _board(specs: list[MethodSpec]) -> dict[str, Any]:
    """Replay, and one panel per method with the summary table below (Run, Stop and the colour key
    are under the prompt)."""
    with gr.Row(equal_height=True):
        replay_btn = gr.Button("Replay race", elem_id="sv-replay", scale=1)
        speed = gr.Radio(
            [("real speed", 1.0), ("½×", 0.5), ("¼×", 0.25), ("⅒×", 0.1)], value=1.0, label="Replay speed", scale=2
        )
    gr.Markdown(TIMING_NOTE, elem_classes="sv-note")
    status = gr.Markdown(elem_id="sv-race-status")
    track = gr.HTML("", elem_id="sv-replay-track")
    with gr.Row(elem_id="sv-board"):
        placeholder = gr.HTML('<div class="sv-empty">Pick the methods, then press <b>Run race</b>.</div>')
        panels = {s.name: gr.HTML(visible=False, elem_classes="sv-slot", min_width=340) for s in specs}
    verdict = gr.Markdown(elem_id="sv-verdict")
    table = gr.Dataframe(
        speedup_first(summary_table({})),
        label="Summary: every method on this prompt, fastest first",
        interactive=False,
        elem_id="sv-summary",
        elem_classes=["sv-desk-only"],
        wrap=True,
        column_widths=SUMMARY_WIDTHS,
    )
    phone_table = gr.HTML(elem_classes=["sv-phone-only"])  # the summary pivoted: a phone shows it instead
    why = gr.Markdown(elem_id="sv-why")
    with gr.Accordion("What the numbers mean", open=False, elem_id="sv-glossary"):
        gr.HTML(glossary_html())
    return {
        "replay_btn": replay_btn,
        "speed": speed,
        "status": status,
        "track": track,
        "placeholder": placeholder,
        "panels": panels,
        "verdict": verdict,
        "table": table,
        "phone_table": phone_table,
        "why": why,
    }


def _plots() -> dict[str, Any]:
    """The race's plots, with titled placeholder figures until the first race: they say what will
    appear, and the page fetches plotly.js now instead of leaving the plots blank after the race."""

    def blank(title: str) -> Any:
        return empty(title, "Run a race to see this plot.")

    with gr.Row():
        plot_time = gr.Plot(blank(TIME_TITLE), label="Tokens vs time", elem_id="sv-plot-time", show_label=False)
        plot_acceptance = gr.Plot(
            blank(ACCEPTANCE_TITLE), label="Running acceptance rate", elem_id="sv-plot-acceptance", show_label=False
        )
    with gr.Row():
        plot_hist = gr.Plot(
            blank(HISTOGRAM_TITLE), label="Accepted tokens per iteration", elem_id="sv-plot-histogram", show_label=False
        )
        with gr.Column():
            sl_method = gr.Dropdown([], label="Method for the speculation-length plot")
            plot_sl = gr.Plot(
                blank(SL_TITLE), label="Speculation length: chosen vs oracle", elem_id="sv-plot-sl", show_label=False
            )
    with gr.Row():
        plot_positions = gr.Plot(
            blank(POSITIONS_TITLE), label="Acceptance per draft position", elem_id="sv-plot-positions", show_label=False
        )
        gamma = gr.Markdown(elem_id="sv-gamma")
    with gr.Row():
        files = gr.File(label="Download the records (CSV, JSON)", file_count="multiple", interactive=False, scale=2)
        saved = gr.File(
            label="Load a saved race (race_records.json, recorded here or elsewhere)",
            file_types=[".json"],
            type="filepath",
            elem_id="sv-load-race",
            scale=1,
        )
    return {
        "plot_time": plot_time,
        "plot_acceptance": plot_acceptance,
        "plot_hist": plot_hist,
        "sl_method": sl_method,
        "plot_sl": plot_sl,
        "plot_positions": plot_positions,
        "gamma": gamma,
        "files": files,
        "saved": saved,
    }


def _wire_race(ctx: TabContext, ui: RaceWidgets) -> None:
    """Run race streams panel updates while the methods run, then the table, plots and downloads; Stop
    ends it; the summary's phone form follows the summary."""
    stop_state = gr.State(KeyedStop())
    # stateful methods' learners (OSD's draft copies), per visitor and pair; filled only where the models
    # run (on ZeroGPU a worker, so here it stays empty: see run_race)
    sessions_state = ctx.state({})
    inputs = [
        ctx.pair,
        ui.prompt,
        ui.methods,
        ui.method_options,
        ui.max_new,
        ui.temperature,
        ui.top_p,
        ui.seed,
        stop_state,
        sessions_state,
    ]
    ui.run_btn.click(
        _race_handler(ctx, ui, sessions_state),
        inputs,
        [*board_outputs(ctx, ui), sessions_state],
        api_name="race",
        **ctx.models_queue(),  # the race takes turns per method
        show_progress_on=[ui.status],
    )
    ui.stop_btn.click(KeyedStop.set, stop_state, None, queue=False, api_name="stop")
    ui.table.change(
        summary_pivot, ui.table, ui.phone_table, queue=False, show_progress="hidden", api_visibility="private"
    )


def _race_handler(ctx: TabContext, ui: RaceWidgets, sessions_state: Any) -> Any:
    """The Run race event: the widgets checked into settings, then the race streamed onto the board."""
    runner = ctx.gpu(method_runner(ctx.load_pair), duration=method_seconds)  # one method's run, where the GPU is

    def race(
        pair_name: str,
        prompt: Any,
        methods: Any,
        method_options: Any,
        max_new: Any,
        temperature: Any,
        top_p: Any,
        seed: Any,
        stop: KeyedStop,
        sessions: dict,
        request: gr.Request | None = None,
    ) -> Iterator[dict[Any, Any]]:
        try:
            settings = settings_from_widgets(prompt, methods, method_options, max_new, temperature, top_p, seed)
            settings.check(ctx.limits)
            check_prompt_text(settings.prompt, ctx.limits)  # a megabyte prompt is refused, never tokenised
            pair, notice = ctx.resolve(pair_name)
        except gr.Error:  # already said on the page
            raise
        except Exception as e:  # a user's mistake, or a fault: one message, logged once
            raise user_error(e) from e
        if notice:
            gr.Warning(notice)
        stop.clear()
        head = f"⚠️ {notice}\n\n" if notice else ""
        visitor = getattr(request, "session_hash", None)
        try:
            with ctx.left.watching(visitor, stop):  # a closed tab stops the race
                races = run_race(pair, settings, sessions, stop, ctx.limits, runner=runner, forks=ctx.forks)
                race = yield from stream_board(ui, races, head)
                # returned: the state's time-to-live restarts
                yield from finished_board(ctx, ui, race, finished_status(race, stop, head), {sessions_state: sessions})
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e

    return race


def stream_board(ui: RaceWidgets, races: Iterable[Race], head: str) -> Generator[dict[Any, Any], None, Race]:
    """The board's updates while `races` (run_race's snapshots) runs: the status line and the panels that
    changed; the first shows this race's panels and hides the others. Returns the last snapshot (the
    visitor's race state gets it once it ended, `finished_board`: the tabs that follow it redraw once)."""
    race: Race | None = None
    drawn: dict[str, tuple] = {}
    first = True
    for race in races:
        update = {ui.status: f"{head}{race_status_line(race)}", **panel_updates(ui, race, drawn)}
        if first:  # show this race's panels, hide the others
            first = False
            chosen = {r.name for r in race.runs}
            update.update({ui.placeholder: gr.update(visible=False), ui.track: ""})
            for name, panel in ui.panels.items():
                update[panel] = gr.update(value=update.get(panel), visible=name in chosen)
        yield update
    assert race is not None, "run_race yields the race once before its first method runs"
    return race


def panel_updates(ui: RaceWidgets, race: Race, drawn: dict[str, tuple]) -> dict:
    """New HTML for the panels whose run changed since last drawn (only those travel to the page)."""
    baseline, out = race.baseline_tokens_per_s(), {}
    for run in race.runs:
        key = (run.status, len(run.records), run.streamed_tokens, run.message, baseline is not None, tuple(run.flags))
        if drawn.get(run.name) != key:
            drawn[run.name] = key
            out[ui.panels[run.name]] = panel_html(run, baseline, race.max_new_tokens)
    return out


def finished_status(race: Race, stop: KeyedStop, head: str) -> str:
    """The status line of a finished race: who won, whether Stop ended it, which methods failed."""
    stopped = " Stopped by the Stop button." if stop.is_set() else ""
    failures = [r.label for r in race.runs if r.status == "error"]
    failed = f" {FAILED_NOTE}: {', '.join(failures)}." if failures else ""
    return (
        f"{head}Race finished{winner_words(race)}.{stopped}{failed} "
        "Press **Replay race** to watch the runs on one clock."
    )


def board_outputs(ctx: TabContext, ui: RaceWidgets) -> list:
    """Everything a finished (or loaded) race redraws, in one order for every event that draws it."""
    return [
        ui.status,
        ui.track,
        ui.placeholder,
        *ui.panels.values(),
        ui.verdict,
        ui.table,
        ui.why,
        ctx.race,
        ui.plot_time,
        ui.plot_acceptance,
        ui.plot_hist,
        ui.plot_positions,
        ui.gamma,
        ui.sl_method,
        ui.plot_sl,
        ui.files,
        ui.step_method,
        ui.step_iteration,
        ui.step_view,
        ui.step_plot,
        ui.step_anim,
    ]


def finished_board(ctx: TabContext, ui: RaceWidgets, race: Race, status: str, more: dict, reveal: bool = False) -> Any:
    """The board, table, plots and downloads of a finished race; `reveal`: a loaded race, whose
    panels are shown (and the others hidden) here rather than when it started."""
    flags = timing_flags(race)  # a loaded race is checked here; a raced one was as it went
    race = race.flagged(flags)
    out = race_outputs(race)
    baseline = race.baseline_tokens_per_s()
    html_of = {r.name: panel_html(r, baseline, race.max_new_tokens) for r in race.runs}
    board: dict[Any, Any] = {ui.panels[name]: value for name, value in html_of.items()}  # component -> value or update
    if reveal:
        board = {
            ui.placeholder: gr.update(visible=False),
            ui.track: "",
            **{panel: gr.update(value=html_of.get(name), visible=name in html_of) for name, panel in ui.panels.items()},
        }
    with tempfile.TemporaryDirectory(prefix="specviz-race-") as folder:  # gradio copies the files to its cache
        yield {
            ui.status: status,
            **board,
            ui.verdict: verdict_markdown(race, flags),
            ui.table: out["table"],
            ui.why: why_markdown(race),
            ctx.race: race,  # the race as it ended: the tabs that follow the race (Theory) see it end
            ui.plot_time: out["time"],
            ui.plot_acceptance: out["acceptance"],
            ui.plot_hist: out["histogram"],
            ui.plot_positions: out["positions"],
            ui.gamma: out["gamma"],
            ui.sl_method: out["sl_choices"],
            ui.plot_sl: out["sl"],
            ui.files: write_downloads(race, out["frame"], Path(folder)) if race.finished() else None,
            ui.step_method: gr.update(choices=stepthrough.method_choices(race), value=None),
            ui.step_iteration: 1,
            ui.step_view: "<p>Pick a method to step through its iterations.</p>" if race.finished() else "",
            ui.step_plot: None,  # the last race's iteration is not this one's
            ui.step_anim: None,
            **more,
        }


def _wire_saved(ctx: TabContext, ui: RaceWidgets) -> None:
    """Load a saved race (the JSON download, from here or elsewhere) onto the board."""

    def load_saved(path: str | None) -> Iterator[dict[Any, Any]]:
        """Show a race saved by the download below (here or on another machine), ready to replay."""
        if not path:
            return
        try:  # the board too: whatever a file holds, the page shows one message, never a traceback
            race = load_race(path, tuple(ui.panels), ctx.limits.methods_per_race, limits=ctx.limits)
            status = (
                f"Loaded a saved race: **{md_text(race.pair)}**, {len(race.runs)} methods, timed where it "
                "was recorded. "
                "Press **Replay race** to watch it on one clock."
            )
            # the upload box emptied: ready for the next file
            yield from finished_board(ctx, ui, race, status, {ui.saved: None}, reveal=True)
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e

    # one saved race parses at a time (a valid 16 MB file takes seconds of CPU and hundreds of MB at its peak)
    outputs = [*board_outputs(ctx, ui), ui.saved]
    ui.saved.upload(load_saved, ui.saved, outputs, api_name="load_race", concurrency_limit=1)
    ctx.show_saved = (load_saved, outputs)  # for the tabs that put a saved race on this board


def _wire_helpers(ctx: TabContext, ui: RaceWidgets) -> None:
    """Replay, the speculation-length plot's method, method shortcuts, examples, the rejected-token toggle."""
    ui.replay_btn.click(None, ui.speed, None, js=REPLAY_JS)

    def sl_plot(race: Race | None, method: str | None) -> Any:
        if race is None:
            return gr.skip()
        labels = {r.name: r.label for r in race.runs}
        df = records_frame([rec for r in race.finished() for rec in r.records], labels)
        return speculation_length_vs_oracle(df, method or "")

    ui.sl_method.input(sl_plot, [ctx.race, ui.sl_method], ui.plot_sl, api_visibility="private")

    # the slider's number box sets a number typed outside its range to the nearest bound without a word; the
    # release event sends the typed number first, so gradio's own range check says so on the page
    ui.max_new.release(lambda n: None, ui.max_new, None, api_visibility="private", show_progress="hidden")
    ui.all_btn.click(
        lambda: [s.name for s in ui.specs if not (s.is_oracle or s.engine)], None, ui.methods, api_visibility="private"
    )
    ui.none_btn.click(lambda: [], None, ui.methods, api_visibility="private")
    own = ctx.state(())  # the visitor's uploaded prompts (texts); a suite name never reaches the file system

    def load_own(path: str | None) -> tuple[tuple[str, ...], Any, Any]:
        try:
            texts = own_prompts(path)
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e
        if not texts:
            return (
                (),
                gr.update(choices=list(SUITES), value="humaneval"),
                gr.update(choices=example_choices("humaneval"), value=None),
            )
        return (
            texts,
            gr.update(choices=[*SUITES, OWN], value=OWN),
            gr.update(choices=example_choices(OWN, texts), value=0),
        )

    def pick(suite: str, index: Any, texts: tuple[str, ...]) -> Any:
        try:
            return example_text(suite, index, texts) if index is not None else gr.skip()
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e

    def shuffle(suite: str, texts: tuple[str, ...]) -> str:
        try:
            return random.choice(texts) if suite == OWN and texts else shuffled(suite, random.randrange(1 << 30)).text
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e

    ui.prompt_file.upload(load_own, ui.prompt_file, [own, ui.suite, ui.example], api_visibility="private").then(
        pick, [ui.suite, ui.example, own], ui.prompt, api_visibility="private"
    )
    ui.suite.input(
        lambda s, texts: gr.update(choices=example_choices(s, texts), value=None),
        [ui.suite, own],
        ui.example,
        api_visibility="private",
    )
    ui.example.input(pick, [ui.suite, ui.example, own], ui.prompt, api_visibility="private")
    ui.shuffle.click(shuffle, [ui.suite, own], ui.prompt, api_visibility="private")
    ui.show_rejected.change(
        None,
        ui.show_rejected,
        None,
        js="(show) => { document.body.classList.toggle('sv-hide-rejected', !show); return []; }",
    )
