"""Builds the app: a header with the model pair, then the tabs (Race first, then discovered ones)."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gradio as gr

from specviz import workers
from specviz.errors import SpecvizError
from specviz.limits import AppLimits, app_limits
from specviz.osd.pool import ADAPTED_DRAFTS
from specviz.ui.feedback import user_error
from specviz.ui.pairs import describe_pair, pair_choices, resolve_pair
from specviz.ui.sessions import limit_malloc_arenas, start_janitor
from specviz.ui.style import CSS
from specviz.ui.turns import one_at_a_time, stop_visitor

log = logging.getLogger(__name__)
LEFT_LOG = "a visitor left: stopped %d running race(s)"  # logged when a closed page stops races (the load tool looks for it)
PAGE_JS = (Path(__file__).with_name("page.js")).read_text()  # tooltips, the step-through's keys, the running panel in view


@dataclass
class TabContext:
    """What every tab may use. Components are shared by all tabs; values are per visitor."""

    pair: gr.Dropdown  # value: the pair name ("default", "tiny-random", a preset, or "TARGET,DRAFT")
    pair_status: gr.Markdown  # the header line that says which models are loaded
    race: gr.State  # the visitor's last race (specviz.ui.panels.Race) or None
    gpu: Callable[[Callable], Callable]  # wrap functions that run models (ZeroGPU's spaces.GPU on Spaces)
    limits: AppLimits = AppLimits()  # what one visitor may ask for (specviz.limits; environment overrides)
    allowed_pairs: tuple[str, ...] | None = None  # None: any pair name; else only these (limits.presets_only)

    def state(self, value: Any = None) -> gr.State:
        """Per-visitor state that is dropped `limits.session_ttl_s` after its last change (a handler
        must return it as an output for a change to count)."""
        return gr.State(value, time_to_live=self.limits.session_ttl_s)

    def run_models(self, fn: Callable) -> Callable:
        """Wrap a handler that runs models: it waits for its turn on them (specviz.ui.turns), then
        runs (on a ZeroGPU Space, with a GPU) on the models' thread (specviz.workers). The Race
        takes turns per method instead."""
        return one_at_a_time(self.gpu(workers.running_on(workers.MODELS, fn)))

    def models_queue(self) -> dict[str, Any]:
        """The event options of every handler that runs models: one gradio queue, `admitted_runs` at once."""
        return {"concurrency_id": "models", "concurrency_limit": self.limits.admitted_runs}

    def load_pair(self, name: str) -> Any:
        """The ModelPair called `name` (cached; 'default' falls back to tiny-random offline)."""
        return resolve_pair(name, self.allowed_pairs)[0]


def discover_tabs() -> tuple[list[ModuleType], list[tuple[str, str]]]:
    """Tab modules of this package in TAB_ORDER, and (module, error) for those that failed to import."""
    tabs, failures = [], []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's modules, by file
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__package__}.{info.name}")
        except Exception:  # one broken feature must not take the app down
            failures.append((info.name, traceback.format_exc(limit=3)))
            continue
        if hasattr(module, "TAB_TITLE") and hasattr(module, "build_tab"):
            tabs.append(module)
    tabs.sort(key=lambda m: (getattr(m, "TAB_ORDER", 100), m.TAB_TITLE))
    return tabs, failures


def _load_status(name: str, allowed: tuple[str, ...] | None) -> str:
    try:
        pair, notice = resolve_pair(name, allowed)
    except SpecvizError as e:
        raise user_error(e) from None
    if notice:
        gr.Warning(notice)
    return describe_pair(pair, notice)


def build_app(pair: str = "default", gpu: Callable | None = None, limits: AppLimits | None = None) -> gr.Blocks:
    """The whole app. `pair`: the pair selected when the page opens (loaded on first visit).
    `limits`: what one visitor may ask for (default: specviz.limits.app_limits(), from the environment)."""
    limits = limits or app_limits()
    allowed = tuple(pair_choices(pair)) if limits.presets_only else None
    tabs, failures = discover_tabs()
    # Files handed to visitors (downloads) leave gradio's cache as their state does.
    with gr.Blocks(title="specviz: speculative decoding, raced", delete_cache=(600, limits.session_ttl_s)) as demo:
        with gr.Row(elem_classes="sv-header", equal_height=True):
            with gr.Column(scale=3):
                gr.HTML(
                    "<h1>specviz</h1><p>Speculative decoding, method by method: a small draft model guesses, "
                    "the big target model checks several guesses in one pass. Race the methods and watch.</p>"
                )
            with gr.Column(scale=2):
                pair_box = gr.Dropdown(
                    pair_choices(pair), value=pair, allow_custom_value=not limits.presets_only, elem_id="sv-pair",
                    label="Model pair" if limits.presets_only else "Model pair (a preset, or 'TARGET_ID,DRAFT_ID' when online)",
                )  # fmt: skip
                pair_status = gr.Markdown("Loading the model pair…", elem_id="sv-pair-status")
        ctx = TabContext(pair=pair_box, pair_status=pair_status, race=gr.State(None, time_to_live=limits.session_ttl_s),
                         gpu=gpu or (lambda fn: fn), limits=limits, allowed_pairs=allowed)
        with gr.Tabs(overflow_behavior="wrap"):  # on a phone the tabs wrap instead of hiding behind "…"
            for module in tabs:
                with gr.Tab(module.TAB_TITLE):
                    try:
                        module.build_tab(ctx)
                    except Exception:
                        log.exception("tab %s failed to build", module.__name__)
                        gr.Markdown(f"This tab failed to build:\n```\n{traceback.format_exc(limit=3)}\n```")
            for name, error in failures:
                with gr.Tab(f"{name} (broken)"):
                    gr.Markdown(f"The module `specviz.ui.{name}` failed to import:\n```\n{error}\n```")
        # Load the pair when the page opens and when it changes; the race waits behind it.
        for trigger in (demo.load, pair_box.change):
            trigger(ctx.run_models(lambda name: _load_status(name, allowed)), pair_box, pair_status, **ctx.models_queue(),
                    show_progress="minimal")  # fmt: skip
        demo.unload(_visitor_left)
    # Model runs take turns (timings stay honest); a full queue turns new visitors away politely.
    demo.specviz_limits = limits  # read by launch
    return demo.queue(default_concurrency_limit=4, max_size=limits.queue_size)


def _visitor_left(request: gr.Request) -> None:
    """The page was closed: stop the visitor's running race (its turn on the models goes to the next)."""
    if stopped := stop_visitor(request.session_hash):
        log.info(LEFT_LOG, stopped)


def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="blue", neutral_hue="slate", text_size="lg")


def launch(demo: gr.Blocks, **kwargs: Any) -> Any:
    """Serve with the app's look (build_app has set up the queue), visitors' sessions kept bounded."""
    limits = getattr(demo, "specviz_limits", AppLimits())
    kwargs.setdefault("ssr_mode", False)
    kwargs.setdefault("state_session_capacity", limits.sessions)
    ADAPTED_DRAFTS.capacity = limits.adapted_drafts  # server-wide: the least recently used learner gives its weights back
    limit_malloc_arenas()  # before gradio starts its worker threads
    start_janitor(demo, limits.session_ttl_s)
    # Gradio's start-up self-check (one HEAD request to the local URL with a 3 s timeout) fails on
    # a busy machine and aborts the launch although the server is up; skip it where gradio has it.
    if "_frontend" in inspect.signature(demo.launch).parameters:
        kwargs.setdefault("_frontend", False)
    return demo.launch(theme=theme(), css=CSS, js=PAGE_JS, **kwargs)
