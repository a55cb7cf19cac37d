"""What the app grants one visitor of a public page; a private deployment changes any of it with an
environment variable named after the field, e.g.

    SPECVIZ_LIMIT_MAX_NEW_TOKENS=1024 SPECVIZ_LIMIT_OSD_REQUESTS=400 python app.py

The library's own sanity bounds, which apply whatever the app allows, are `specviz.limits`'.
Every refusal is one SpecvizError naming the limit, so a user knows what to change.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair

ENV_PREFIX = "SPECVIZ_LIMIT_"


@dataclass(frozen=True)
class AppLimits:
    """What one visitor of the app may ask for (defaults suit a public Hugging Face Space)."""

    prompt_tokens: int = 1024  # tokens of one prompt after the chat template
    max_new_tokens: int = 512  # tokens one method generates for one prompt
    speculation_length: int = 16  # draft tokens per iteration
    tree_nodes: int = 64  # nodes of one verification tree (SSSD's S)
    methods_per_race: int = 14  # methods in one race, each listed once (every registered method)
    osd_requests: int = 100  # requests in one Online-learning stream
    # online learners holding their own draft weights at once, all visitors (size: benchmarks/reliability/README.md)
    adapted_drafts: int = 4
    queue_size: int = 32  # visitors waiting for the models; more are asked to come back later
    admitted_runs: int = 8  # runs in the models' line at once (they take turns); later ones wait in gradio's queue
    # visitors whose session is kept (~1 MB each on the tiny pair); beyond this the least recently active are dropped
    sessions: int = 64
    # a visitor's state (races, learners) and session are dropped this long after their last change or event
    session_ttl_s: int = 3600
    # places in the models' line one network address (specviz.serving.visitors) may hold at once, a
    # race taking one: a classroom behind one NAT address shares them, so raise it for a class (its
    # runs then rank as one visitor's: they wait behind every other address's first run)
    places_per_address: int = 2
    upload_files: int = 1  # files in one upload request (the page's upload fields and gradio_client send one)
    # files one network address may upload per `upload_window_s` (each costs a folder and a block on
    # disk however small it is); a classroom behind one NAT address shares them: raise it for a class
    uploads_per_address: int = 100
    upload_window_s: int = 600  # the window `uploads_per_address` counts over
    # Only the preset pairs in the pair field (no hub ids, no local paths). Set by SPECVIZ_PRESETS_ONLY
    # (1 or 0); on by default on a Hugging Face Space (SPACE_ID set), off elsewhere.
    presets_only: bool = False

    @staticmethod
    def env_names() -> list[str]:
        """The environment variable of every limit (the README's hosting table lists them all)."""
        return [_env_name(f.name) for f in dataclasses.fields(AppLimits)]


# A prompt longer than this many characters per allowed token is refused before it is tokenised: the
# default pair's tokenizer reads the README at 3.4 characters a token (its longest token, a run of
# spaces, is 81); a 1 MB prompt took 4.7-8.4 s to tokenise on the PEARL and DISCO tabs before its
# refusal, holding the models' turn (issue 41)
MOST_CHARS_PER_TOKEN = 32


def check_prompt_text(text: Any, limits: AppLimits) -> str:
    """`text` as a prompt short enough to tokenise at once (its tokens are checked after), or a
    SpecvizError that names the bound."""
    if not isinstance(text, str):
        raise SpecvizError(f"the prompt must be text, got {type(text).__name__}")
    most = limits.prompt_tokens * MOST_CHARS_PER_TOKEN
    if len(text) > most:
        raise SpecvizError(
            f"the prompt is {len(text)} characters long; a prompt here is at most {most} characters "
            f"({limits.prompt_tokens} tokens): shorten it"
        )
    return text


def prompt_ids(pair: ModelPair, prompt: Any, limits: AppLimits) -> list[int]:
    """The prompt's token ids, as every tab that runs a model on a visitor's prompt takes them: a
    text's characters checked before the tokenizer reads it (token ids a caller gives are read as
    they are, by specviz.encode_prompt), the tokens after."""
    import specviz

    text = check_prompt_text(prompt, limits) if isinstance(prompt, str) else prompt
    return check_prompt_tokens(specviz.encode_prompt(pair, text), limits)


def check_prompt_tokens(ids: list[int], limits: AppLimits) -> list[int]:
    """Token ids of a prompt within `limits.prompt_tokens`, or a SpecvizError that says so."""
    if len(ids) > limits.prompt_tokens:
        raise SpecvizError(
            f"the prompt is {len(ids)} tokens long; a prompt here takes at most {limits.prompt_tokens}: shorten it"
        )
    return ids


def app_limits(env: Mapping[str, str] | None = None) -> AppLimits:
    """The app's limits: the defaults, each overridden by SPECVIZ_LIMIT_<FIELD> when set."""
    environment: Mapping[str, str] = os.environ if env is None else env
    values: dict[str, Any] = {"presets_only": bool(environment.get("SPACE_ID"))}
    for field in dataclasses.fields(AppLimits):
        name, raw = _env_name(field.name), environment.get(_env_name(field.name), "").strip()
        if not raw:
            continue
        if field.name == "presets_only":
            if raw not in ("0", "1"):
                raise SpecvizError(f"{name} must be 1 or 0, got {raw!r}")
            values[field.name] = raw == "1"
            continue
        try:
            value = int(raw)
        except ValueError:
            raise SpecvizError(f"{name}={raw!r} is not a whole number") from None
        if not value > 0:
            raise SpecvizError(f"{name} must be positive, got {raw!r}")
        values[field.name] = value
    return AppLimits(**values)


def _env_name(field: str) -> str:
    return "SPECVIZ_PRESETS_ONLY" if field == "presets_only" else ENV_PREFIX + field.upper()
