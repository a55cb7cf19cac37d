"""The PEARL tab: the target alone, vanilla SD and PEARL on one prompt, drawn as a timeline of which
model runs when (mutual waiting in grey), with PEARL's mode (pre-verify / post-verify) at every step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.errors import SpecvizError
from specviz.serving.compare import Row, Timed, compare_rows
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import AppLimits, check_prompt_text, prompt_ids
from specviz.serving.racing import DEFAULT_LIMITS
from specviz.serving.stops import KeyedStop, Signal, StopKey, stop_key_for
from specviz.text import visible
from specviz.ui.feedback import user_error
from specviz.ui.phone import pivot_html
from specviz.ui.tab_timing import flagged_rows, flags_markdown

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair
    from specviz.ui.blocks import TabContext

TAB_TITLE = "PEARL: parallel drafting"
TAB_ORDER = 50
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
INTRO = (
    "**PEARL** (Liu et al. 2024) runs the draft and the target at the same time. *Pre-verify*: while the "
    "draft writes γ tokens, the target reads the prefix and checks the first one; a wrong first token "
    "restarts drafting at once. *Post-verify*: while the target verifies, the draft keeps drafting as if "
    "everything will be accepted; if it is, the next verification starts immediately, so the draft length "
    "grows while the draft is right. γ defaults to round(T_target / T_draft), measured (Theorem 1; PEARL's c, the "
    "inverse of the draft cost c of the Race and Theory tabs), within the Race's limit. The target alone runs "
    "too (every speedup divides by it), and vanilla SD at its own default γ, not PEARL's. Greedy decoding: "
    "every method emits the same text. *Threads* runs the two models truly at once (a thread each); on a "
    "machine with few shared cores they slow each other down, so the *parallel-ideal* time (each step's "
    "shorter job hidden behind the longer one) is shown too. Tokens: · a space, ⏎ a line break, ∅ none."
)


# the tables' columns (shown before the first run too)
# the key numbers right after the method (a phone shows the table pivoted: specviz.ui.phone)
ROW_COLUMNS = [
    "method",
    "× target alone",
    "ms/token",
    "ms/token, parallel-ideal",
    "draft idle",
    "target idle",
    "steps",
    "tokens",
    "runs",
]
STEP_COLUMNS = ["step", "mode", "verified drafts", "accepted", "emitted", "dropped / drafted ahead", "in parallel"]


def tab_window(pair: ModelPair, window: int, limits: AppLimits = DEFAULT_LIMITS) -> tuple[int, str]:
    """PEARL's γ for this tab and what to say of it: `window` (0: Theorem 1's, measured), within the
    Race's limit on draft tokens per iteration; a larger one asked for is refused."""
    from specviz.methods.pearl_lanes import optimal_window

    most = limits.speculation_length
    if window > most:
        raise SpecvizError(
            f"window γ = {window}: the Race drafts at most {most} tokens per iteration; choose 1 to {most}, "
            "or 0 for Theorem 1's window"
        )
    if window:
        return window, f"γ = {window}, chosen"
    theorem = optimal_window(pair)
    if theorem > most:
        return most, f"γ = {most}: Theorem 1's window, {theorem}, is above the Race's limit of {most}"
    return theorem, f"γ = {theorem}, Theorem 1's window"


