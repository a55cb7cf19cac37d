"""The Theory tab's views of the last race without a server: each view gets its own widgets' values and the
race passed explicitly (not read off the end of its inputs), and the last-race view says what to do before a
race has run, now that it is drawn when the tab opens and when a race finishes."""

from __future__ import annotations

from types import SimpleNamespace

from specviz.ui.theory import RaceView, follow_the_race, race_view


def test_each_view_gets_its_own_inputs_then_the_race():
    import gradio as gr

    seen: list[tuple] = []

    def draw(*values):
        seen.append(values)
        return f"drawn from {values}"

    with gr.Blocks() as demo:
        ctx = SimpleNamespace(race=gr.State(None))
        a, b = gr.Number(1), gr.Number(2)
        views = [RaceView([a, b], [gr.Markdown()], draw), RaceView([], [gr.Markdown()], draw)]
        follow_the_race(ctx, views)
    finished = SimpleNamespace(runs=[SimpleNamespace(status="done")])
    redraw = next(f.fn for f in demo.fns.values() if f.fn is not None and f.fn.__name__ == "redraw")
    out = redraw(10, 20, finished)
    assert seen == [(10, 20, finished), (finished,)]
    assert out[:2] == (f"drawn from {(10, 20, finished)}", f"drawn from {(finished,)}")


def test_the_last_race_view_asks_for_a_race_not_a_button_press():
    plot, text = race_view(None)
    assert plot is None and text == "Run a race first (Race tab): it is explained here once it finishes."
    assert "button" not in text
