"""How the app reports a problem. A user's mistake (SpecvizError) is one INFO line in the server
log and a plain message on the page; anything else is a fault in specviz: its traceback goes to
the log, and the page says so. Gradio's own traceback printing is turned off for both, so each
problem is logged exactly once."""

from __future__ import annotations

import logging

from specviz.errors import SpecvizError

log = logging.getLogger("specviz.app")


def problem_text(e: BaseException) -> str:
    """The page's one-line message for `e`, logged the way its kind deserves."""
    if isinstance(e, SpecvizError):
        log.info("refused: %s", e)
        return str(e)
    log.error("failed: %s: %s", type(e).__name__, e, exc_info=e)
    return f"specviz failed ({type(e).__name__}: {e}). This is a bug, not your input; the server log has the details."


def user_error(e: BaseException):
    """A gr.Error to raise for `e` (see problem_text)."""
    import gradio as gr

    return gr.Error(problem_text(e), print_exception=False)
