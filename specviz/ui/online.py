"""The "Online learning" tab: serve a stream of requests with OSD and watch the draft learn.

Each visitor gets their own learner (kept in `gr.State`, its adapted weights counted against the
server's bound, `specviz.serving.pools`): their adaptation never changes anyone else's draft, and
the adapted draft can be downloaded as safetensors (written once per draft version, a bounded number
of files server-wide: `specviz.serving.pools.DRAFT_FILES`). Stop ends the stream within one
iteration of the request being served; the token analysis and the download take a turn on the
models like every model call (`specviz.serving.turns`). On a ZeroGPU Space the stream is served in a GPU
worker (specviz.serving.gpu), where the learner lives and is lost: the page gets plain rows, and the
token analysis and the download, which need the learner, answer with a note. Handlers are plain
functions of widget values (tested without a server); no torch at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from specviz.errors import SpecvizError
from specviz.limits import check_count, check_number
from specviz.osd.analysis import window_alpha
from specviz.plots.online import acceptance_over_stream, acceptance_per_domain, token_precision
from specviz.serving.gpu import gpu_seconds
from specviz.serving.limits import AppLimits
from specviz.serving.stops import KeyedStop, stop_key_for
from specviz.ui.feedback import user_error

if TYPE_CHECKING:
    from specviz.ui.blocks import TabContext

TAB_TITLE = "Online learning"
TAB_ORDER = 70
# Spec-Bench's 80 translation prompts (German to English and the like): a domain the default pair's draft was
# never distilled on (its corpus holds chat, GSM8K and code)
TRANSLATION = "translation"
SUITES = [TRANSLATION, "gsm8k", "humaneval", "mbpp", "mtbench"]
# The default stream shows the draft learning in 12 short requests (benchmarks/osd, "The Online tab's default
# stream", with its timings): 4 translation prompts asked 3 times each, 32 tokens, an update after every 4
# requests at lr 3e-4. A stream of new prompts learns too, but slower: +0.06 α over the last 50 of 80 requests.
DEFAULT_SUITE, DEFAULT_REQUESTS, DEFAULT_DISTINCT, DEFAULT_LR = TRANSLATION, 12, 4, 3e-4
# the learning rates a visitor may set: 3e-5 and 3e-4 were measured (benchmarks/osd); the range goes a
# hundred times past each, and a rate of 1e308 made the trainee's weights inf (a traceback, issue 41)
LEAST_LR, MOST_LR = 1e-7, 1e-2
ALPHA = "α (accepted ÷ tested)"  # the Race tab's name and definition (specviz.ui.why's glossary)
NO_LEARNER_NOTE = (
    "On this ZeroGPU Space the stream is served in a GPU worker, which keeps nothing of it once it ends: "
    "your adapted draft is gone, and the token analysis and the download need it, so they work only where "
    "specviz runs on a server of its own."
)


def serve_stream(
    pair_name: str,
    suites: list[str],
    requests: int,
    shift_every: int,
    mixed: bool,
    distinct: int,
    max_new_tokens: int,
    speculation_length: int,
    update_interval: int,
    lr: float,
    loss: str,
    background: bool,
    load_pair: Any = None,
    stop: Any = None,
) -> Iterator[dict[str, Any]]:
    """A fresh learner serves the stream; yields the growing state after every request (the pair,
    the learner, the rows, and `stats`: what the summary shows of the learner, plain). `stop` (a
    threading.Event or a StopKey): set, the stream ends within an iteration of the request in hand."""
    import specviz
    from specviz.osd.learner import OnlineLearner, OsdConfig
    from specviz.serving.pools import ADAPTED_DRAFTS
    from specviz.serving.stream import StreamConfig, request_stream, simulate

    pair = (load_pair or specviz.load_pair)(pair_name)
    if pair.draft is None:
        raise specviz.SpecvizError(f"the pair '{pair.name}' has no draft model to adapt")
    check_suites(suites)
    prompts = request_stream(StreamConfig(tuple(suites), int(requests), int(shift_every), bool(mixed), int(distinct)))
    cfg = OsdConfig(update_interval=int(update_interval), lr=float(lr), loss=loss, background=bool(background))
    learner = OnlineLearner(pair.draft, cfg, pool=ADAPTED_DRAFTS)
    state = {"pair": pair, "learner": learner, "rows": [], "requests": len(prompts)}
    for row in simulate(
        pair,
        prompts,
        learner,
        max_new_tokens=int(max_new_tokens),
        speculation_length=int(speculation_length),
        stop=stop,
    ):
        state["rows"].append(row)
        yield {**state, "stats": learner_stats(learner)}
    learner.wait()
    yield {**state, "stats": learner_stats(learner)}


def check_suites(suites: list[str]) -> None:
    """Only the tab's own suites pass: shipped suites by name, never a path a visitor sends."""
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise SpecvizError(
            f"choose prompt suites among {', '.join(SUITES)} (got {', '.join(map(str, unknown)) or 'none'})"
        )


