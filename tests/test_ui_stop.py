"""Stop on the long handlers besides the Race's (issue 41): the DISCO tab's comparison ends after the
method being timed, and says how far it got."""

from __future__ import annotations

import gradio as gr

from specviz.serving.stops import KeyedStop, forget_stop, request_stop
from specviz.ui import disco
from tests.conftest import tab_context


class StopAfter:
    """Set once `is_set` has been asked `n` times (a Stop pressed while the n-th method runs)."""

    def __init__(self, n: int):
        self.asked, self.n = 0, n

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.n


def test_disco_vs_oracle_stops_between_methods(perturbed_pair):
    out = disco.disco_vs_oracle(perturbed_pair, "def f(x):", None, None, 8, repeats=1, stop=StopAfter(2))
    assert out["stopped"] and [row["method"] for row in out["rows"]] == [disco.AR_LABEL, "DISCO"]
    whole = disco.disco_vs_oracle(perturbed_pair, "def f(x):", None, None, 8, repeats=1, stop=StopAfter(99))
    assert not whole["stopped"] and len(whole["rows"]) == 4


def test_the_disco_tabs_stop_reaches_its_model_call(perturbed_pair, monkeypatch):
    with gr.Blocks() as demo:
        disco.build_tab(tab_context(load_pair=lambda name: perturbed_pair))
    fns = {f.fn.__name__: f for f in demo.fns.values() if f.fn is not None}
    assert fns["set"].api_name == "stop_disco"  # the Stop button's event
    from specviz.serving import stops

    monkeypatch.setattr(stops, "new_stop_key", lambda: "pressedbefore")
    request_stop("pressedbefore")  # as if Stop was pressed the moment the call began
    try:
        card, table, plot_sl, *_ = fns["run"].fn("tiny-perturbed", "def f(x):", True, 0.5, 8, 8, 1, KeyedStop())
    finally:
        forget_stop("pressedbefore")
    assert card.startswith("**Stopped** after 0 of 4 methods") and table.empty and plot_sl is None


def test_a_closed_page_stops_its_disco_comparison(perturbed_pair, monkeypatch):
    """The page's unload event stops the visitor's runs (the app's `LeftPages`): the DISCO tab's too."""
    from types import SimpleNamespace

    with gr.Blocks() as demo:
        disco.build_tab(ctx := tab_context(load_pair=lambda name: perturbed_pair))
    run = next(f.fn for f in demo.fns.values() if f.fn is not None and f.fn.__name__ == "run")
    real = disco.disco_vs_oracle

    def closed_during(*args, **kwargs):
        ctx.left.stop("page-1")  # the page closes while the first method is timed
        return real(*args, **kwargs)

    monkeypatch.setattr(disco, "disco_vs_oracle", closed_during)
    card, *_ = run(
        "tiny-perturbed", "def f(x):", True, 0.5, 8, 8, 1, KeyedStop(), SimpleNamespace(session_hash="page-1")
    )
    assert card.startswith("**Stopped** after 0 of 4 methods")
