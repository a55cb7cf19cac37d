"""Builds the app: a header with the model pair, then the tabs (Race first, then discovered ones)."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gradio as gr

from specviz.errors import SpecvizError
from specviz.ui.pairs import describe_pair, pair_choices, resolve_pair
from specviz.ui.style import CSS

log = logging.getLogger(__name__)


@dataclass
class TabContext:
    """What every tab may use. Components are shared by all tabs; values are per visitor."""

    pair: gr.Dropdown  # value: the pair name ("default", "tiny-random", a preset, or "TARGET,DRAFT")
    pair_status: gr.Markdown  # the header line that says which models are loaded
    race: gr.State  # the visitor's last race (specviz.ui.panels.Race) or None
    gpu: Callable[[Callable], Callable]  # wrap functions that run models (ZeroGPU's spaces.GPU on Spaces)

    @staticmethod
    def load_pair(name: str) -> Any:
        """The ModelPair called `name` (cached; 'default' falls back to tiny-random offline)."""
        return resolve_pair(name)[0]


def discover_tabs() -> tuple[list[ModuleType], list[tuple[str, str]]]:
    """Tab modules of this package in TAB_ORDER, and (module, error) for those that failed to import."""
    import specviz.ui as package

    tabs, failures = [], []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception:  # one broken feature must not take the app down
            failures.append((info.name, traceback.format_exc(limit=3)))
            continue
        if hasattr(module, "TAB_TITLE") and hasattr(module, "build_tab"):
            tabs.append(module)
    tabs.sort(key=lambda m: (getattr(m, "TAB_ORDER", 100), m.TAB_TITLE))
    return tabs, failures


def _load_status(name: str) -> str:
    try:
        pair, notice = resolve_pair(name)
    except SpecvizError as e:
        raise gr.Error(str(e)) from None
    if notice:
        gr.Warning(notice)
    return describe_pair(pair, notice)


def build_app(pair: str = "default", gpu: Callable | None = None) -> gr.Blocks:
    """The whole app. `pair`: the pair selected when the page opens (loaded on first visit)."""
    tabs, failures = discover_tabs()
    with gr.Blocks(title="specviz: speculative decoding, raced") as demo:
        with gr.Row(elem_classes="sv-header", equal_height=True):
            with gr.Column(scale=3):
                gr.HTML(
                    "<h1>specviz</h1><p>Speculative decoding, method by method: a small draft model guesses, "
                    "the big target model checks several guesses in one pass. Race the methods and watch.</p>"
                )
            with gr.Column(scale=2):
                pair_box = gr.Dropdown(
                    pair_choices(pair), value=pair, allow_custom_value=True, elem_id="sv-pair",
                    label="Model pair (a preset, or 'TARGET_ID,DRAFT_ID' when online)",
                )  # fmt: skip
                pair_status = gr.Markdown("Loading the model pair…", elem_id="sv-pair-status")
        ctx = TabContext(pair=pair_box, pair_status=pair_status, race=gr.State(None), gpu=gpu or (lambda fn: fn))
        with gr.Tabs():
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
            trigger(_load_status, pair_box, pair_status, concurrency_id="models", concurrency_limit=1, show_progress="minimal")
    return demo


def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="blue", neutral_hue="slate", text_size="lg")


def launch(demo: gr.Blocks, **kwargs: Any) -> Any:
    """Queue (one model run at a time: timings stay honest) and serve with the app's look."""
    kwargs.setdefault("ssr_mode", False)
    # Gradio's start-up self-check (one HEAD request to the local URL with a 3 s timeout) fails on
    # a busy machine and aborts the launch although the server is up; skip it where gradio has it.
    if "_frontend" in inspect.signature(demo.launch).parameters:
        kwargs.setdefault("_frontend", False)
    return demo.queue(default_concurrency_limit=4).launch(theme=theme(), css=CSS, **kwargs)
