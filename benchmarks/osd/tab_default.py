"""The Online tab's default stream, served through the tab's own handler on the default pair: what a
visitor who presses "Serve the stream" without changing anything sees (benchmarks/osd/README.md).

    OMP_NUM_THREADS=1 python benchmarks/osd/tab_default.py

Prints each request's acceptances (online vs static draft), α per cycle of the repeated prompts, the
summary line, the wall time, and the token analysis ("Which tokens did the draft learn?").
"""

import time

import gradio as gr

import specviz
from specviz.osd.analysis import window_alpha
from specviz.ui import online
from specviz.ui.blocks import TabContext


def main() -> None:
    pair = specviz.load_pair("default")
    with gr.Blocks() as demo:
        ctx = TabContext(pair=gr.Dropdown(["default"], value="default"), pair_status=gr.Markdown(), race=gr.State(None))
        ctx.load_pair = lambda name: pair
        online.build_tab(ctx)
    handlers = {f.fn.__name__: f.fn for f in demo.fns.values() if f.fn is not None}
    serve = next(f for f in demo.fns.values() if f.fn is handlers["on_serve"])
    values = {getattr(b, "label", None): getattr(b, "value", None) for b in serve.inputs}  # the page's defaults
    print("defaults:", values)
    t0 = time.perf_counter()
    for out in handlers["on_serve"](*[getattr(b, "value", None) for b in serve.inputs], None):
        r = out[0]["rows"][-1]
        print(
            f"{time.perf_counter() - t0:6.1f} s  request {r['request'] + 1:2d} {r['prompt_id']}: accepted / tested "
            f"online {r['osd_accepted']}/{r['osd_tested']}, static {r['static_accepted']}/{r['static_tested']} "
            f"(draft version {r['draft_version']})",
            flush=True,
        )
    state, rows = out[0], out[0]["rows"]
    print(f"served in {time.perf_counter() - t0:.0f} s\n{out[1]}")
    cycle = int(values["distinct prompts per suite (0: all; small: a repetitive stream)"]) or len(rows)
    for lo in range(0, len(rows), cycle):
        part = rows[lo : lo + cycle]
        print(
            f"requests {lo + 1}-{lo + len(part)}: α online {window_alpha(part, 'osd'):.3f}, "
            f"static {window_alpha(part, 'static'):.3f}"
        )
    t1 = time.perf_counter()
    _, table = handlers["on_analyse"](state, values["moving window (requests)"])
    print(f"token analysis in {time.perf_counter() - t1:.0f} s\n{table}")


if __name__ == "__main__":
    main()
