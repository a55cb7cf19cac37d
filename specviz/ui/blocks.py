"""Builds the app: a header with the model pair, then the tabs (Race first, then discovered ones)."""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import gradio as gr
from starlette.middleware import Middleware

from specviz.errors import SpecvizError
from specviz.serving import threads
from specviz.serving.gpu import no_gpu
from specviz.serving.janitor import limit_malloc_arenas, start_janitor
from specviz.serving.limits import AppLimits, app_limits
from specviz.serving.pools import size_pools
from specviz.serving.saved import MAX_FILE_BYTES
from specviz.serving.stops import LeftPages
from specviz.serving.turns import TURNS, hand_over_quickly, one_at_a_time
from specviz.serving.uploads import UploadBounds
from specviz.serving.visitors import peer_left_alone, trusted_proxies
from specviz.ui.feedback import said_where_raised, user_error
from specviz.ui.pairs import TINY_VARIANTS, Placement, describe_pair, pair_choices, resolve_pair
from specviz.ui.style import CSS

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

log = logging.getLogger(__name__)
# logged when a closed page stops races (the load tool looks for it)
LEFT_LOG = "a visitor left: stopped %d running race(s)"
ANYWHERE = Placement()  # the pairs' default placement: the best device found, the dtype it suits
PAGE_JS = Path(__file__).with_name("page.js").read_text()  # tooltips, the step-through's keys, the running panel


@dataclass
class TabContext:
    """What every tab may use. Components are shared by all tabs; values are per visitor."""

    pair: gr.Dropdown  # value: the pair name ("default", "tiny-random", a preset, or "TARGET,DRAFT")
    pair_status: gr.Markdown  # the header line that says which models are loaded
    race: gr.State  # the visitor's last race (specviz.ui.panels.Race) or None
    # (fn, duration=seconds or fn(*args) -> seconds) -> fn made to run where the GPU is: spaces.GPU on a
    # ZeroGPU Space (a forked worker per call: plain data in and out, specviz.serving.gpu), else the identity
    gpu: Callable[..., Callable] = no_gpu
    # what one visitor may ask for (specviz.serving.limits; environment overrides)
    limits: AppLimits = field(default_factory=AppLimits)
    allowed_pairs: tuple[str, ...] | None = None  # None: any pair name; else only these (limits.presets_only)
    # name -> (pair, notice) of the pairs loaded at start-up: on ZeroGPU the only ones served (a worker
    # inherits them; a pair loaded later, in a request's thread, could not be moved to the GPU)
    served: dict[str, tuple[Any, str | None]] = field(default_factory=dict)
    forks: bool = False  # True on ZeroGPU: what a model call keeps in memory (an online learner) ends with its worker
    # where the pairs run and in which dtype (the command's --device, --dtype)
    placement: Placement = field(default_factory=Placement)
    # the Stop signals a closed page sets (its unload event), one registry per app
    left: LeftPages = field(default_factory=LeftPages)
    # the Race tab's saved-race loader, (handler, its outputs), set when the Race tab is built (it is built first):
    # another tab puts a saved race on the Race tab's board through it (the Leaderboard's shipped races)
    show_saved: tuple[Callable, list] | None = None

    def state(self, value: Any = None) -> gr.State:
        """Per-visitor state that is dropped `limits.session_ttl_s` after its last change (a handler
        must return it as an output for a change to count)."""
        return gr.State(value, time_to_live=self.limits.session_ttl_s)

    def run_models(self, fn: Callable, seconds: Callable[..., int] | int | None = None) -> Callable:
        """`fn` made a model call: it waits for its turn on the models (specviz.serving.turns, in this
        process), then runs on the models' thread (specviz.serving.threads); on a ZeroGPU Space in a
        worker with a GPU for at most `seconds` (or `seconds(*args)`), so `fn` takes and returns plain
        data and the caller draws the page. Its errors arrive as gr.Errors. The Race takes turns per
        method instead."""
        return one_at_a_time(self.gpu(threads.running_on(threads.MODELS, said_where_raised(fn)), duration=seconds))

    def hold_models(self, fn: Callable) -> Callable:
        """`fn` made to wait for its turn on the models and run on the models' thread, in this process
        (never a GPU worker): for what touches the models or what lives beside them here, such as a
        visitor's online learner or a pair being loaded."""
        return one_at_a_time(threads.running_on(threads.MODELS, fn))

    def models_queue(self) -> dict[str, Any]:
        """The event options of every handler that runs models: one gradio queue, `admitted_runs` at once."""
        return {"concurrency_id": "models", "concurrency_limit": self.limits.admitted_runs}

    def resolve(self, name: str) -> tuple[Any, str | None]:
        """(pair, notice) of the pair called `name`: one loaded at start-up, else loaded now (cached;
        'default' falls back to tiny-random offline, and the notice says so). For a handler that does
        not hold a turn on the models: a pair not loaded yet is loaded in a turn (a load beside a
        timed run would slow it, and two loads at once could hold two pairs' memory)."""
        from specviz.models.pair import is_loaded

        if not isinstance(name, str) or name in self.served or name in TINY_VARIANTS:
            return self.held(name)  # nothing to load (a name that is not text is refused there)
        if threads.on_thread(threads.MODELS) or is_loaded(name.strip(), self.placement.device, self.placement.dtype):
            return self.held(name)  # in a model call (its turn held), or loaded already
        if self.allowed_pairs is not None and name.strip() not in self.allowed_pairs:
            return self.held(name)  # refused at once, without waiting for a turn
        return self.hold_models(self.held)(name)

    def held(self, name: str) -> tuple[Any, str | None]:
        """`resolve` for a caller that holds a turn on the models (a model call): loads where needed."""
        if isinstance(name, str) and name in self.served:
            return self.served[name]
        pair, notice = resolve_pair(name, self.allowed_pairs, self.placement)
        read_notes(pair)  # made here, on the models' thread, where a race reads them in its handler's
        return pair, notice

    def load_pair(self, name: str) -> Any:
        """The ModelPair called `name`, for a model call (it holds its turn: see `held`)."""
        return self.held(name)[0]


