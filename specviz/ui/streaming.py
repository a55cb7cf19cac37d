"""The Speculative Streaming tab: run `streaming` on a prompt and inspect each iteration's tree
(which stream proposed each token, which path the target accepted) and its one target pass (which
rows verify the tree, which draft the next one), with the output coloured by the stream that
proposed each accepted token.

Handlers are plain functions of widget values (tested without a server); no torch at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.plots.streaming_pass import PassCounts, pass_shape, run_pass
from specviz.plots.tree import record_tree, record_tree_figure
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import AppLimits, check_prompt_text
from specviz.ui.trees import TARGET_COLOUR, TreeRun, cannot_run, tree_run
from specviz.ui.trees import coloured_output as coloured_output_by

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from specviz.ui.blocks import TabContext

TAB_TITLE = "Streaming tree"
TAB_ORDER = 65
# Okabe-Ito colours, one per stream (the target's own token: trees.TARGET_COLOUR)
STREAM_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9"]


@dataclass(frozen=True)
class StreamingRun(TreeRun):
    """A streaming run to inspect, and what its summary says: what it is lossless against, its pruning
    threshold and whether the adapter has a pruning layer (without one a threshold prunes nothing)."""

    against: str | None = None
    prune_threshold: float = 0.0
    has_pruner: bool = True


def run_streaming(
    pair_name: str,
    prompt: str,
    max_new_tokens: int,
    streams: int,
    tree_width: int,
    prune_threshold: float | None = None,
    load_pair: Callable[[str], Any] | None = None,
    limits: AppLimits | None = None,
) -> StreamingRun:
    """One greedy `streaming` run to inspect (a pruning threshold of None: the method's default); the
    prompt within `limits`."""
    from specviz.methods.streaming import StreamingOptions, streaming_model, tuned_target

    threshold = StreamingOptions().prune_threshold if prune_threshold is None else float(prune_threshold)
    options = {"speculation_length": int(streams), "tree_width": int(tree_width), "prune_threshold": threshold}
    pair, fields = tree_run("streaming", pair_name, prompt, max_new_tokens, options, load_pair, limits)
    return StreamingRun(
        **fields,
        against=tuned_target(pair),
        prune_threshold=threshold,
        has_pruner=streaming_model(pair.target, "auto").pruner is not None,
    )


def stream_colour(source: str) -> str:
    """'stream 2' -> its colour; anything else (the target's own token) grey."""
    try:
        return (
            STREAM_COLOURS[(int(source.split()[-1]) - 1) % len(STREAM_COLOURS)]
            if source.startswith("stream")
            else TARGET_COLOUR
        )
    except ValueError:
        return TARGET_COLOUR


def coloured_output(run: TreeRun) -> str:
    """HTML of the emitted text: accepted drafts coloured by the stream that proposed them."""
    return coloured_output_by(run, stream_colour)


def show_iteration(state: TreeRun | None, iteration: Any) -> tuple[go.Figure | None, str]:
    """The tree figure of one iteration (counted from 1, as everywhere in the app), and a one-line summary of it."""
    if not state or not state.records:
        return None, "Run streaming first."
    r = state.at(iteration)
    fig = record_tree_figure(r, decode=state.decode, colour_of=stream_colour)
    tree = record_tree(r).tree_tokens
    shape = pass_shape(r)
    pruned = len(shape.pruned or ()) if shape else 0
    dropped = f"{pruned} pruned after layer {shape.prune_layer}, " if shape and pruned else ""
    return fig, (
        f"iteration {r.iteration + 1} of {len(state.records)}: {len(tree)} tree nodes from the streams, "
        f"{dropped}{r.accepted} accepted, "
        f"{len(r.emitted)} emitted in one target forward; the streams' head and the next tree "
        f"{r.draft_ms:.2f} ms, the one pass (verification and the streams' layers) {r.verify_ms:.1f} ms"
    )


def show_pass(state: TreeRun | None, iteration: Any) -> tuple[go.Figure | None, str]:
    """The rows of one iteration's target pass (counted from 1), as its record says, and a sentence counting them."""
    if not state or not state.records:
        return None, ""
    fig, counts = run_pass(state.records, state.index(iteration), decode=state.decode)
    if counts is None:
        return fig, "one target pass: not recorded (this record does not carry the pass's shape)."
    return fig, pass_sentence(counts)


def pass_sentence(c: PassCounts) -> str:
    """'one target pass: 7 rows verify the tree, 21 stream rows ran; 3 of them (the accepted node's) draft
    the next tree.', and when the pruning layer dropped nodes, how many and where (their rows verify
    nothing and run no streams, so they are not counted among the rows that verify)."""
    plural = "s" if c.committed != 1 else ""
    if c.nodes:
        rows = 1 + c.nodes - c.pruned  # the last committed token and the kept nodes reach the top
        verify = f"{rows} rows verify the tree" if rows != 1 else "1 row verifies the tree"
    else:  # γ = 0 for the whole run never builds a tree; otherwise one comes once streams have run
        verify = f"no tree{' yet' if c.gamma else ''} ({c.committed} row{plural} of committed tokens)"
    ended = ": the run ended" if c.last else ""
    if c.gamma == 0:  # speculation_length 0, or the run's last pass (no next tree to draft)
        draft = f"no streams in use{ended}"
    elif c.kept:
        draft = f"{c.stream_rows} stream rows ran; {c.kept} of them (the accepted node's) draft the next tree"
    else:
        draft = f"{c.stream_rows} stream rows ran, none kept{ended}"
    return f"one target pass: {verify}, {draft}.{_pruned(c)}"


def _pruned(c: PassCounts) -> str:
    """' The pruning layer dropped 3 of the tree's 6 nodes after layer 26: they ran no layer above it
    and no streams.' ('' when it dropped none)."""
    if not c.pruned:
        return ""
    of = f"{c.pruned} of the tree's {c.nodes} nodes" if c.nodes != 1 else "the tree's one node"
    they = "it" if c.pruned == 1 else "they"
    return f" The pruning layer dropped {of} after layer {c.prune_layer}: {they} ran no layer above it and no streams."


def summary_line(state: StreamingRun) -> str:
    tokens = sum(len(r.emitted) for r in state.records)
    forwards = max(1, len(state.records))
    against = state.against or "the target itself (this adapter leaves the main stream untouched)"
    return (
        f"{tokens} tokens in {len(state.records)} target forwards: {tokens / forwards:.2f} tokens per forward. "
        f"{_pruning(state)}Lossless against {against}."
    )


def _pruning(state: StreamingRun) -> str:
    """'The pruning layer (threshold 0.002) dropped 7 of the 40 tree nodes after layer 26. ' when it
    dropped some; a note when a threshold was set but the adapter has no pruning layer; else ''."""
    threshold = state.prune_threshold or 0.0
    if threshold > 0 and not state.has_pruner:
        return f"Pruning threshold {threshold:g}: no pruning layer in this adapter, so no tree nodes were pruned. "
    shapes = [s for s in map(pass_shape, state.records) if s and s.pruned]
    if not shapes:
        return ""
    pruned = sum(len(s.pruned or ()) for s in shapes)
    nodes = sum(len(record_tree(r).tree_tokens) for r in state.records)
    return (
        f"The pruning layer (threshold {threshold:g}) dropped {pruned} of the {nodes} tree nodes after layer "
        f"{shapes[0].prune_layer}. "
    )


def build_tab(ctx: TabContext) -> None:
    import gradio as gr

    from specviz.methods.streaming import StreamingOptions

    gr.Markdown(
        "### Speculative Streaming: the target drafts its own future tokens with extra streams in its top layers"
    )
    gr.Markdown(
        "Lossless against the target itself when the adapter's LoRA acts on the streams only; an adapter "
        "that also tunes the main stream (as in the paper) is lossless against that tuned model. Each run says "
        "which. For targets without an adapter the streams are untrained and drafts are rarely accepted."
    )
    with gr.Row():
        prompt = gr.Textbox(
            "Write a Python function that checks whether a string is a palindrome.", label="prompt", lines=2
        )
        with gr.Column():
            max_new = gr.Slider(8, 256, value=64, step=8, label="max new tokens")
            streams = gr.Slider(1, 8, value=3, step=1, label="streams used (at most the adapter's)")
            width = gr.Slider(1, 4, value=2, step=1, label="tree width (top tokens per stream)")
            prune = gr.Slider(
                0,
                0.1,
                value=StreamingOptions().prune_threshold,
                step=0.001,
                label="pruning threshold (0: off)",
                info="a tree node whose early-exit probability at its parent is below this is dropped, with "
                "its subtree, after the adapter's pruning layer",
                elem_id="sv-streaming-prune",
            )
    go = gr.Button("Run streaming", variant="primary")
    output = gr.HTML()
    overall = gr.Markdown()
    iteration = gr.Slider(1, 2, value=1, step=1, label="iteration (from 1)", elem_id="sv-streaming-iteration")
    summary = gr.Markdown()
    with gr.Row(equal_height=False):  # the tree, and beside it the pass that verified it (stacked on a phone)
        with gr.Column(min_width=320):
            plot = gr.Plot(label="stream tree", show_label=False, elem_id="sv-streaming-tree")
        with gr.Column(min_width=320):
            pass_plot = gr.Plot(label="the one target pass", show_label=False, elem_id="sv-streaming-pass")
            pass_line = gr.Markdown(elem_id="sv-streaming-pass-line")
    state = ctx.state()
    # the model call (plain data in and out)
    streamed = ctx.run_models(
        lambda pair_name, text, n, k, w, p: run_streaming(
            pair_name, text, n, k, w, p, load_pair=ctx.load_pair, limits=ctx.limits
        ),
        seconds=lambda pair_name, text, n, k, w, p: gpu_seconds(n),
    )

    def on_run(pair_name: str, text: str, n: float, k: float, w: float, p: float) -> tuple[Any, ...]:
        try:
            check_prompt_text(text, ctx.limits)  # before it reaches the models' line to be tokenised there
            st = streamed(pair_name, text, int(n), int(k), int(w), float(p))
        except (SpecvizError, OSError, ValueError) as e:  # bad input, a pair that cannot load: said; a fault raises
            return None, cannot_run(e), "", gr.update(), None, "", None, ""
        first = st.first_accepted()
        return (
            st,
            coloured_output(st),
            summary_line(st),
            gr.update(maximum=max(2, len(st.records)), value=first),
            *show_iteration(st, first),
            *show_pass(st, first),
        )

    def on_iteration(st: TreeRun | None, i: Any) -> tuple[Any, ...]:
        return (*show_iteration(st, i), *show_pass(st, i))

    go.click(
        on_run,
        [ctx.pair, prompt, max_new, streams, width, prune],
        [state, output, overall, iteration, plot, summary, pass_plot, pass_line],
        **ctx.models_queue(),
    )
    iteration.change(on_iteration, [state, iteration], [plot, summary, pass_plot, pass_line], show_progress="hidden")
