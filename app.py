"""specviz: race speculative decoding methods in the browser.

    python app.py                      # http://127.0.0.1:7860, the default pair
    python app.py --pair tiny-random --port 7861 --share

GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured (Hugging Face Spaces sets them). On a ZeroGPU
Space (the `spaces` package is importable) model runs are wrapped in `spaces.GPU`.
"""

from __future__ import annotations

import argparse
import os

from specviz.ui import build_app, launch


def zerogpu():
    """spaces.GPU when running on a Hugging Face ZeroGPU Space, else None."""
    try:
        import spaces
    except ImportError:
        return None
    return spaces.GPU(duration=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default=os.environ.get("SPECVIZ_PAIR", "default"), help="model pair shown first (default: %(default)s)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="also serve on a public gradio.live link")
    args = parser.parse_args(argv)
    launch(build_app(pair=args.pair, gpu=zerogpu()), server_name=args.host, server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
