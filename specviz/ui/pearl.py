"""The PEARL tab: vanilla SD and PEARL on one prompt, drawn as a timeline of which model runs when
(mutual waiting in grey), with PEARL's mode (pre-verify / post-verify) at every step."""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui.feedback import user_error
from specviz.ui.gpu import gpu_seconds

TAB_TITLE = "PEARL: parallel drafting"
TAB_ORDER = 50
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
INTRO = (
    "**PEARL** (Liu et al. 2024) runs the draft and the target at the same time. *Pre-verify*: while the "
    "draft writes γ tokens, the target reads the prefix and checks the first one; a wrong first token "
    "restarts drafting at once. *Post-verify*: while the target verifies, the draft keeps drafting as if "
    "everything will be accepted; if it is, the next verification starts immediately, so the draft length "
    "grows while the draft is right. γ defaults to round(T_target / T_draft), measured (Theorem 1; PEARL's c, the "
    "inverse of the draft cost c of the Race and Theory tabs), and vanilla SD runs at the same γ. Greedy decoding: "
    "every method emits the same text. *Threads* runs the two models truly at once (a thread each); on a "
    "machine with few shared cores they slow each other down, so the *parallel-ideal* time (each step's "
    "shorter job hidden behind the longer one) is shown too."
)


# the tables' columns (shown before the first run too)
ROW_COLUMNS = [
    "method",
    "runs (median shown)",
    "tokens",
    "steps",
    "measured ms/token",
    "parallel-ideal ms/token",
    "draft idle",
    "target idle",
]
STEP_COLUMNS = ["step", "mode", "verified drafts", "accepted", "emitted", "dropped / drafted ahead", "ran in parallel"]


def compare(
    pair: Any, prompt: str, window: int, concurrent: bool, max_new_tokens: int, repeats: int = 3
) -> dict[str, Any]:
    """Run vanilla (γ = PEARL's window) and PEARL on one prompt, each warmed up and timed `repeats`
    times (the median run is shown); rows, per-step modes and the records. PEARL's target lane runs
    on the app's thread for it, as in a race."""
    from specviz.methods.pearl_lanes import optimal_window
    from specviz.plots.timeline import idle_fractions
    from specviz.runner import generate_median
    from specviz.serving import threads

    gamma = int(window) or optimal_window(pair)
    runs = {
        f"vanilla (γ={gamma})": ("vanilla", {"speculation_length": gamma}),
        f"PEARL (γ={gamma})": ("pearl", {"window": gamma, "concurrent": bool(concurrent)}),
    }
    rows, records, steps = [], {}, []
    for label, (method, options) in runs.items():
        result = generate_median(
            method,
            pair,
            prompt,
            repeats=repeats,
            max_new_tokens=int(max_new_tokens),
            executor=threads.on(threads.PEARL_TARGET),
            **options,
        )
        s, idle = result.summary, idle_fractions(result.records)
        ideal = sum(p.ideal_s if (p := r.pearl()) else r.t_end - r.t_start for r in result.records)
        rows.append(
            {
                "method": label,
                "runs (median shown)": repeats,
                "tokens": s.new_tokens,
                "steps": s.iterations,
                "measured ms/token": round(1e3 * s.wall_s / max(1, s.new_tokens), 1),
                "parallel-ideal ms/token": round(1e3 * ideal / max(1, s.new_tokens), 1),
                "draft idle": f"{idle['draft']:.0%}",
                "target idle": f"{idle['target']:.0%}",
            }
        )
        records[label] = [r.to_dict() for r in result.records]  # plain data: the timeline is drawn where the page is
        if method == "pearl":
            decode = pair.tokenizer.decode
            steps = [
                {
                    "step": r.iteration,
                    "mode": p.mode,
                    "verified drafts": decode(list(r.drafted)),
                    "accepted": r.accepted,
                    "emitted": decode(list(r.emitted)),
                    "dropped / drafted ahead": decode(list(p.dropped or p.drafted_ahead or ())),
                    "ran in parallel": any(phase.parallel for phase in p.phases),
                }
                for r in result.records
                if (p := r.pearl())
            ]
    return {"rows": rows, "records": records, "steps": steps}


def build_tab(ctx: Any) -> None:
    import pandas as pd

    from specviz.plots.timeline import timeline

    gr.Markdown(INTRO)
    with gr.Row():
        prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, scale=3)
        with gr.Column(scale=2):
            window = gr.Slider(0, 32, value=0, step=1, label="Window γ (0: round(T_target / T_draft), measured)")
            concurrent = gr.Checkbox(True, label="Threads: draft and target truly at the same time")
            max_new = gr.Slider(8, 256, value=64, step=8, label="Max new tokens")
            repeats = gr.Slider(
                1, 5, value=3, step=1, label="Timed runs of each (after a warm-up; the median is shown)"
            )
    run_btn = gr.Button("Run vanilla vs PEARL", variant="primary")
    table = gr.Dataframe(headers=ROW_COLUMNS, label="This prompt", interactive=False)
    plot = gr.Plot(label="Timeline: which model runs when", show_label=False)
    steps = gr.Dataframe(headers=STEP_COLUMNS, label="PEARL step by step", interactive=False)

    # the model call (plain data in and out): vanilla and PEARL, each a warm-up and k timed runs of n tokens
    compared = ctx.run_models(
        lambda pair_name, text, w, conc, n, k: compare(ctx.load_pair(pair_name), text, w, conc, n, k),
        seconds=lambda pair_name, text, w, conc, n, k: gpu_seconds(2 * (k + 1) * n),
    )

    def run(pair_name: str, text: str, w: float, conc: bool, n: float, k: float):
        try:
            out = compared(pair_name, text, int(w), bool(conc), int(n), int(k))
        except Exception as e:  # a user's mistake, or a fault: one message, logged once
            raise user_error(e) from None
        return pd.DataFrame(out["rows"]), timeline(out["records"]), pd.DataFrame(out["steps"])

    run_btn.click(
        run,
        [ctx.pair, prompt, window, concurrent, max_new, repeats],
        [table, plot, steps],
        api_name="pearl",
        **ctx.models_queue(),
    )
