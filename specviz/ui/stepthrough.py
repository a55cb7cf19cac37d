"""The Race tab's step-through: one iteration of one method, token by token (specviz.stepthrough).

Pick a method of the last race and an iteration; Previous / Next (or the ← → keys once the section
has focus) move through the run. When the race's pair is loaded here, the target (and the draft)
rerun the iteration's context once to show whole distributions; a race loaded from a file is
explained from its records.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.plots.animation import TITLE as PLAY_TITLE
from specviz.plots.animation import iteration_animation
from specviz.plots.step import TITLE, step_distributions
from specviz.plots.theme import empty
from specviz.serving.gpu import gpu_seconds
from specviz.serving.race import Race
from specviz.text import visible
from specviz.ui.feedback import user_error

if TYPE_CHECKING:
    from specviz.ui.blocks import TabContext

INTRO = (
    "Pick a method and an iteration: the drafted tokens, the test each met (greedy: is it the target's most likely "
    "token; sampling: u < min(1, p/q)), the target's own token and the KV cache's rollback. "
    "Use **Previous** / **Next**, or ← → after clicking in this section. **Play** (under the first plot) shows the "
    "iteration as it happened, on its measured clock."
)

# gr.Plot draws a figure with Plotly.react(data, layout), which leaves out its `frames`: Play would have
# nothing to play. On every new figure this hands the frames (sent with it) to plotly once it is drawn.
ADD_FRAMES_JS = """
(value) => {
  const spec = value && (typeof value.plot === "string" ? JSON.parse(value.plot) : value.plot);
  const frames = (spec && spec.frames) || [];
  const title = spec && spec.layout && spec.layout.title && spec.layout.title.text;
  let tries = 0;
  const attach = () => {
    const gd = document.querySelector("#sv-step-anim .js-plotly-plot");
    const drawn = gd && gd._fullLayout && gd.layout && gd.layout.title && gd.layout.title.text === title;
    if (!drawn || !window.Plotly) { if (tries++ < 100) setTimeout(attach, 100); return; }
    // the last figure's frames go one at a time, last first: Plotly.deleteFrames sorts its indices as strings
    // (10 before 2) and fails past 10 frames, leaving a part of them (18 of 25 at γ = 16)
    const had = ((gd._transitionData && gd._transitionData._frames) || []).length;
    let ready = Promise.resolve();
    for (let i = had - 1; i >= 0; i--) ready = ready.then(() => window.Plotly.deleteFrames(gd, [i]));
    ready.then(() => frames.length && window.Plotly.addFrames(gd, frames))
      .then(() => { gd.dataset.frames = String(frames.length); });
  };
  attach();
  return [];
}
"""


def method_choices(race: Race | None) -> list[tuple[str, str]]:
    """(label, name) of the race's runs that have iterations."""
    return [(r.label, r.name) for r in race.runs if r.records] if race else []


def span_texts(race: Race, method: str) -> dict[int, str]:
    """token id -> its text as the board showed it (for races whose tokenizer is not loaded here)."""
    run = next(r for r in race.runs if r.name == method)
    return {s.token_id: visible(s.text) for s in run.spans if s.text}


def step_html(step: Any, label: str | None = None) -> str:
    """The iteration as a table of drafts and tests, the target's token and the cache's story.
    `label`: the method's display name (default: its registry name); iterations count from 1."""
    e = html.escape
    head = (
        f"<p><b>{e(label or step.method)}</b>, iteration {step.iteration + 1} of {step.iterations} "
        f"({'greedy' if step.greedy else 'sampling'}); {step.position} tokens of context, ending: "
        f"<code class='sv-step-context'>{e(step.context)}</code></p>"
    )
    rows = "".join(
        f"<tr class='{'sv-step-ok' if c.accepted else 'sv-step-no' if c.tested else 'sv-step-untested'}'>"
        f"<td>{c.index + 1}</td><td><code>{e(c.text)}</code></td><td>{_num(c.p)}</td>"
        f"<td>{'one-hot' if c.q is None else _num(c.q)}</td>"
        f"<td>{_num(c.u)}</td><td>{e(c.rule)}</td></tr>"
        for c in step.checks
    )
    table = (
        (
            "<table class='sv-step-table'><thead><tr><th>#</th><th>draft token</th><th>p(x) "
            "target</th><th>q(x) draft</th>"
            f"<th>u</th><th>the test as applied</th></tr></thead><tbody>{rows}</tbody></table>"
        )
        if step.checks
        else ("<p>No drafts: the target decodes one token per pass.</p>")
    )
    own = (
        (
            f"<p><b>The target's own token</b> ({e(step.target_role)}): <code>{e(step.target_token)}</code>, "
            f"{e(step.target_from)}.</p>"
        )
        if step.target_token
        else f"<p><b>The target's own token:</b> {e(step.target_from)}.</p>"
    )
    cache = "".join(f"<li>{e(line)}</li>" for line in step.cache)
    check = (
        ""
        if step.p_check is None
        else "; the recomputed p(x) equal the run's"
        if step.p_check == 0
        else f"; the recomputed p(x) differ from the run's by at most {step.p_check:.1e}"
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in step.notes)
    return (
        f"<div class='sv-step-view' tabindex='0'>{head}<p><b>Accepted {step.accepted} of {len(step.checks)} "
        f"drafts.</b></p>{table}{own}"
        f"<p><b>KV cache</b></p><ul>{cache}</ul>{'<ul>' + notes + '</ul>' if notes else ''}"
        f"<p class='sv-note'>Distributions: {e(step.source)}{check}.</p></div>"
    )


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"  # three significant digits: a small p is not rounded to 0.000