def learner_stats(learner: Any) -> dict[str, Any]:
    """What the summary shows of a learner, as plain values."""
    return {
        "updates": list(learner.updates),
        "version": learner.version,
        "update_interval": learner.config.update_interval,
        "background": learner.config.background,
        "replay_positions": learner.replay.positions,
        "replay_mb": learner.replay.nbytes / 2**20,
    }


def summary_markdown(state: dict[str, Any], window: int) -> str:
    rows, stats = state["rows"], state["stats"]
    if not rows:
        return "Serving…"
    recent = rows[-window:]

    def a(who: str) -> str:
        value = window_alpha(recent, who)
        return "–" if value is None else f"{value:.3f}"

    updates = stats["updates"]
    cost = (
        (
            f"{len(updates)} update{'s' if len(updates) > 1 else ''}, "
            f"{sum(u['ms'] for u in updates) / len(updates):.0f} ms each on average "
            f"({'in a background thread' if stats['background'] else 'between requests'})"
        )
        if updates
        else (
            f"no update yet (the first starts after {stats['update_interval']} requests; until it is served the "
            "online draft is the static draft, so both α are the same)"
        )
    )
    return (
        f"**{len(rows)} / {state['requests']} requests served.** {ALPHA} over the last {len(recent)} requests: "
        f"online draft **{a('osd')}**, static draft {a('static')}. Draft version {stats['version']}; {cost}; "
        f"replay buffer holds {stats['replay_positions']} positions ({stats['replay_mb']:.1f} MB)."
    )


def learned_tokens(state: dict[str, Any], window: int) -> tuple[Any, str]:
    """The token analysis (Figure 6) over the last `window` requests: a figure and a table; before the
    draft's first update a note instead (it is still the static draft: before and after would be equal)."""
    from specviz.experiments.osd import token_analysis, tokens_markdown

    learner = state["learner"]
    if learner.version == 0:
        return None, not_learned_note(learner.config.update_interval, gave_back=bool(learner.releases))
    rows = state["rows"][-window:]
    tokens = token_analysis(state["pair"], learner, rows)
    updates = f"{learner.version} update{'s' if learner.version > 1 else ''}"
    scope = (
        f"The draft's greedy guess at each token of the target's outputs in the last {len(rows)} requests, "
        f"before (the static draft) and after its {updates}. These are requests it learned from: a gain here "
        "can be a repeated request remembered as well as learning that carries over to new ones.\n\n"
    )
    return token_precision(tokens), scope + tokens_markdown(tokens)


def not_learned_note(update_interval: int, gave_back: bool = False) -> str:
    """Why the draft has learned nothing yet: the token analysis would compare the static draft with itself."""
    if gave_back:
        return (
            "Nothing to compare: this server keeps only a few adapted drafts at once and gave yours back after "
            "another visitor's learner took its place, so your draft is the static one again. Serve the stream again."
        )
    return (
        f"**Nothing learned yet.** The draft is updated after every {update_interval} requests served, and "
        "until its first update it is the static draft itself: every token's precision would be the same "
        "before and after. Serve a stream longer than the update interval."
    )


def save_draft(state: dict[str, Any] | None, folder: Path | None = None) -> str | None:
    """The visitor's adapted draft as a safetensors file in `folder` (default: gradio's file cache, so
    gradio hands it out without a copy of its own), written once per draft version."""
    from specviz.serving.pools import DRAFT_FILES

    if not state:
        return None
    learner = state["learner"]
    if learner is None:
        raise user_error(SpecvizError(NO_LEARNER_NOTE))
    if not learner.adapted and learner.releases:
        raise user_error(
            SpecvizError(
                "this server keeps only a few adapted drafts at once (SPECVIZ_LIMIT_ADAPTED_DRAFTS) and gave yours "
                "back after another visitor's learner took its place: serve the stream again to download one"
            )
        )
    if learner.version == 0:
        raise user_error(
            SpecvizError(
                "the draft has not learned yet (no update so far): it is still the pair's own draft. Serve a stream "
                "longer than the update interval, then download it"
            )
        )
    if folder is None:
        from gradio.utils import get_upload_folder

        folder = Path(get_upload_folder()) / "specviz-drafts"
    folder.mkdir(parents=True, exist_ok=True)
    return str(DRAFT_FILES.file_for(learner, folder))


