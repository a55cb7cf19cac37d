"""Speedup figures from the closed-form formulas (Leviathan et al.; OSD Fig. 2; SSSD Fig. 2) and a
predicted-vs-measured comparison per method. Pure functions: parameters or plain rows -> Figure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from specviz.cost.families import tree_speedup
from specviz.cost.formulas import optimal_gamma, speedup_curve, speedup_with_verify_cost
from specviz.plots.roofline import PALETTE

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
        fig.add_scatter(
            x=gammas, y=ys, mode="lines", line={"color": colour, "width": width}, name=f"α={a:.2f}", legendgroup=f"{a}"
        )
        g = optimal_gamma(a, c, max_gamma, verify_ratio)
        fig.add_scatter(
            x=[g],
            y=[ys[g - 1]],
            mode="markers",
            marker={"symbol": "star", "size": 14, "color": colour},
            name=f"best γ={g}",
            legendgroup=f"{a}",
            showlegend=False,
            hovertemplate=f"α={a:.2f}: best γ={g}, speedup %{{y:.2f}}×",
        )
    _add_points(fig, points)
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="autoregressive decoding")
    cost = "T(γ+1)/T(1) from the roofline" if verify_ratio is not None else "verification as cheap as one step"
    fig.update_layout(
        title={
            "text": "Expected speedup vs speculation length",
            "subtitle": {"text": cost_note or f"c = {c:g}; {cost}; ★ = optimal γ"},
        },
        margin={"t": 80},
        xaxis_title="speculation length γ",
        yaxis_title="improvement factor (× autoregressive)",
        legend_title="acceptance rate",
    )
    return fig


def _add_points(fig: go.Figure, points: Sequence[dict[str, Any]]) -> None:
    """Measured runs as black diamonds, each labelled (a race's own methods on the predicted curves)."""
    if points:
        fig.add_scatter(
            x=[p["x"] for p in points],
            y=[p["y"] for p in points],
            mode="markers+text",
            text=[p["label"] for p in points],
            textposition="middle right",
            cliponaxis=False,
            marker={"symbol": "diamond", "size": 13, "color": "black", "line": {"width": 1, "color": "white"}},
            name="the last race (measured)",
            hovertext=[p.get("hover", p["label"]) for p in points],
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
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="autoregressive decoding")
    fig.update_layout(
        title={"text": f"Tree of S nodes, depth {depth}: expected speedup", "subtitle": {"text": cost_note}},
        margin={"t": 80},
        xaxis_title="tree size S (drafted nodes verified in one pass)",
        yaxis_title="improvement factor (× autoregressive)",
        legend_title="α along the path",
    )
    return fig


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
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(
        title="Expected speedup vs acceptance rate α",
        xaxis_title="acceptance rate α",
        yaxis_title="improvement factor (× autoregressive)",
        legend_title="draft cost c = T_draft/T_target",
    )
    return fig


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
        name="optimal γ",
    )
    fig.update_layout(
        title=f"Speedup over (α, γ) at c = {c:g}",
        xaxis_title="acceptance rate α",
        yaxis_title="speculation length γ",
        legend={"x": 0.01, "y": 0.99},
    )
    return fig


def predicted_vs_measured_speedup_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Per method: the speedup its family's formula predicts from its measured α, speculation length,
    c and verify cost, next to the speedup measured in the race. Rows (`specviz.cost.from_records.explain_run`):
    method, predicted_speedup, measured_speedup, alpha, length_text, c."""
    methods = [r["method"] for r in rows]
    fig = go.Figure()
    fig.add_bar(
        x=methods,
        y=[r["predicted_speedup"] for r in rows],
        name="predicted",
        marker_color=PALETTE[0],
        text=[f"α={r['alpha']:.2f}<br>{r['length_text']}<br>c={r['c']:.2f}" for r in rows],
        textposition="outside",
        cliponaxis=False,
    )
    fig.add_bar(x=methods, y=[r["measured_speedup"] for r in rows], name="measured", marker_color=PALETTE[1])
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="autoregressive decoding")
    top = max([r[k] for r in rows for k in ("predicted_speedup", "measured_speedup")] + [1.0])
    fig.update_yaxes(range=[0, top * 1.35])  # room above the bars for their three-line labels
    fig.update_layout(
        margin={"t": 70},
        title="Predicted (by each method's family's formula) vs measured speedup",
        barmode="group",
        xaxis_title="method",
        yaxis_title="speedup (× autoregressive)",
        legend_title="",
    )
    return fig
