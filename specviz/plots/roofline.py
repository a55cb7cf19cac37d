"""Roofline figures: forward time vs tokens per sequence, one curve per batch size, and predicted vs
measured. Pure functions of plain rows (dicts with batch_size, n_tokens, seconds, ...)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from specviz.plots.theme import legend_below

# Okabe-Ito, one colour per batch size (colour-vision-deficiency safe).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "star", "hexagon", "pentagon", "triangle-down"]


def _by_batch(rows: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["batch_size"], r["n_tokens"])):
        out.setdefault(r["batch_size"], []).append(r)
    return out


def cost_curves_figure(
    predicted: Sequence[dict[str, Any]],
    measured: Sequence[dict[str, Any]] | None = None,
    title: str = "Forward time vs tokens per sequence",
    knees: dict[int, int | None] | None = None,
    normalize: bool = False,
) -> go.Figure:
    """Predicted curves (solid where memory-bound, dashed where compute-bound, when rows carry
    `bound`), measured points as markers, knees as open circles; log-log axes.

    normalize: plot T(S) / T(1) per batch size (the cost of verifying S-1 drafts relative to one
    decoding step) instead of milliseconds.
    """
    fig = go.Figure()
    measured_by_b = _by_batch(measured or [])
    for i, (b, rows) in enumerate(_by_batch(predicted).items()):
        colour = PALETTE[i % len(PALETTE)]
        base = rows[0]["seconds"] if normalize else 1e-3
        _model_lines(fig, b, rows, base, colour)
        knee = (knees or {}).get(b)
        if knee is not None and knee <= rows[-1]["n_tokens"]:
            _knee(fig, b, rows, base, colour, knee)
        if b in measured_by_b:
            _measured_points(fig, b, measured_by_b[b], normalize, colour)
    return _cost_layout(fig, [*predicted, *(measured or [])], title, normalize)


def _model_lines(fig: go.Figure, b: int, rows: Sequence[dict[str, Any]], base: float, colour: str) -> None:
    """Batch `b`'s predicted T(S) / `base`: solid where memory-bound, dashed where compute-bound (the two share
    the point where it switches)."""
    xs = [r["n_tokens"] for r in rows]
    ys = [r["seconds"] / base for r in rows]
    bounds = [r.get("bound", "memory") for r in rows]
    cut = next((k for k, bd in enumerate(bounds) if bd == "compute"), len(rows))
    fig.add_scatter(
        x=xs[: cut + 1],
        y=ys[: cut + 1],
        mode="lines",
        line={"color": colour, "width": 2.5},
        name=f"B={b} model",
        legendgroup=str(b),
    )
    if cut < len(rows):
        fig.add_scatter(
            x=xs[max(cut - 1, 0) :],
            y=ys[max(cut - 1, 0) :],
            mode="lines",
            line={"color": colour, "dash": "dash"},
            name=f"B={b} compute-bound",
            legendgroup=str(b),
            showlegend=False,
        )


def _knee(fig: go.Figure, b: int, rows: Sequence[dict[str, Any]], base: float, colour: str, k: int) -> None:
    """Batch `b`'s knee at S = `k`: an open circle on its curve (at the nearest predicted S)."""
    nearest = min(rows, key=lambda r: abs(r["n_tokens"] - k))
    fig.add_scatter(
        x=[k],
        y=[nearest["seconds"] / base],
        mode="markers",
        legendgroup=str(b),
        marker={"symbol": "circle-open", "size": 14, "color": colour, "line": {"width": 2}},
        name=f"B={b} knee (S={k})",
    )


def _measured_points(fig: go.Figure, b: int, m: Sequence[dict[str, Any]], normalize: bool, colour: str) -> None:
    """Batch `b`'s measured forward times as crosses (normalised by its own T(1) when `normalize`)."""
    base = m[0]["seconds"] if normalize else 1e-3
    fig.add_scatter(
        x=[r["n_tokens"] for r in m],
        y=[r["seconds"] / base for r in m],
        mode="markers",
        marker={"color": colour, "size": 9, "symbol": "x"},
        name=f"B={b} measured",
        legendgroup=str(b),
    )


