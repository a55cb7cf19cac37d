"""The DISCO tab: run DISCO at a chosen tau / SL_max next to the target alone, the oracle and the
best static length, and see each DISCO decision against the oracle speculation length, plus the
oracle SL histogram. Stop ends the comparison after the method being timed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.errors import SpecvizError
from specviz.limits import check_count
from specviz.methods import BASELINE
from specviz.metrics import tested
from specviz.serving.compare import Row, Timed, compare_rows
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import check_prompt_text, prompt_ids
from specviz.serving.stops import KeyedStop, Signal, StopKey, stop_key_for
from specviz.ui.feedback import user_error
from specviz.ui.phone import pivot_html
from specviz.ui.tab_timing import flagged_rows, flags_markdown

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair
    from specviz.ui.blocks import TabContext

TAB_TITLE = "DISCO: dynamic speculation length"
TAB_ORDER = 40
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
INTRO = (
    "**DISCO** (Mamou et al. 2024) lets a tiny classifier decide, after every draft token, whether to keep "
    "drafting: it reads the top-10 draft probabilities, their entropy and the token's index, and drafting "
    "continues while its score C_i ≥ τ and fewer than SL_max tokens were drafted. The **oracle** (an upper "
    "bound that peeks at the target's greedy output) drafts exactly as many tokens as will be accepted; "
    "**SL-opt** is vanilla speculative decoding at the best fixed speculation length (the one fastest on the "
    "classifier's validation text). Greedy decoding; every method emits the same text. The first row is the "
    "target alone (autoregressive decoding): the speedups are against it. α and the acceptance rate are the "
    "Race tab's: accepted ÷ tested drafts, and accepted ÷ drafted (the untested drafts after a rejection "
    "included)."
)
DEFAULT_TOKENS, DEFAULT_REPEATS = 32, 3  # 4 methods x (a warm-up and 3 timed runs): well under a minute on 2 free cores


AR_LABEL = "Autoregressive (target alone)"
# the Race tab's names and definitions (its summary table and glossary, specviz.ui.why)
ALPHA = "α (accepted ÷ tested)"
ACCEPTANCE_RATE = "acceptance rate (%)"
# the key numbers right after the method (a phone shows the table pivoted: specviz.ui.phone)
HEADERS = [
    "method",
    "speedup vs AR (×)",
    "ms/token",
    ALPHA,
    ACCEPTANCE_RATE,
    "mean SL",
    "mean |SL − oracle|",
    "iterations",
    "tokens",
    "runs (median shown)",
]


def disco_vs_oracle(
    pair: ModelPair,
    prompt: str | list[int],
    threshold: float | None,
    sl_max: int | None,
    max_new_tokens: int,
    repeats: int = 3,
    stop: Signal | None = None,
) -> dict[str, Any]:
    """Run the target alone, DISCO, SL-opt and the oracle on one prompt, each warmed up and timed
    `repeats` times (the median run is shown); return the table rows, the iterations and the card.
    `stop` (anything with `is_set()`): once set, no further method runs (`stopped`: True)."""
    import specviz
    from specviz.models.disco import classifier_for

    clf = classifier_for(pair.name)
    sl_opt = int(clf.card.get("static_sl_opt", 4))
    rows = [
        Row(AR_LABEL, BASELINE),
        Row("DISCO", "disco", {"threshold": threshold, "max_speculation_length": sl_max}),
        Row(sl_opt_label(sl_opt), "vanilla", {"speculation_length": sl_opt}),
        Row("Oracle (upper bound)", "oracle"),
    ]
    ids = specviz.encode_prompt(pair, prompt)
    out = compare_rows(pair, ids, rows, max_new_tokens, repeats, stop)
    alone = out.first(BASELINE)
    if alone is None:
        return {"rows": [], "iterations": [], "classifier": clf, "stopped": True, "flags": {}}
    iterations = [
        {
            "method": t.row.label,
            "suite": "this prompt",
            "iteration": r.iteration + 1,  # counted from 1, as everywhere in the app
            "speculation_length": r.speculation_length,
            "oracle_sl": r.oracle_sl,
        }
        for t in out.timed
        if t.row.method != BASELINE
        for r in t.result.records
    ]
    return {
        "rows": [table_row(t, repeats, alone.ms_per_token) for t in out.timed],
        "iterations": iterations,
        "classifier": clf,
        "stopped": out.stopped,
        "flags": out.flags,  # the Race's checks (specviz.serving.compare)
    }


def phone_html(rows: list[dict[str, Any]]) -> str:
    """The table as a phone shows it: one row a figure, one column a method (the target alone's name shortened)."""
    short = {label: label.replace(AR_LABEL, "target alone") for label in (r["method"] for r in rows)}
    return pivot_html(rows, HEADERS, short=short, elem_id="sv-disco-pivot")


def sl_opt_label(sl_opt: int) -> str:
    """SL-opt's row, saying what it is: vanilla SD at the static length fastest on the classifier's
    validation text (its card's static_sl_opt)."""
    return f"SL-opt = {sl_opt} (best fixed length)"


def table_row(timed: Timed, repeats: int, ar_ms: float) -> dict[str, Any]:
    """One method's line of the table; the drafting columns are empty for the target alone. α and the
    acceptance rate as the Race tab defines them (specviz.metrics): accepted ÷ tested drafts, and
    accepted ÷ drafted (the untested drafts after a rejection included) in %."""
    s, records, ms = timed.result.summary, timed.result.records, timed.ms_per_token
    sl = [r.speculation_length for r in records]
    drafts = s.drafted > 0
    tested_drafts = sum(tested(r) for r in records)
    gaps = [abs(r.speculation_length - r.oracle_sl) for r in records if r.oracle_sl is not None]
    return {
        "method": timed.row.label,
        "speedup vs AR (×)": round(ar_ms / ms, 2),
        "ms/token": round(ms, 1),
        ALPHA: round(s.accepted / tested_drafts, 2) if tested_drafts else None,
        ACCEPTANCE_RATE: round(100 * s.accepted / s.drafted, 1) if drafts else None,
        "mean SL": round(sum(sl) / len(sl), 2) if drafts else None,
        "mean |SL − oracle|": round(sum(gaps) / len(gaps), 2) if drafts and gaps else None,
        "iterations": s.iterations,
        "tokens": s.new_tokens,
        "runs (median shown)": repeats,
    }


def card_markdown(clf: Any) -> str:
    card, test = clf.card, clf.card.get("test", {})
    lines = [
        (
            f"Classifier **{clf.name}**{' (borrowed from another pair)' if card.get('borrowed') else ''}: "
            f"tuned τ = {clf.threshold}, SL_max = {clf.max_speculation_length}, "
            f"SL-opt (best fixed speculation length) = {card.get('static_sl_opt', '?')}."
        )
    ]
    if test:
        lines.append(
            f"Test F1 (accepted class): DISCO {test['f1_accept_disco']:.3f} vs best static SL "
            f"{test['f1_accept_static_best']:.3f}. One decision costs ~{card.get('decision_cost_us', 0):.0f} µs."
        )
    return " ".join(lines)


def tuned_values(pair_name: str | None) -> tuple[float, int]:
    """The τ and SL_max the pair's classifier was tuned to (the paper's defaults if none is shipped)."""
    from specviz.models.disco import classifier_for

    try:
        clf = classifier_for(pair_name or "default")
    except SpecvizError:
        return 0.5, 8
    return clf.threshold, clf.max_speculation_length


def build_tab(ctx: TabContext) -> None:
    """The tab: the prompt and DISCO's settings, Run and Stop, the classifier's card, the table and the
    two figures."""
    gr.Markdown(INTRO)
    prompt, tuned, tau, sl_max, max_new, repeats = _settings(ctx)
    with gr.Row():
        run_btn = gr.Button("Run DISCO vs oracle", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    stop_state = gr.State(KeyedStop())
    card = gr.Markdown()
    table = gr.Dataframe(
        label="This prompt",
        interactive=False,
        headers=HEADERS,
        wrap=True,
        elem_id="sv-disco-table",
        elem_classes=["sv-desk-only"],
    )
    phone_table = gr.HTML(elem_classes=["sv-phone-only"])  # the table pivoted: a phone shows it instead
    with gr.Row():
        plot_sl = gr.Plot(label="Chosen vs oracle speculation length", show_label=False)
        plot_hist = gr.Plot(label="Oracle speculation length histogram", show_label=False)
    run = _run_handler(ctx)
    tuned.change(show_tuned, [ctx.pair, tuned], [tau, sl_max], api_visibility="private")
    run_btn.click(
        run,
        [ctx.pair, prompt, tuned, tau, sl_max, max_new, repeats, stop_state],
        [card, table, plot_sl, plot_hist, tau, sl_max],
        api_name="disco",
        **ctx.models_queue(),
    )
    stop_btn.click(KeyedStop.set, stop_state, None, queue=False, api_name="stop_disco")
    table.change(
        lambda df: phone_html(df.to_dict("records")),
        table,
        phone_table,
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )


def _settings(ctx: TabContext) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The prompt and DISCO's widgets: (prompt, use tuned values, τ, SL_max, max new tokens, timed runs)."""
    with gr.Row():
        prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, scale=3)
        with gr.Column(scale=2):
            tuned = gr.Checkbox(True, label="Use the classifier's tuned τ and SL_max (untick to set them below)")
            # the sliders show the values in use: the tuned ones (locked) until the box is unticked
            tau_value, sl_value = tuned_values(ctx.pair.value)
            limits = ctx.limits
            most_sl, most_tokens = max(2, min(16, limits.speculation_length)), max(16, min(256, limits.max_new_tokens))
            tau = gr.Slider(
                0.0, 1.0, value=tau_value, step=0.05, label="τ: keep drafting while C_i ≥ τ", interactive=False
            )
            sl_max = gr.Slider(
                1,
                most_sl,
                value=min(sl_value, most_sl),
                step=1,
                label="SL_max: most draft tokens per iteration",
                interactive=False,
            )
            max_new = gr.Slider(8, most_tokens, value=min(DEFAULT_TOKENS, most_tokens), step=8, label="Max new tokens")
            repeats = gr.Slider(
                1, 5, value=DEFAULT_REPEATS, step=1, label="Timed runs of each (after a warm-up; the median is shown)"
            )
    return prompt, tuned, tau, sl_max, max_new, repeats


def _run_handler(ctx: TabContext) -> Callable[..., tuple[Any, ...]]:
    """Run's handler: checks the widgets' values, times the four methods in a model call and draws the
    card, the table and the figures."""
    import pandas as pd

    from specviz.plots.disco import chosen_vs_oracle_per_iteration, oracle_sl_histogram

    def measure(
        pair_name: str, text: str, threshold: float | None, length: int | None, n: int, k: int, key: str
    ) -> dict[str, Any]:
        """The model call (plain data in and out): the runs, the classifier's card and tuned values;
        ends after the method being timed once the stop `key` is requested."""
        pair = ctx.load_pair(pair_name)
        ids = prompt_ids(pair, text, ctx.limits)
        out = disco_vs_oracle(pair, ids, threshold, length, n, k, stop=StopKey(key))
        clf = out.pop("classifier")
        return {**out, "card": card_markdown(clf), "tuned": (clf.threshold, clf.max_speculation_length)}

    # four methods, each a warm-up and k timed runs of n tokens
    measured = ctx.run_models(
        measure, seconds=lambda pair_name, text, threshold, length, n, k, key: gpu_seconds(4 * (k + 1) * n)
    )

    def run(
        pair_name: str,
        text: str,
        use_tuned: bool,
        t: float,
        m: float,
        n: float,
        k: float,
        stop: KeyedStop | None = None,
        request: gr.Request | None = None,
    ) -> tuple[Any, ...]:
        try:
            threshold, length = (None, None) if use_tuned else (float(t), int(m))
            check_count("max new tokens", int(n), most=ctx.limits.max_new_tokens)
            if length is not None:
                check_count("SL_max", length, most=ctx.limits.speculation_length)
            check_prompt_text(text, ctx.limits)  # before it reaches the models' line to be tokenised there
            with stop_key_for(stop, request, ctx.left) as key:  # Stop, a closed page or a cancelled request stop it
                out = measured(pair_name, text, threshold, length, int(n), int(k), key)
        except Exception as e:  # a user's mistake, or a fault: one message, logged once
            raise user_error(e) from e
        used = out["tuned"] if use_tuned else (t, m)
        flagged = pd.DataFrame(flagged_rows(out["rows"], out["flags"]), columns=HEADERS)
        card_text = flags_markdown(out["flags"]) + out["card"]
        if out["stopped"]:  # the methods timed before Stop, without the figures that compare all four
            note = f"**Stopped** after {len(out['rows'])} of 4 methods. "
            return note + card_text, flagged, None, None, *used
        df = pd.DataFrame(out["iterations"])
        oracle = df[df["method"].str.startswith("Oracle")].assign(oracle_sl=lambda d: d["speculation_length"])
        return (
            card_text,
            flagged,
            chosen_vs_oracle_per_iteration(df, [r["method"] for r in out["rows"]]),
            oracle_sl_histogram(oracle),
            *used,
        )

    return run


def show_tuned(pair_name: str, use_tuned: bool) -> tuple[Any, Any]:
    """Lock the sliders on the classifier's tuned values, or free them."""
    if not use_tuned:
        return gr.update(interactive=True), gr.update(interactive=True)
    tau_value, sl_value = tuned_values(pair_name)
    return gr.update(value=tau_value, interactive=False), gr.update(value=sl_value, interactive=False)