def discover_tabs() -> tuple[list[ModuleType], list[tuple[str, str]]]:
    """Tab modules of this package in TAB_ORDER, and (module, error) for those that failed to import."""
    tabs, failures = [], []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's modules, by file
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__package__}.{info.name}")
        except Exception:  # one broken feature must not take the app down
            log.exception("the tab module %s failed to import", info.name)
            failures.append((info.name, traceback.format_exc(limit=3)))
            continue
        if hasattr(module, "TAB_TITLE") and hasattr(module, "build_tab"):
            tabs.append(module)
    tabs.sort(key=lambda m: (getattr(m, "TAB_ORDER", 100), m.TAB_TITLE))
    return tabs, failures


def _load_status(ctx: TabContext, name: str) -> str:
    """The header's pair line (loading the pair where it is not loaded yet: never on ZeroGPU)."""
    try:
        pair, notice = ctx.resolve(name)
    except SpecvizError as e:
        raise user_error(e) from None
    if notice:
        gr.Warning(notice)
    return describe_pair(pair, notice)


def serve_loaded(
    pair: str, allowed: tuple[str, ...] | None, placement: Placement = ANYWHERE
) -> dict[str, tuple[Any, str | None]]:
    """The pairs a ZeroGPU Space serves, loaded now (in the main thread, before launch, as ZeroGPU
    needs): `pair` and the tiny teaching pairs, by the names a visitor or a race asks for. What the
    app's process reads of a pair is made here too: each method's lossless note (Speculative
    Streaming's builds its streams over the target)."""
    served: dict[str, tuple[Any, str | None]] = {}
    for name in dict.fromkeys([pair, *TINY_VARIANTS]):
        loaded, notice = resolve_pair(name, allowed, placement)
        served[name] = (loaded, notice)
        served.setdefault(loaded.name, (loaded, None))  # what a race asks its worker for
        read_notes(loaded)
    return served


