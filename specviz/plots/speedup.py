"""Speedup figures from the closed-form formulas (Leviathan et al.; OSD Fig. 2; SSSD Fig. 2) and a
predicted-vs-measured comparison per method. Pure functions: parameters or plain rows -> Figure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from specviz.cost.families import c_text, tree_speedup
from specviz.cost.formulas import optimal_gamma, speedup_curve, speedup_with_verify_cost
from specviz.plots.roofline import PALETTE
from specviz.plots.theme import ALPHA, MARKERS, baseline, finish, plain, wrap

RACE_SYMBOLS = [m for m in MARKERS if m not in ("star", "circle")]  # stars: best γ; circle: the chosen S
VerifyRatio = Callable[[int], float] | Sequence[float] | None


def improvement_curves_figure(
    alphas: Sequence[float],
    c: float,
    max_gamma: int = 16,
    verify_ratio: VerifyRatio = None,
    highlight: float | None = None,
    cost_note: str | None = None,
    points: Sequence[dict[str, Any]] = (),
) -> go.Figure:
    """Improvement factor vs speculation length γ, one curve per α, the optimal γ starred.

    verify_ratio: T(γ+1)/T(1) (a function or a sequence indexed by γ); None is Leviathan's 1.
    cost_note: where c and the verify cost come from (the subtitle). points: measured runs drawn on
    the curves, dicts with x (γ), y (speedup), label (shown) and hover.
    """
    gammas = list(range(1, max_gamma + 1))
    fig = go.Figure()
    for i, a in enumerate(alphas):
        colour = PALETTE[i % len(PALETTE)]
        ys = speedup_curve(a, c, gammas, verify_ratio)
        width = 4 if highlight is not None and abs(a - highlight) < 1e-9 else 2
        fig.add_scatter(x=gammas, y=ys, mode="lines", line={"color": colour, "width": width}, name=f"α={a:.2f}")
        g = optimal_gamma(a, c, max_gamma, verify_ratio)
        fig.add_scatter(
            x=[g],
            y=[ys[g - 1]],
            mode="markers",
            marker={"symbol": "star", "size": 14, "color": colour},
            name=f"best γ={g}",
            showlegend=False,
            hovertemplate=f"α={a:.2f}: best γ={g}, speedup %{{y:.2f}}×",
        )
    fig.add_scatter(  # the stars' key: with a measured cost_note the subtitle has no room to explain them
        x=[None],
        y=[None],
        mode="markers",
        marker={"symbol": "star", "size": 12, "color": "grey"},
        name="best γ for its α",
    )
    _add_points(fig, points)
    baseline(fig)
    cost = "T(γ+1)/T(1) from the roofline" if verify_ratio is not None else "verification as cheap as one step"
    return finish(
        fig,
        "Speedup vs speculation length γ",
        "speculation length γ",
        "speedup (× autoregressive)",
        legend=ALPHA,
        subtitle=wrap(cost_note or f"c = {c:g}; {cost}"),
        height=460,
    )


def _add_points(fig: go.Figure, points: Sequence[dict[str, Any]]) -> None:
    """Measured runs (a race's own methods on the predicted curves) in black, one shape and legend entry
    ("race: ...") each: labels written beside the points overlapped one another and the curves wherever
    runs crowd."""
    for i, p in enumerate(points):
        fig.add_scatter(
            x=[p["x"]],
            y=[p["y"]],
            mode="markers",
            cliponaxis=False,
            marker={"symbol": RACE_SYMBOLS[i % len(RACE_SYMBOLS)], "size": 13, "color": "black"},
            name=f"race: {plain(p['label'])}",  # a race's labels may be a saved race's: text, not markup
            hovertext=plain(p.get("hover", p["label"])),
            hoverinfo="text",
        )


def tree_size_figure(
    alphas: Sequence[float],
    depth: int,
    c: float,
    verify_ratio: Callable[[int], float],
    max_size: int = 64,
    highlight: float | None = None,
    size: int | None = None,
    cost_note: str = "",
    points: Sequence[dict[str, Any]] = (),
) -> go.Figure:
    """The tree family's formula E[tokens](α, D) / (Sc + T(S+1)/T(1)) vs the tree's size S at depth D, one
    curve per α (α: the chance the accepted path goes one level deeper); the chosen S circled."""
    sizes = list(range(depth, max_size + 1))
    fig = go.Figure()
    for i, a in enumerate(alphas):
        colour = PALETTE[i % len(PALETTE)]
        ys = [tree_speedup(a, depth, s, c, verify_ratio(s)) for s in sizes]
        chosen = highlight is not None and abs(a - highlight) < 1e-9
        fig.add_scatter(
            x=sizes, y=ys, mode="lines", line={"color": colour, "width": 4 if chosen else 2}, name=f"α={a:.2f}"
        )
        if chosen and size is not None and depth <= size <= max_size:
            fig.add_scatter(
                x=[size],
                y=[ys[size - depth]],
                mode="markers",
                marker={"symbol": "circle-open", "size": 16, "color": colour, "line": {"width": 3}},
                name=f"S = {size}",
                hovertemplate=f"α={a:.2f}, S={size}, D={depth}: %{{y:.2f}}×<extra></extra>",
            )
    _add_points(fig, points)
    baseline(fig)
    return finish(
        fig,
        f"Tree speedup vs size S (depth {depth})",
        "tree size S (nodes in one pass)",
        "speedup (× autoregressive)",
        legend="α (the path goes a level deeper)",
        subtitle=wrap(cost_note) if cost_note else None,
        height=460,
    )


def speedup_vs_alpha_figure(cs: Sequence[float], max_gamma: int = 16, fixed_gamma: int | None = None) -> go.Figure:
    """Speedup vs α at the optimal γ for each draft cost c (the family in OSD Fig. 2); dotted: a fixed γ."""
    alphas = np.linspace(0.0, 0.99, 100)
    fig = go.Figure()
    for i, c in enumerate(cs):
        colour = PALETTE[i % len(PALETTE)]
        best = [speedup_with_verify_cost(a, optimal_gamma(a, c, max_gamma), c, 1.0) for a in alphas]
        fig.add_scatter(x=alphas, y=best, mode="lines", line={"color": colour, "width": 2.5}, name=f"c={c:g}, best γ")
        if fixed_gamma:
            fixed = [speedup_with_verify_cost(a, fixed_gamma, c, 1.0) for a in alphas]
            fig.add_scatter(
                x=alphas, y=fixed, mode="lines", line={"color": colour, "dash": "dot"}, name=f"c={c:g}, γ={fixed_gamma}"
            )
    baseline(fig)
    return finish(
        fig, "Expected speedup vs α", ALPHA, "speedup (× autoregressive)", legend="draft cost c = T_draft/T_target"
    )


def speedup_heatmap_figure(
    c: float, max_gamma: int = 16, verify_ratio: VerifyRatio = None, n_alpha: int = 50
) -> go.Figure:
    """Improvement factor over (α, γ), with the optimal γ for each α traced on top."""
    alphas = np.linspace(0.02, 0.98, n_alpha)
    gammas = list(range(1, max_gamma + 1))
    z = [speedup_curve(a, c, gammas, verify_ratio) for a in alphas]  # [α, γ]
    fig = go.Figure(
        go.Heatmap(
            x=alphas,
            y=gammas,
            z=np.array(z).T,
            colorscale="Viridis",
            colorbar={"title": "speedup ×"},
            hovertemplate="α=%{x:.2f}, γ=%{y}: %{z:.2f}×",
        )
    )
    fig.add_scatter(
        x=alphas,
        y=[optimal_gamma(a, c, max_gamma, verify_ratio) for a in alphas],
        mode="lines",
        line={"color": "white", "width": 3, "shape": "hv"},
        name="white line: optimal γ",  # its legend swatch is white on white
    )
    finish(fig, f"Speedup over (α, γ) at c = {c:g}", ALPHA, "speculation length γ", legend="")
    return fig.update_traces(colorbar={"title": {"text": "speedup (×)"}}, selector={"type": "heatmap"})


def predicted_vs_measured_speedup_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Per method: the speedup its family's formula predicts from its measured α, speculation length,
    c and verify cost, next to the speedup measured in the race. Rows (`specviz.cost.from_records.explain_run`):
    method, predicted_speedup, measured_speedup, alpha, length_text, c. Each bar says its own speedup;
    the formula's inputs are in the hover and in the table under the plot (written over the bars, three
    lines a bar, they overlapped their neighbours and shrank to specks on a phone)."""
    methods = [wrap(plain(r["method"]), 10) for r in rows]  # "SSSD (n-gram tree)" turned ran off a phone's plot
    inputs = [f"{plain(r['method'])}: α = {r['alpha']:.2f}, {r['length_text']}, {c_text(r, 2)}" for r in rows]
    fig = go.Figure()
    for name, key, colour in (
        ("predicted", "predicted_speedup", PALETTE[0]),
        ("measured", "measured_speedup", PALETTE[1]),
    ):
        fig.add_bar(
            x=methods,
            y=[r[key] for r in rows],
            name=name,
            marker_color=colour,
            texttemplate="%{y:.2f}×",
            textposition="outside",
            cliponaxis=False,
            hovertext=inputs,
            hovertemplate="%{hovertext}<br>" + name + ": %{y:.2f}×<extra></extra>",
        )
    baseline(fig)
    top = max([r[k] for r in rows for k in ("predicted_speedup", "measured_speedup")] + [1.0])
    fig.update_yaxes(range=[0, top * 1.35])  # room above the bars for their numbers
    fig.update_layout(barmode="group", uniformtext={"minsize": 11, "mode": "hide"})  # a number that fits, or none
    return finish(
        fig,
        "Predicted vs measured speedup",
        "method",
        "speedup (× autoregressive)",
        legend="",
        subtitle=wrap("predicted: each method's family's formula from its measured α, length, c and verify cost"),
        height=460,
        axis_px=120,  # a phone turns the method names: 70 px of them over the axis title
    )