def compare(
    pair: ModelPair,
    prompt: str,
    window: int,
    concurrent: bool,
    max_new_tokens: int,
    repeats: int = 3,
    limits: AppLimits = DEFAULT_LIMITS,
    stop: Signal | None = None,
) -> dict[str, Any]:
    """Run the target alone, vanilla (its own default γ) and PEARL (γ: `tab_window`) on one prompt,
    each warmed up and timed `repeats` times (the median run is shown); rows, per-step modes, the
    records and the window's note. PEARL's target lane runs on a thread of the comparison's own, warmed
    up by each method's untimed warm-up run (`generate_median`). `stop` (anything with `is_set()`):
    once set, no further method runs (`stopped`: True)."""
    from specviz.methods import BASELINE, get_method

    gamma, note = tab_window(pair, int(window), limits)
    ids = prompt_ids(pair, prompt, limits)
    vanilla = get_method("vanilla").make_options().speculation_length
    rows = [
        Row("target alone", BASELINE),
        Row(f"vanilla (γ={vanilla}, its default)", "vanilla"),
        Row(f"PEARL (γ={gamma})", "pearl", {"window": gamma, "concurrent": bool(concurrent)}),
    ]
    out = compare_rows(pair, ids, rows, max_new_tokens, repeats, stop)
    alone = out.first(BASELINE)
    pearl = out.first("pearl")
    return {
        "rows": [table_row(t, alone.ms_per_token if alone else None, repeats) for t in out.timed],
        "records": {t.row.label: list(t.result.records) for t in out.timed},  # the timeline is drawn where the page is
        "steps": step_rows(pair, pearl.result.records) if pearl else [],
        "window": note,
        "stopped": out.stopped,
        "flags": out.flags,  # the Race's checks (specviz.serving.compare)
    }


def table_row(timed: Timed, alone_ms: float | None, repeats: int) -> dict[str, Any]:
    """One method's line of the table (ROW_COLUMNS); `alone_ms` the target alone's ms per token."""
    from specviz.methods import BASELINE
    from specviz.plots.timeline import idle_fractions

    s, records, ms = timed.result.summary, timed.result.records, timed.ms_per_token
    idle = idle_fractions(records)
    ideal = sum(p.ideal_s if (p := r.pearl()) else r.t_end - r.t_start for r in records)
    return {
        "method": timed.row.label,
        "× target alone": f"{alone_ms / ms:.2f}×" if alone_ms else "–",
        "ms/token": round(ms, 1),
        "ms/token, parallel-ideal": round(1e3 * ideal / max(1, s.new_tokens), 1),
        "draft idle": f"{idle['draft']:.0%}" if timed.row.method != BASELINE else "–",
        "target idle": f"{idle['target']:.0%}",
        "steps": s.iterations,
        "tokens": s.new_tokens,
        "runs": repeats,
    }


def step_rows(pair: ModelPair, records: Sequence[Any]) -> list[dict[str, Any]]:
    """PEARL's steps (STEP_COLUMNS): each step's mode, its drafts and what it emitted, as text."""

    def shown(ids: Any) -> str:
        return visible(pair.tokenizer.decode(list(ids or ())))  # whitespace as ·, ⏎, ⇥; nothing as ∅

    return [
        {
            "step": r.iteration + 1,  # counted from 1, as everywhere in the app
            "mode": p.mode,
            "verified drafts": shown(r.drafted),
            "accepted": r.accepted,
            "emitted": shown(r.emitted),
            "dropped / drafted ahead": shown(p.dropped or p.drafted_ahead),
            "in parallel": any(phase.parallel for phase in p.phases),
        }
        for r in records
        if (p := r.pearl())
    ]


def build_tab(ctx: TabContext) -> None:
    """The tab: the prompt and PEARL's settings, Run and Stop, the table, the timeline and PEARL's steps."""
    limits = getattr(ctx, "limits", DEFAULT_LIMITS)
    gr.Markdown(INTRO)
    prompt, window, concurrent, max_new, repeats = _settings(limits)
    with gr.Row():
        run_btn = gr.Button("Run the target alone, vanilla and PEARL", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    stop_state = gr.State(KeyedStop())
    status, table, phone_table, plot, steps = _results()
    run = _run_handler(ctx, limits)
    run_btn.click(
        run,
        [ctx.pair, prompt, window, concurrent, max_new, repeats, stop_state],
        [status, table, plot, steps],
        api_name="pearl",
        **ctx.models_queue(),
    )
    stop_btn.click(KeyedStop.set, stop_state, None, queue=False, api_name="stop_pearl")
    table.change(
        lambda df: pivot_html(df.to_dict("records"), ROW_COLUMNS, elem_id="sv-pearl-pivot"),
        table,
        phone_table,
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )


def _settings(limits: AppLimits) -> tuple[Any, Any, Any, Any, Any]:
    """The prompt and PEARL's widgets: (prompt, window γ, threads, max new tokens, timed runs)."""
    with gr.Row():
        prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, scale=3)
        with gr.Column(scale=2):
            most = limits.speculation_length
            window = gr.Slider(
                0, most, value=0, step=1, label=f"Window γ, at most {most} (0: round(T_target / T_draft), measured)"
            )
            concurrent = gr.Checkbox(True, label="Threads: draft and target truly at the same time")
            max_new = gr.Slider(8, 256, value=64, step=8, label="Max new tokens")
            repeats = gr.Slider(
                1, 5, value=3, step=1, label="Timed runs of each (after a warm-up; the median is shown)"
            )
    return prompt, window, concurrent, max_new, repeats


