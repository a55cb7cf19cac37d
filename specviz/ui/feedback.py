"""How the app reports a problem. A user's mistake (SpecvizError) is one INFO line in the server
log and a plain message on the page; anything else is a fault in specviz: its traceback goes to
the log, and the page says so. Gradio's own traceback printing is turned off for both, so each
problem is logged exactly once, where it happened (a model call's: maybe in a ZeroGPU worker)."""

from __future__ import annotations

import functools
import html
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from specviz.errors import SpecvizError

log = logging.getLogger("specviz.app")


def problem_text(e: BaseException) -> str:
    """The page's one-line message for `e`, logged the way its kind deserves (a gr.Error was already)."""
    import gradio as gr

    if isinstance(e, gr.Error):
        return e.message
    if isinstance(e, SpecvizError):
        log.info("refused: %s", e)
        return str(e)
    log.error("failed: %s: %s", type(e).__name__, e, exc_info=e)
    return f"specviz failed ({type(e).__name__}: {e}). This is a bug, not your input; the server log has the details."


def user_error(e: BaseException) -> Exception:
    """A gr.Error to raise for `e` (see problem_text); `e` itself if it is one. Its message is
    escaped: the page shows an error as HTML, and a refusal may quote what a visitor sent."""
    import gradio as gr

    if isinstance(e, gr.Error):
        return e
    return gr.Error(html.escape(problem_text(e), quote=False), print_exception=False)


def said_where_raised(fn: Callable) -> Callable:
    """`fn` (a model call; a generator function too) whose errors become gr.Errors where they are
    raised: ZeroGPU carries a worker's gr.Error back whole, any other exception as its type's name."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def steps(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except Exception as e:
                raise user_error(e) from e

        return steps

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise user_error(e) from e

    return call
