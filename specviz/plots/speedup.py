"""Speedup figures from the closed-form formulas (Leviathan et al.; OSD Fig. 2; SSSD Fig. 2) and a
predicted-vs-measured comparison per method. Pure functions: parameters or plain rows -> Figure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from specviz.cost.formulas import optimal_gamma, speedup_curve, speedup_with_verify_cost
from specviz.plots.roofline import PALETTE

VerifyRatio = Callable[[int], float] | Sequence[float] | None


def improvement_curves_figure(
    alphas: Sequence[float],
    c: float,
    max_gamma: int = 16,
    verify_ratio: VerifyRatio = None,
    highlight: float | None = None,
) -> go.Figure:
    """Improvement factor vs speculation length γ, one curve per α, the optimal γ starred.

    verify_ratio: T(γ+1)/T(1) (a function or a sequence indexed by γ); None is Leviathan's 1.
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
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="autoregressive decoding")
    cost = "T(γ+1)/T(1) from the roofline" if verify_ratio is not None else "verification as cheap as one step"
    fig.update_layout(
        title={
            "text": "Expected speedup vs speculation length",
            "subtitle": {"text": f"c = {c:g}; {cost}; ★ = optimal γ"},
        },
        margin={"t": 80},
        xaxis_title="speculation length γ",
        yaxis_title="improvement factor (× autoregressive)",
        legend_title="acceptance rate",
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
        text=[f"α={r['alpha']:.2f}, {r['length_text']}, c={r['c']:.2f}" for r in rows],
        textposition="outside",
    )
    fig.add_bar(x=methods, y=[r["measured_speedup"] for r in rows], name="measured", marker_color=PALETTE[1])
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="autoregressive decoding")
    fig.update_layout(
        title="Predicted (by each method's family's formula) vs measured speedup",
        barmode="group",
        xaxis_title="method",
        yaxis_title="speedup (× autoregressive)",
        legend_title="",
    )
    return fig
