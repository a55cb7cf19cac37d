"""The app's command line: `python app.py` (a Space's entry) and the `specviz` console script.

    specviz                            # http://127.0.0.1:7860, the default pair
    specviz --pair tiny-random --port 7861 --share
    specviz --device cuda --dtype bfloat16     # float32 is the default wherever the pair fits (lossless)

GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured (Hugging Face Spaces sets them). What one
visitor may ask for is bounded (specviz/serving/limits.py; SPECVIZ_LIMIT_* environment variables).
The pair the page opens with loads at start-up, before anything is served (a pair that cannot load
here is refused in one line); on a ZeroGPU Space every model call then runs in a worker with a GPU
(`spaces.GPU`, specviz/serving/gpu.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from specviz.errors import SpecvizError
from specviz.limits import check_count
from specviz.serving.limits import app_limits
from specviz.ui import build_app, launch

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)


def zerogpu() -> Callable[..., Any] | None:
    """spaces.GPU when running on a Hugging Face ZeroGPU Space, else None. Imported before torch
    touches CUDA (ZeroGPU requires it); gradio's wrapping of every handler in it is turned off, so
    that only model calls take a GPU."""
    try:
        import spaces
        from spaces.config import Config
    except ImportError:
        return None
    if not Config.zero_gpu:
        return None
    spaces.disable_gradio_auto_wrap()
    return spaces.GPU


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pair",
        default=os.environ.get("SPECVIZ_PAIR", "default"),
        help="model pair shown first (default: %(default)s)",
    )
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument(
        "--port",
        default=os.environ.get("GRADIO_SERVER_PORT", "7860"),
        help="TCP port, 1 to 65535 (default: %(default)s)",
    )
    parser.add_argument("--share", action="store_true", help="also serve on a public gradio.live link")
    parser.add_argument(
        "--device",
        default=os.environ.get("SPECVIZ_DEVICE", "auto"),
        help="where the models run: auto (a CUDA GPU, else MPS, else the CPU), cpu, cuda, cuda:N or mps",
    )
    parser.add_argument(
        "--dtype",
        default=os.environ.get("SPECVIZ_DTYPE", "auto"),
        help="auto (float32 unless the pair is too big for it: greedy output then equals the target's "
        "token for token), float32, bfloat16 or float16",
    )
    parser.add_argument(
        "--vllm-url",
        action="append",
        metavar="NAME=URL",
        help="race the vLLM row NAME (vllm, vllm_ngram, vllm_draft, vllm_suffix) on the vLLM server at URL instead "
        "of one specviz starts; repeatable (or SPECVIZ_VLLM_URLS=NAME=URL,...)",
    )
    args = parser.parse_args(argv)
    log_lines()
    gpu = zerogpu()  # before torch is imported (ZeroGPU patches it)
    from specviz.models.devices import resolve_device, resolve_dtype

    try:
        port = port_number(args.port)
        from specviz.engines.vllm import urls_from_env
        from specviz.methods.vllm import give_urls

        give_urls(args.vllm_url or urls_from_env())
        limits = app_limits()
        resolve_dtype(args.dtype, resolve_device(args.device))  # a bad --device or --dtype fails here, not on the page
        if gpu is None:  # on ZeroGPU build_app loads the pairs it serves, now
            notice = served_pair(args.pair, args.device, args.dtype)[1]
            if notice:
                log.warning(notice)
        demo = build_app(pair=args.pair, gpu=gpu, limits=limits, device=args.device, dtype=args.dtype)
    except SpecvizError as e:
        parser.exit(2, f"error: {e}\n")
    launch(demo, server_name=args.host, server_port=port, share=args.share)


def served_pair(name: str, device: str, dtype: str) -> tuple[Any, str | None]:
    """(pair, notice) of the pair the page opens with, loaded before the server starts: a server that
    cannot load it refuses to start rather than tell every visitor so. It is the cached load
    (specviz.load_pair) the first visitor then gets, so it costs nothing extra; offline, 'default'
    still falls back to the tiny-random pair with a notice (specviz.ui.pairs.resolve_pair)."""
    from specviz.ui.pairs import Placement, resolve_pair

    try:
        return resolve_pair(name, None, Placement(device, dtype))
    except SpecvizError as e:
        raise SpecvizError(f"cannot serve the pair {name!r}: {e}") from None


def port_number(text: str) -> int:
    """--port (GRADIO_SERVER_PORT by default) as a TCP port, or a SpecvizError before the app is built."""
    try:
        port = int(text)
    except ValueError:
        raise SpecvizError(f"--port (or GRADIO_SERVER_PORT) must be a whole number, got {text!r}") from None
    return check_count("--port (or GRADIO_SERVER_PORT)", port, most=65535)


class Stderr(logging.StreamHandler):
    """A StreamHandler on whatever sys.stderr is when a line is written: a host (or a test) that
    replaces and closes the stderr it had does not leave specviz writing to a closed stream."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def log_lines() -> None:
    """specviz's own log lines (a refused input: one INFO line; a fault: its traceback) on stderr, once
    however often main runs."""
    logger = logging.getLogger("specviz")
    if not any(isinstance(h, Stderr) for h in logger.handlers):
        handler = Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


if __name__ == "__main__":
    main()