def read_notes(pair: ModelPair) -> None:
    """Each method's lossless note on `pair` with its default options, made once (then cached): Speculative
    Streaming's builds its streams over the target, tensor work that belongs where the pair was loaded
    (specviz.serving.threads), not in the handler that shows the note."""
    from specviz.methods import all_methods

    for spec in all_methods():
        spec.lossless_note(pair, {})


def build_app(
    pair: str = "default",
    gpu: Callable | None = None,
    limits: AppLimits | None = None,
    placement: Placement = ANYWHERE,
) -> gr.Blocks:
    """The whole app. `pair`: the pair selected when the page opens (loaded on first visit).
    `gpu`: spaces.GPU on a ZeroGPU Space (the pairs it serves are loaded here, now), else None.
    `limits`: what one visitor may ask for (default: specviz.serving.limits.app_limits(), from the environment).
    `placement`: the device and dtype every pair is loaded with."""
    limits = limits or app_limits()
    allowed = tuple(pair_choices(pair, placement)) if limits.presets_only else None
    # ZeroGPU: models load now, in this process
    served = serve_loaded(pair, allowed, placement) if gpu is not None else {}
    allowed, choices = (
        (tuple(served), list(served)) if served else (allowed, list(allowed or pair_choices(pair, placement)))
    )
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
                    choices,
                    value=pair,
                    allow_custom_value=allowed is None,
                    elem_id="sv-pair",
                    label="Model pair"
                    if allowed is not None
                    else "Model pair (a preset, or 'TARGET_ID,DRAFT_ID' when online)",
                )
                pair_status = gr.Markdown("Loading the model pair…", elem_id="sv-pair-status")
        ctx = TabContext(
            pair=pair_box,
            pair_status=pair_status,
            race=gr.State(None, time_to_live=limits.session_ttl_s),
            gpu=gpu or no_gpu,
            limits=limits,
            allowed_pairs=allowed,
            served=served,
            forks=gpu is not None,
            placement=placement,
        )
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
        # Load the pair when the page opens and when it changes (the race waits behind a load); a
        # loaded pair is described without a GPU call.
        status = ctx.hold_models(lambda name: _load_status(ctx, name))
        for trigger in (demo.load, pair_box.change):
            trigger(status, pair_box, pair_status, **ctx.models_queue(), show_progress="minimal")
        demo.unload(_visitor_left(ctx.left))
    refuse_inputs_in_one_line(demo)
    # Model runs take turns (timings stay honest); a full queue turns new visitors away politely.
    demo.specviz_limits = limits  # read by launch
    return demo.queue(default_concurrency_limit=4, max_size=limits.queue_size)


def refuse_inputs_in_one_line(demo: gr.Blocks) -> None:
    """Make every value sent to the app checked against its component's type, and every refusal one
    line: an INFO line in the log and a message that names the field, not gradio's 20-66-line
    traceback or its generic error. A component's own check (gradio's: a number past its box's bounds,
    a choice not offered) and the API edge's (`typed`: text where text goes, a whole number where a
    count goes, true or false for a checkbox, a list for a checkbox group) both end here, and so do a
    call with too few values and a file path that no visitor uploaded (`_edge_refusals`)."""
    for block in demo.blocks.values():
        if isinstance(block, gr.components.Component) and not isinstance(block, gr.State):
            vars(block)["preprocess"] = _refused_in_one_line(block, block.preprocess)  # this block's, not its class's
    vars(demo)["validate_inputs"] = _counted(demo.validate_inputs)
    vars(demo)["preprocess_data"] = _edge_refusals(demo.preprocess_data)