def build_tab(ctx: TabContext) -> None:
    """The tab: the stream's settings, Serve and Stop, the stream's summary and figures, the token analysis
    and the download of the adapted draft."""
    _intro(ctx)
    limits = getattr(ctx, "limits", AppLimits())
    with gr.Row():
        with gr.Column():
            stream = _stream_widgets(limits)
        with gr.Column():
            *serving, window = _serving_widgets(limits)
    with gr.Row():
        go = gr.Button("Serve the stream", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    summary = gr.Markdown()
    plot = gr.Plot(label="acceptance over the stream", show_label=False)
    domains = gr.Plot(label="acceptance per domain", visible=False, show_label=False)
    with gr.Row():
        analyse = gr.Button("Which tokens did the draft learn?")
        save = gr.Button("Download the adapted draft")
    tokens_plot = gr.Plot(label="precision per token", show_label=False, visible=False)  # shown with a figure
    tokens_table = gr.Markdown()
    download = gr.File(label="adapted draft (safetensors)")
    state = ctx.state()
    stop_state = gr.State(KeyedStop())
    on_serve = _serve_handler(ctx, limits)
    on_analyse = _analyse_handler(ctx)
    inputs = [ctx.pair, *stream, *serving, window]
    go.click(on_serve, [*inputs, stop_state], [state, summary, plot, domains], **ctx.models_queue())
    stop_btn.click(KeyedStop.set, stop_state, None, queue=False, api_name="stop_stream")
    analyse.click(on_analyse, [state, window], [tokens_plot, tokens_table], **ctx.models_queue())
    # a write of the draft's weights: it waits for its turn on the models, in this process (the learner lives here)
    save.click(ctx.hold_models(save_draft), state, download, **ctx.models_queue())


def _intro(ctx: TabContext) -> None:
    """What the tab does and what its default stream shows; on ZeroGPU, what it cannot keep."""
    gr.Markdown(
        "### Online speculative decoding: the draft learns from the requests it serves\n"
        "Requests from the chosen suites are served one after another by OSD. Every *I* requests the draft "
        "is distilled on the target's distributions where it was wrong (off the request path); the same "
        "draft kept static is measured on the same requests. Your learner is yours alone.\n\n"
        "The default stream is German-to-English translation, which the draft was never distilled on, and it "
        "repeats: 4 prompts asked 3 times each, so what the draft learns from a request pays off when the "
        "request comes back (12 requests of 32 tokens: one to three minutes on a shared 2-core CPU). Set "
        "*distinct prompts* to 0 for a stream of new prompts: the draft learns more slowly there (+0.06 α over "
        "the last 50 of 80 translation requests, benchmarks/osd)."
    )
    if ctx.forks:
        gr.Markdown(NO_LEARNER_NOTE, elem_classes="sv-note")


def _stream_widgets(limits: AppLimits) -> list[Any]:
    """The stream's widgets: suites, requests, shift, mixed, distinct prompts (serve_stream's order)."""
    suites = gr.CheckboxGroup(SUITES, value=[DEFAULT_SUITE], label="prompt suites")
    # from 1: a limit of 4 made the slider run from 4 to 4, which gradio refuses
    requests = gr.Slider(
        1,
        max(2, limits.osd_requests),
        value=min(DEFAULT_REQUESTS, limits.osd_requests),
        step=1,
        label="requests in the stream",
    )
    shift_every = gr.Slider(0, 200, value=0, step=4, label="shift to the next suite every N requests (0: split evenly)")
    mixed = gr.Checkbox(False, label="mixed stream (each request from a random suite)")
    distinct = gr.Slider(
        0,
        50,
        value=DEFAULT_DISTINCT,
        step=1,
        label="distinct prompts per suite (0: all; small: a repetitive stream)",
    )
    return [suites, requests, shift_every, mixed, distinct]


def _serving_widgets(limits: AppLimits) -> list[Any]:
    """OSD's widgets: max new tokens, γ, update interval, learning rate, loss, background (serve_stream's
    order), then the summary's moving window."""
    most_tokens = max(16, min(256, limits.max_new_tokens))  # the app's limits, where below the tab's own
    max_new = gr.Slider(8, most_tokens, value=min(32, most_tokens), step=8, label="max new tokens per request")
    most_gamma = max(2, min(12, limits.speculation_length))
    gamma = gr.Slider(1, most_gamma, value=min(4, most_gamma), step=1, label="speculation length γ")
    interval = gr.Slider(1, 32, value=4, step=1, label="update interval I (requests)")
    lr = gr.Number(
        DEFAULT_LR,
        minimum=LEAST_LR,
        maximum=MOST_LR,
        label="learning rate",  # OsdConfig.lr (not imported here: it brings torch)
        info="3e-4 lifted the default draft's α by 0.06 on translation, which it never saw, and cost it "
        "0.12 on GSM8K, which it was distilled on; 3e-5 keeps its GSM8K α (benchmarks/osd)",
    )
    loss = gr.Radio(["fkl", "rkl", "jsd"], value="fkl", label="distillation loss (p: target, q: draft)")
    background = gr.Checkbox(False, label="train in a background thread")
    window = gr.Slider(5, 100, value=20, step=5, label="moving window (requests)")
    return [max_new, gamma, interval, lr, loss, background, window]


def _serve_handler(ctx: TabContext, limits: AppLimits) -> Callable[..., Iterator[tuple[Any, ...]]]:
    """Serve's handler: checks the widgets' values, serves the stream in a model call and redraws the
    summary and the figures after every request."""

    # OSD and the target serve each request, and an update every i requests trains the draft (~50 tokens' time)
    served = ctx.run_models(
        _stream_call(ctx),
        seconds=lambda pair_name, suites_, n, shift, mix, dist, mnt, g, i, *rest: gpu_seconds(
            2 * int(n) * int(mnt) + 50 * (int(n) // max(1, int(i)))
        ),
    )

    def on_serve(
        pair_name: str,
        suites_: list[str],
        n: int,
        shift: int,
        mix: bool,
        dist: int,
        mnt: int,
        g: int,
        i: int,
        lr_: float,
        loss_: str,
        bg: bool,
        w: int,
        stop: KeyedStop | None = None,
        request: gr.Request | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        try:
            check_count("requests in the stream", int(n), most=limits.osd_requests)
            check_count("max new tokens per request", int(mnt), most=limits.max_new_tokens)
            check_count("speculation length γ", int(g), most=limits.speculation_length)
            lr_ = check_number("learning rate", lr_, LEAST_LR, MOST_LR)
            kept: dict[str, Any] = {}
            st: dict[str, Any] = {"rows": [], "pair": None, "learner": None}
            # Stop, a closed page or a cancelled request end the stream
            with stop_key_for(stop, request, ctx.left) as key:
                for snap in served(pair_name, suites_, int(n), shift, mix, dist, mnt, g, i, lr_, loss_, bg, kept, key):
                    st = {
                        **st,
                        "rows": st["rows"] + snap["new_rows"],
                        "requests": snap["requests"],
                        "stats": snap["stats"],
                        "pair": kept.get("pair"),
                        "learner": kept.get("learner"),
                    }
                    yield (
                        st,
                        summary_markdown(st, int(w)),
                        acceptance_over_stream(st["rows"], st["stats"]["updates"], int(w)),
                        gr.update(value=acceptance_per_domain(st["rows"], int(w)), visible=bool(mix)),
                    )
        except Exception as e:  # a user's mistake, or a fault: one message, logged once
            raise user_error(e) from e

    return on_serve


def _stream_call(ctx: TabContext) -> Callable[..., Iterator[dict[str, Any]]]:
    """The stream's model call, on the tab's pair loader."""

    def plain_stream(
        pair_name: str,
        suites_: list[str],
        n: int,
        shift: int,
        mix: bool,
        dist: int,
        mnt: int,
        g: int,
        i: int,
        lr_: float,
        loss_: str,
        bg: bool,
        kept: dict,
        key: str,
    ) -> Iterator[dict[str, Any]]:
        """The model call (plain data in and out): each request's new rows and the learner's stats. The
        live pair and learner go into `kept`: the caller's own dict, or on ZeroGPU the worker's copy.
        Ends early once the stop `key` is requested."""
        from specviz.serving.stops import StopKey

        sent = 0
        stop = StopKey(key)
        for st in serve_stream(
            pair_name, suites_, n, shift, mix, dist, mnt, g, i, lr_, loss_, bg, ctx.load_pair, stop=stop
        ):
            kept.update(pair=st["pair"], learner=st["learner"])
            yield {"new_rows": st["rows"][sent:], "requests": st["requests"], "stats": st["stats"]}
            sent = len(st["rows"])

    return plain_stream


def _analyse_handler(ctx: TabContext) -> Callable[[Any, Any], tuple[Any, str]]:
    """The token analysis's handler: a figure and a table, or a note that says why there are none."""
    # draft and target forward passes over the stream's requests: they wait for their turn on the models like
    # every model call, in this process (the learner lives here)
    analysed = ctx.hold_models(learned_tokens)

    def on_analyse(st: dict[str, Any] | None, w: int) -> tuple[Any, str]:
        if not st or not st["rows"]:
            fig, note = None, "Serve a stream first."
        elif st["learner"] is None:
            fig, note = None, NO_LEARNER_NOTE
        else:
            fig, note = analysed(st, int(w))
        return gr.update(value=fig, visible=fig is not None), note

    return on_analyse