def _cost_layout(fig: go.Figure, rows: Sequence[dict[str, Any]], title: str, normalize: bool) -> go.Figure:
    """Log-log axes from S = 1 to the widest S of `rows`, ticks at powers of 2, the title and the legend below."""
    # a pass carries at least one token: the axis starts at S = 1 (log10 1 = 0), markers there drawn whole
    widest = max([r["n_tokens"] for r in rows], default=1)
    fig.update_traces(cliponaxis=False)
    ticks = [2**k for k in range(int(math.log2(widest)) + 1)]  # 1, 2, 4, ...: the S a chain of γ = 2^k - 1 verifies
    fig.update_xaxes(
        type="log",
        range=[0.0, math.log10(widest * 1.1)],
        tickvals=ticks,
        ticktext=[str(t) for t in ticks],
        tickangle=0,
        title="tokens per sequence per pass, S = γ + 1",  # short enough for a phone's plot
    )
    fig.update_yaxes(type="log", title="T(S) / T(1)" if normalize else "time per forward pass (ms)", automargin=True)
    fig.update_layout(
        title={"text": title, "yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 16}},  # from the top
        legend_title="batch size B",
        hovermode="closest",
        margin={"l": 60, "r": 20, "t": 56 + 22 * title.count("<br>"), "b": 55},  # each subtitle line 22 px
    )
    return legend_below(fig, 480 + fig.layout.margin.t)  # a side legend took half a phone's plot


def predicted_vs_measured_figure(points: Sequence[dict[str, Any]], band: float = 0.2) -> go.Figure:
    """Scatter of predicted vs measured forward time (ms), y = x and ±`band` lines; filled markers
    were used for the fit, open ones were held out."""
    fig = go.Figure()
    for i, (b, rows) in enumerate(_by_batch(points).items()):
        colour = PALETTE[i % len(PALETTE)]
        for used, symbol, label in ((True, "circle", "fit"), (False, "circle-open", "held out")):
            part = [r for r in rows if bool(r.get("used_for_fit")) == used]
            if part:
                fig.add_scatter(
                    x=[r["seconds"] * 1e3 for r in part],
                    y=[r["predicted_s"] * 1e3 for r in part],
                    mode="markers",
                    marker={"color": colour, "symbol": symbol, "size": 10, "line": {"width": 2, "color": colour}},
                    name=f"B={b} ({label})",
                    text=[f"S={r['n_tokens']}" for r in part],
                    hovertemplate="%{text}: measured %{x:.1f} ms, predicted %{y:.1f} ms",
                )
    all_ms = [r[k] * 1e3 for r in points for k in ("seconds", "predicted_s")]
    lo, hi = min(all_ms) / 1.5, max(all_ms) * 1.5
    for factor, dash, name in (
        (1.0, "solid", "predicted = measured"),
        (1 + band, "dot", f"±{band:.0%}"),
        (1 - band, "dot", None),
    ):
        fig.add_scatter(
            x=[lo, hi],
            y=[lo * factor, hi * factor],
            mode="lines",
            line={"color": "grey", "dash": dash},
            name=name,
            showlegend=name is not None,
            hoverinfo="skip",
        )
    fig.update_xaxes(type="log", title="measured time per forward (ms)")
    fig.update_yaxes(type="log", title="predicted time per forward (ms)")
    fig.update_layout(title="Roofline fit: predicted vs measured forward time", legend_title="")
    return fig


def budget_bars_figure(budgets: dict[str, dict[int, int]], tolerance: float) -> go.Figure:
    """Almost-free speculation length per batch size, one bar group per hardware (or model)."""
    fig = go.Figure()
    for i, (name, per_b) in enumerate(budgets.items()):
        fig.add_bar(
            x=[f"B={b}" for b in per_b], y=list(per_b.values()), name=name, marker_color=PALETTE[i % len(PALETTE)]
        )
    fig.update_layout(
        title=f"Speculation budget: drafts per sequence that cost ≤ {tolerance:.0%} over one decoding step",
        barmode="group",
        xaxis_title="batch size",
        yaxis_title="speculation length γ",
        legend_title="",
    )
    return fig


def published_speedups_figure(rows: Sequence[dict[str, Any]], band: float = 0.15) -> go.Figure:
    """Per Spec-Bench row: the published speedup (x) and the cost model's prediction from its mean
    accepted tokens (y); one colour per chip and model, filled markers fit the engine, open ones
    were held out; y = x and ±`band` lines. Rows: specviz.cost.published.comparison's speedup rows."""
    from specviz.plots.theme import finish, wrap

    fig = go.Figure()
    groups = sorted({(r["chip"], r["model"]) for r in rows})
    methods = sorted({r["method"] for r in rows})
    symbol = {m: SYMBOLS[i % len(SYMBOLS)] for i, m in enumerate(methods)}  # one marker shape per method: no labels
    for i, (chip, model) in enumerate(groups):  # to overlap where the points crowd near y = x
        colour = PALETTE[i % len(PALETTE)]
        fig.add_scatter(  # the legend's colour key
            x=[None], y=[None], mode="markers", marker={"color": colour, "size": 10}, name=f"{model}, {chip}"
        )
        for use in ("fit", "test"):
            part = [r for r in rows if (r["chip"], r["model"]) == (chip, model) and r["role"] == use]
            if part:
                fig.add_scatter(
                    x=[r["published"] for r in part],
                    y=[r["predicted"] for r in part],
                    mode="markers",
                    hovertext=[f"{r['method']} ({'fit' if use == 'fit' else 'held out'})" for r in part],
                    marker={
                        "color": colour,
                        "symbol": [symbol[r["method"]] + ("" if use == "fit" else "-open") for r in part],
                        "size": 12,
                        "line": {"width": 2, "color": colour},
                    },
                    name=f"{model}, {chip} ({'fit' if use == 'fit' else 'held out'})",
                    showlegend=False,
                    hovertemplate="%{hovertext}: published %{x:.2f}×, predicted %{y:.2f}×<extra></extra>",
                )
    for m in methods:  # the legend's shape key
        fig.add_scatter(
            x=[None], y=[None], mode="markers", marker={"color": "#555555", "symbol": symbol[m], "size": 10}, name=m
        )
    lo, hi = 0.8, max([r[k] for r in rows for k in ("published", "predicted")] + [2.0]) * 1.1
    for factor, dash, name in (
        (1.0, "solid", "predicted = published"),
        (1 + band, "dot", f"±{band:.0%}"),
        (1 - band, "dot", None),
    ):
        fig.add_scatter(
            x=[lo, hi],
            y=[lo * factor, hi * factor],
            mode="lines",
            line={"color": "grey", "dash": dash},
            name=name,
            showlegend=name is not None,
            hoverinfo="skip",
        )
    finish(
        fig,
        "Spec-Bench: published vs predicted",
        "published speedup (× autoregressive)",
        "predicted speedup (× autoregressive)",
        legend="model, GPU",
        subtitle=wrap(
            "predicted from each method's mean accepted tokens and the calibrated HF eager engine; "
            "colour: model and GPU, shape: method, filled: fit, open: held out"
        ),
    )
    return fig