def build_section(ctx: TabContext) -> dict[str, Any]:
    """The step-through accordion, under the race's 'why' table: its widgets, wired (the race's
    board redraws them: `specviz.ui.race.board_outputs`)."""
    with gr.Accordion("Step through one iteration", open=False, elem_id="sv-step"):
        gr.Markdown(INTRO)
        with gr.Row(equal_height=True):
            step_method = gr.Dropdown([], label="Method", scale=2, elem_id="sv-step-method")
            step_iteration = gr.Number(
                1, precision=0, minimum=1, label="Iteration", scale=1, elem_id="sv-step-iteration"
            )
            prev = gr.Button("← Previous", scale=1, elem_id="sv-step-prev")
            nxt = gr.Button("Next →", scale=1, elem_id="sv-step-next")
        step_anim = gr.Plot(
            empty(PLAY_TITLE, "Run a race, then pick a method and an iteration to play it."),
            elem_id="sv-step-anim",
            show_label=False,
        )
        step_view = gr.HTML(elem_id="sv-step-view")
        step_plot = gr.Plot(
            empty(TITLE, "Run a race, then pick a method and an iteration."), elem_id="sv-step-plot", show_label=False
        )

    show = _show_handler(ctx)

    def here(race: Race | None, pair_name: str, method: str | None, iteration: Any) -> tuple[Any, ...]:
        return show(race, pair_name, method, iteration)

    def previous(race: Race | None, pair_name: str, method: str | None, iteration: Any) -> tuple[Any, ...]:
        return show(race, pair_name, method, iteration, -1)

    def following(race: Race | None, pair_name: str, method: str | None, iteration: Any) -> tuple[Any, ...]:
        return show(race, pair_name, method, iteration, +1)

    inputs = [ctx.race, ctx.pair, step_method, step_iteration]
    outputs = [step_iteration, step_view, step_plot, step_anim]
    for trigger, fn in (
        (step_method.input, here),
        (step_iteration.submit, here),
        (prev.click, previous),
        (nxt.click, following),
    ):
        trigger(fn, inputs, outputs, api_visibility="private", **ctx.models_queue())
    step_anim.change(None, [step_anim], None, js=ADD_FRAMES_JS)
    return {
        "step_method": step_method,
        "step_iteration": step_iteration,
        "step_anim": step_anim,
        "step_view": step_view,
        "step_plot": step_plot,
    }


def _show_handler(ctx: TabContext) -> Callable[..., tuple[Any, ...]]:
    """The step-through's handler: (race, pair name, method, iteration, move) -> the iteration shown, its
    HTML and its two plots; with the race's models here, the iteration's distributions rerun in a model call."""

    def recomputed(
        records: list, i: int, prompt_ids: list[int], options: dict, pair_name: str, method: str, method_options: dict
    ) -> Any:
        """The model call (plain data in and out): iteration `i` explained with the race's models rerun."""
        from specviz.methods import get_method
        from specviz.stepthrough import explain_iteration, recompute_for

        pair = ctx.load_pair(pair_name)
        recompute = recompute_for(get_method(method), pair, {**options, **method_options})
        return explain_iteration(records, i, prompt_ids, options, pair=pair, recompute=recompute)

    explain = ctx.run_models(recomputed, seconds=gpu_seconds(0))  # one pass of the target (and the draft)

    def show(race: Race | None, pair_name: str, method: str | None, iteration: Any, move: int = 0) -> tuple[Any, ...]:
        from specviz.stepthrough import explain_iteration

        if race is None or not method:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            run = next((r for r in race.runs if r.name == method and r.records), None)
            if run is None:
                return 1, "<p>This method has no iterations in the last race.</p>", gr.skip(), gr.skip()
            i = min(max(0, int(iteration or 1) - 1 + move), len(run.records) - 1)  # the box counts from 1
            if ctx.load_pair(pair_name).name == race.pair:  # the race's models are here: rerun for whole distributions
                step = explain(run.records, i, race.prompt_ids, race.options, pair_name, method, run.options)
            else:  # a race loaded from a file: its records, and the token texts its board showed
                texts = span_texts(race, method)
                step = explain_iteration(
                    run.records, i, race.prompt_ids, race.options, token_text=lambda t: texts.get(t, f"#{t}")
                )
        except gr.Error:  # already said on the page
            raise
        except Exception as e:
            raise user_error(e) from e
        plots = step_distributions(step, run.label), iteration_animation(step, run.label)
        return i + 1, step_html(step, run.label), *plots

    return show