def _results() -> tuple[Any, Any, Any, Any, Any]:
    """What a comparison shows: (status, table, the table pivoted for a phone, timeline, PEARL's steps)."""
    status = gr.Markdown(elem_id="sv-pearl-status")
    table = gr.Dataframe(
        headers=ROW_COLUMNS,
        label="This prompt",
        interactive=False,
        wrap=True,
        elem_id="sv-pearl-table",
        elem_classes=["sv-desk-only"],
    )
    phone_table = gr.HTML(elem_classes=["sv-phone-only"])  # the table pivoted: a phone shows it instead
    plot = gr.Plot(label="Timeline: which model runs when", show_label=False)
    steps = gr.Dataframe(
        headers=STEP_COLUMNS,
        label="PEARL step by step",
        interactive=False,
        wrap=True,  # a long draft wraps inside its column: every column stays on the page
        # each column as wide as its longest word at a phone's width ("accepted", "parallel"): at 5% and 8% of
        # 324 px the headers broke one letter a line; a desktop's 1300 px leaves the drafts room at any of these
        column_widths=["9%", "12%", "17%", "16%", "14%", "15%", "17%"],
        elem_id="sv-pearl-steps",
    )
    return status, table, phone_table, plot, steps


def _run_handler(ctx: TabContext, limits: AppLimits) -> Callable[..., tuple[Any, ...]]:
    """Run's handler: times the three methods in a model call and draws the table, the timeline and the steps."""
    import pandas as pd

    from specviz.plots.timeline import timeline

    # the model call (plain data in and out): the target alone, vanilla and PEARL, each a warm-up and k timed runs of
    # n tokens; once the stop `key` is requested it ends after the method being timed
    compared = ctx.run_models(
        lambda pair_name, text, w, conc, n, k, key: compare(
            ctx.load_pair(pair_name), text, w, conc, n, k, limits, stop=StopKey(key)
        ),
        seconds=lambda pair_name, text, w, conc, n, k, key: gpu_seconds(3 * (k + 1) * n),
    )

    def run(
        pair_name: str,
        text: str,
        w: float,
        conc: bool,
        n: float,
        k: float,
        stop: KeyedStop | None = None,
        request: gr.Request | None = None,
    ) -> tuple[str, Any, Any, Any]:
        try:
            check_prompt_text(text, limits)  # before it reaches the models' line to be tokenised there
            with stop_key_for(stop, request, ctx.left) as key:  # Stop, a closed page or a cancelled request end it
                out = compared(pair_name, text, int(w), bool(conc), int(n), int(k), key)
        except gr.Error:  # already said on the page
            raise
        except Exception as e:  # a user's mistake, or a fault: one message, logged once
            raise user_error(e) from e
        note = flags_markdown(out["flags"]) + (
            f"**Stopped** after {len(out['rows'])} of 3 methods." if out["stopped"] else ""
        )
        title = f"Which model runs when ({out['window']}): busy spans per lane, waiting in grey"
        figure = timeline(out["records"], title) if out["records"] else None
        shown = pd.DataFrame(flagged_rows(out["rows"], out["flags"]), columns=ROW_COLUMNS)
        return note, shown, figure, pd.DataFrame(out["steps"])

    return run
