"""How the load tool's clients call the app (`specviz.tools.load`, `specviz.tools.hostile`): as
which visitor, with which race, and how a hostile probe's answer is judged."""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)
PROMPTS = ["def add(a, b):", "Write a haiku about the sea.", "What is 12 * 7? Explain.", "List three prime numbers."]


def address(visitor: int, block: int = 53) -> str:
    """A visitor's network address as the app reads it behind its one trusted proxy (the load tool's
    app runs with SPECVIZ_TRUSTED_PROXIES=1, and each client sends the address a proxy would): every
    honest visitor one of their own, the hostile client others (`block`)."""
    return f"10.{block}.{visitor // 250 % 250}.{visitor % 250 + 1}"


def client(url: str, visitor: int, block: int = 53) -> Any:
    """A gradio_client Client as visitor `visitor` (`address`)."""
    from gradio_client import Client

    return Client(url, verbose=False, headers={"X-Forwarded-For": address(visitor, block)})


def race_args(pair: str, methods: list[str], max_new_tokens: int, i: int) -> tuple:
    """The /race API's inputs: pair, prompt, methods, method options (none: the defaults), max new
    tokens, T, top-p, seed."""
    return pair, PROMPTS[i % len(PROMPTS)], methods, {}, max_new_tokens, 0.0, 1.0, 0


BUG = ("This is a bug", "specviz failed")  # what a refusal must never say


def probe(name: str, expect: str, call: Any, fair: str = "", says: str = "") -> dict[str, Any]:
    """Run one hostile probe: `call()` returns what came back, or raises (a refusal). `expect`:
    'refused' (one line, not a bug), 'done', or 'any' (either); a one-line refusal naming `fair` is as
    good as done (a shared bound that other visitors reached first); `says`: what the answer must say."""
    start = time.perf_counter()
    try:
        outcome, message = "done", str(call())[:300]
    except Exception as e:  # gradio_client raises the app's refusal: the figure is its message
        log.debug("probe %s refused", name, exc_info=e)
        outcome, message = "refused", f"{type(e).__name__}: {e}"[:300]
    one_line = "\n" not in message.strip() and not any(b in message for b in BUG)
    return {
        "probe": name,
        "expected": expect,
        "outcome": outcome,
        "ok": (outcome == expect or expect == "any" or (bool(fair) and fair in message))
        and (one_line or outcome == "done")
        and says in message,
        "seconds": round(time.perf_counter() - start, 2),
        "message": message,
    }
