"""The specviz app (gradio): the Race tab first, then every feature tab found in this package.

A feature tab is a module `specviz/ui/<feature>.py` defining `TAB_TITLE: str`, `TAB_ORDER: int` and
`build_tab(ctx: TabContext) -> None` (called inside `gr.Tab(TAB_TITLE)`); `build_app` finds it, so
adding a tab needs no edit elsewhere. Modules here never import torch at module level.
"""

from __future__ import annotations

from typing import Any


def build_app(
    pair: str = "default", gpu: Any = None, limits: Any = None, device: str = "auto", dtype: str = "auto"
) -> Any:
    """The Blocks of the whole app (see specviz.ui.blocks); `device`, `dtype`: where and how every pair loads."""
    from specviz.ui.blocks import build_app as build
    from specviz.ui.pairs import Placement

    return build(pair=pair, gpu=gpu, limits=limits, placement=Placement(device, dtype))


def launch(demo: Any, **kwargs: Any) -> Any:
    """demo.launch with the app's theme and CSS (gradio 6 takes them at launch)."""
    from specviz.ui.blocks import launch as go

    return go(demo, **kwargs)