def _refused_in_one_line(block: gr.components.Component, preprocess: Callable) -> Callable:
    def checked(payload: Any) -> Any:
        try:
            return preprocess(typed(block, payload))
        except SpecvizError as e:
            raise user_error(e) from None
        except gr.Error as e:  # gradio's own refusal (print_exception=True: a traceback in the log)
            raise user_error(SpecvizError(_refusal(block, payload, e.message))) from None
        except (TypeError, ValueError, KeyError, AttributeError) as e:  # gradio's preprocess met a value it cannot read
            raise user_error(SpecvizError(f"{_field(block)} cannot take {_shown(payload)} ({e})")) from None

    return checked


def typed(block: Any, payload: Any) -> Any:
    """`payload` if it is of the type `block` takes (a choice's text as the number it stands for:
    gradio's API schema lists every choice as text), else a SpecvizError naming the field."""
    field_ = _field(block)
    if isinstance(block, (gr.Number, gr.Slider)):
        if payload is None and isinstance(block, gr.Number):  # an empty number box: the handler decides
            return payload
        if not _is_number(payload):
            raise SpecvizError(f"{field_} must be a number, got {_shown(payload)}")
        if _whole_only(block) and not float(payload).is_integer():
            raise SpecvizError(f"{field_} must be a whole number, got {payload:g}")
        return payload
    if isinstance(block, gr.Checkbox) and not isinstance(payload, bool):
        raise SpecvizError(f"{field_} must be true or false, got {_shown(payload)}")
    if isinstance(block, gr.Textbox) and not isinstance(payload, (str, type(None))):
        raise SpecvizError(f"{field_} must be text, got {type(payload).__name__}")
    if isinstance(block, (gr.CheckboxGroup, gr.Dropdown, gr.Radio)):
        many = isinstance(block, gr.CheckboxGroup) or getattr(block, "multiselect", False)
        if many and not isinstance(payload, list):
            raise SpecvizError(f"{field_} must be a list of choices, got {_shown(payload)}")
        return [_choice(block, v) for v in payload] if many else _choice(block, payload)
    return payload


def _choice(block: Any, value: Any) -> Any:
    """One choice of a dropdown, radio or checkbox group: its value given as text is that value; a
    dropdown that takes custom values takes text only (a pair name), never a number or null."""
    values = [c[1] if isinstance(c, tuple) else c for c in (block.choices or ())]
    if isinstance(value, str) and value not in values:
        value = next((v for v in values if not isinstance(v, str) and str(v) == value), value)
    if getattr(block, "allow_custom_value", False) and not isinstance(value, str):
        raise SpecvizError(f"{_field(block)} must be text, got {_shown(value)}")
    return value


def _whole_only(block: Any) -> bool:
    """Whether a number box or slider takes whole numbers only (a count: precision 0, or whole steps
    from a whole minimum)."""
    if isinstance(block, gr.Number):
        return block.precision == 0
    return all(float(x).is_integer() for x in (block.step, block.minimum))


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    return repr(str(value)[:40]) if not isinstance(value, (int, float)) or isinstance(value, bool) else f"{value:g}"


def _counted(validate: Callable) -> Callable:
    """gradio's check that a call sent a value for every input, its refusal one line."""

    def checked(block_fn: Any, inputs: list[Any]) -> None:
        try:
            validate(block_fn, inputs)
        except ValueError:
            wanted = len(block_fn.inputs)
            raise user_error(
                SpecvizError(f"'{block_fn.api_name}' takes {wanted} values, got {len(inputs)}: send one for each input")
            ) from None

    return checked


def _edge_refusals(preprocess_data: Callable) -> Callable:
    """gradio's preprocessing of a call's values, its refusals of what a visitor may send one line each:
    a file path no visitor uploaded, a file entry gradio cannot read."""
    from gradio.exceptions import InvalidPathError
    from pydantic import ValidationError

    async def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return await preprocess_data(*args, **kwargs)
        except InvalidPathError:
            raise user_error(SpecvizError("a file must be uploaded to this app before a call names it")) from None
        except ValidationError as e:
            raise user_error(
                SpecvizError(f"a file entry is not one gradio can read ({e.error_count()} problems)")
            ) from None

    return checked


