"""The SSSD tab: run `sssd` on a prompt and inspect each iteration's candidate tree (which source
proposed each node, which path the target accepted), with the output coloured by source.

Handlers are plain functions of widget values (tested without a server); no torch at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.limits import check_count
from specviz.plots.tree import SOURCE_COLOURS, record_tree, record_tree_figure
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import AppLimits, check_prompt_text
from specviz.ui.trees import TARGET, TARGET_COLOUR, TreeRun, cannot_run, tree_run
from specviz.ui.trees import coloured_output as coloured_output_by

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from specviz.ui.blocks import TabContext

TAB_TITLE = "SSSD tree"
TAB_ORDER = 60


def run_sssd(
    pair_name: str,
    prompt: str,
    max_new_tokens: int,
    speculation_length: int,
    sources: str,
    load_pair: Callable[[str], Any] | None = None,
    limits: AppLimits | None = None,
) -> TreeRun:
    """One greedy `sssd` run to inspect; the prompt within `limits`."""
    options = {"speculation_length": int(speculation_length), "sources": sources}
    _, fields = tree_run("sssd", pair_name, prompt, max_new_tokens, options, load_pair, limits)
    return TreeRun(**fields)


def source_colour(source: str) -> str:
    """A draft source's colour; the target's own token grey."""
    return SOURCE_COLOURS.get(source, TARGET_COLOUR)


def coloured_output(run: TreeRun) -> str:
    """HTML of the emitted text: accepted drafts coloured by their source, the target's own tokens grey."""
    return coloured_output_by(run, source_colour, [*(s for s in SOURCE_COLOURS if s != "model"), TARGET])


def run_and_show(
    pair_name: str,
    prompt: str,
    max_new_tokens: int,
    speculation_length: int,
    sources: str,
    load_pair: Callable[[str], Any] | None = None,
    run: Callable[..., TreeRun] | None = None,
) -> tuple[TreeRun | None, str, int, go.Figure | None, str, int]:
    """The Run button: (run, output HTML, first iteration with an accepted draft, its figure and
    summary, iteration count); a bad input gives an error message in the output instead. `run`: the
    app's model call of run_sssd with the first five arguments (default: run_sssd here)."""
    try:
        if run is not None:
            state = run(pair_name, prompt, max_new_tokens, speculation_length, sources)
        else:
            state = run_sssd(pair_name, prompt, max_new_tokens, speculation_length, sources, load_pair)
    # a user's input (or a pair that cannot load) is said in the tab; a fault raises
    except (SpecvizError, OSError, ValueError) as e:
        return None, cannot_run(e), 1, None, "", 1
    first = state.first_accepted()
    fig, line = show_iteration(state, first)
    return state, coloured_output(state), first, fig, line, len(state.records)


def show_iteration(state: TreeRun | None, iteration: Any) -> tuple[go.Figure | None, str]:
    """The tree figure of one iteration (counted from 1, as everywhere in the app), and a one-line summary of it."""
    if not state or not state.records:
        return None, "Run SSSD first."
    r = state.at(iteration)
    fig = record_tree_figure(r, decode=state.decode)
    tree = record_tree(r).tree_tokens
    return fig, (
        f"iteration {r.iteration + 1} of {len(state.records)}: {len(tree)} candidate nodes, "
        f"{r.accepted} accepted, "
        f"{len(r.emitted)} emitted; drafting took {r.draft_ms:.2f} ms, verification {r.verify_ms:.1f} ms"
    )


def build_tab(ctx: TabContext) -> None:
    import gradio as gr

    limits = getattr(ctx, "limits", AppLimits())
    gr.Markdown("### SSSD: a token tree from the prompt, its own output and a datastore, verified in one pass")
    with gr.Row():
        prompt = gr.Textbox(
            "Write a Python function that checks whether a string is a palindrome.", label="prompt", lines=2
        )
        with gr.Column():
            max_new = gr.Slider(8, 256, value=64, step=8, label="max new tokens")
            # S = 8: the fastest tree on a 2-core CPU (benchmarks/sssd); the paper's S = 16 accepts more per pass
            size = gr.Slider(
                1,
                limits.tree_nodes,
                value=min(8, limits.tree_nodes),
                step=1,
                label="speculation length S (tree nodes; 8 is fastest on a CPU)",
            )
            sources = gr.Radio(["both", "input", "datastore"], value="both", label="draft sources")
    go = gr.Button("Run SSSD", variant="primary")
    output = gr.HTML()
    iteration = gr.Slider(1, 2, value=1, step=1, label="iteration (from 1)")
    summary = gr.Markdown()
    plot = gr.Plot(label="candidate tree", show_label=False)
    state = ctx.state()
    # the model call (plain data in and out)
    sssd = ctx.run_models(
        lambda pair_name, text, n, s, src: run_sssd(pair_name, text, n, s, src, ctx.load_pair, limits),
        seconds=lambda pair_name, text, n, s, src: gpu_seconds(n),
    )

    def on_run(pair_name: str, text: str, n: float, s: float, src: str) -> tuple[Any, ...]:
        try:  # only the API can send more than the slider allows
            check_count("S (tree nodes)", int(s), most=limits.tree_nodes)
            check_prompt_text(text, limits)  # before it reaches the models' line to be tokenised there
        except SpecvizError as e:
            return None, cannot_run(e), gr.update(), None, ""
        st, out, first, fig, line, count = run_and_show(pair_name, text, int(n), int(s), src, run=sssd)
        return st, out, gr.update(maximum=max(2, count), value=first), fig, line

    go.click(
        on_run,
        [ctx.pair, prompt, max_new, size, sources],
        [state, output, iteration, plot, summary],
        **ctx.models_queue(),
    )
    iteration.change(show_iteration, [state, iteration], [plot, summary], show_progress="hidden")