def _no_such_endpoint(request: Any, e: Exception) -> Any:
    """A call to an API name the app does not have: HTTP 404 and one line, not gradio's 500 and a traceback."""
    from fastapi.responses import JSONResponse

    message = (
        f"this app has no endpoint {str(request.path_params.get('api_name', ''))[:40]!r}: /gradio_api/info lists them"
    )
    log.info("refused: %s", message)
    return JSONResponse({"detail": message}, status_code=404)


def _edge_handlers() -> dict[type, Callable]:
    from gradio.route_utils import FnIndexInferError

    return {FnIndexInferError: _no_such_endpoint}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _field(block: Any) -> str:
    return f"'{block.label}'" if isinstance(getattr(block, "label", None), str) else "a field"


def _refusal(block: Any, payload: Any, message: str) -> str:
    """What the page says when gradio refuses a value: for a number, the bounds it must keep."""
    least, most = getattr(block, "minimum", None), getattr(block, "maximum", None)
    if isinstance(block, (gr.Number, gr.Slider)) and least is not None and most is not None:
        return f"{_field(block)} must be from {least:g} to {most:g}, got {payload:g}"
    if choices := getattr(block, "choices", None):  # a dropdown, radio or checkbox group
        values = [c[1] if isinstance(c, tuple) else c for c in choices]
        listed = ", ".join(map(str, values[:12])) + (", ..." if len(values) > 12 else "")
        return f"{_field(block)} must be one of {listed}, got {str(payload)[:40]!r}"
    return f"{_field(block)}: {message}"


def _visitor_left(left: LeftPages) -> Callable[[gr.Request], None]:
    """The unload event's handler: the page was closed, so the visitor's running runs stop (their turns on
    the models go to the next visitor)."""

    def visitor_left(request: gr.Request) -> None:
        if stopped := left.stop(request.session_hash):
            log.info(LEFT_LOG, stopped)

    return visitor_left


def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="blue", neutral_hue="slate", text_size="lg")


def launch(demo: gr.Blocks, **kwargs: Any) -> Any:
    """Serve with the app's look (build_app has set up the queue), visitors' sessions kept bounded."""
    limits = getattr(demo, "specviz_limits", AppLimits())
    kwargs.setdefault("ssr_mode", False)
    kwargs.setdefault("state_session_capacity", limits.sessions)
    # uploads are saved races and prompt files: nothing larger is read (gradio took 200 MB in 0.6 s)
    kwargs.setdefault("max_file_size", MAX_FILE_BYTES)
    kwargs.setdefault("app_kwargs", {}).setdefault("exception_handlers", {}).update(_edge_handlers())
    # uploads bounded in number too, none empty: per request and per network address (specviz/serving/uploads.py)
    bounds = Middleware(UploadBounds, limits=limits)
    kwargs.setdefault("app_kwargs", {}).setdefault("middleware", []).append(bounds)
    trusted_proxies()  # a bad SPECVIZ_TRUSTED_PROXIES fails here, not at a visitor's first run
    peer_left_alone()  # the visitor's address is specviz.serving.visitors' rule, not uvicorn's as well
    TURNS.per_visitor = limits.places_per_address  # a network address's places in the models' line
    hand_over_quickly()  # a handler that is pure Python for seconds holds the models' run up little
    size_pools(limits)  # server-wide: past its bound, the least recently used learner gives its weights back
    limit_malloc_arenas()  # before gradio starts its worker threads
    start_janitor(demo, limits.session_ttl_s)
    # Gradio's start-up self-check (one HEAD request to the local URL with a 3 s timeout) fails on
    # a busy machine and aborts the launch although the server is up; skip it where gradio has it.
    if "_frontend" in inspect.signature(demo.launch).parameters:
        kwargs.setdefault("_frontend", False)
    return demo.launch(theme=theme(), css=CSS, js=PAGE_JS, **kwargs)
