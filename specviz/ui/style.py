"""The app's look: the Okabe-Ito colour-blind-safe palette, every colour doubled by a non-colour cue.

accepted draft  -> sky-blue tint + solid blue underline
target's token  -> orange tint + orange box border, bold
rejected draft  -> reddish-purple text, struck through, smaller (toggle hides them)
untested draft  -> as rejected, but faded and struck with a dotted line: after an iteration's first
                   rejection the rest of its draft is dropped without a test
"""

from __future__ import annotations

from specviz.plots.theme import OKABE_ITO

KIND_COLOURS = {"accepted": OKABE_ITO["blue"], "target": OKABE_ITO["orange"], "rejected": OKABE_ITO["reddish_purple"]}

CSS = """
.sv-tip { position: fixed; z-index: 1000; max-width: 22rem; white-space: pre-line; pointer-events: none;
          background: #1f2937; color: #fff; padding: 6px 9px; border-radius: 6px; font-size: .85rem;
    line-height: 1.35; }
.sv-tok:focus { outline: 2px solid #0072B2; }
#sv-summary th, #sv-summary th *, #sv-disco-table th, #sv-disco-table th *, #sv-pearl-table th,
#sv-pearl-table th * { word-break: keep-all; overflow-wrap: normal; hyphens: none; }
/* Markdown tables: numbers and headers on one line; a narrow screen scrolls the table sideways
   instead of breaking every cell into one character per line. */
.prose table { display: block; overflow-x: auto; max-width: 100%; }
.prose th, .prose td { white-space: nowrap; word-break: keep-all; }
.prose td:last-child { white-space: normal; min-width: 16rem; }
/* The why table (the Race tab's, and the Theory tab's under "Explain the last race") fits the page with every
   method raced: its headers, methods and families wrap between words (never inside one), its numbers stay whole
   on one line. Unwrapped, fourteen methods pushed "measured speedup" off a 1440 px page. */
:is(#sv-why, #sv-theory-race) table { display: table; width: 100%; }
:is(#sv-why, #sv-theory-race) :is(th, td:nth-child(-n+2)) { white-space: normal; word-break: keep-all;
    overflow-wrap: normal; hyphens: none; }
:is(#sv-why, #sv-theory-race) td:last-child { white-space: nowrap; min-width: 0; }
.sv-step-table { border-collapse: collapse; font-size: .95rem; margin: .4rem 0; }
.sv-step-table td, .sv-step-table th { padding: 3px 8px; border-bottom: 1px solid var(--border-color-primary);
    text-align: left; }
.sv-step-table tr.sv-step-ok td:nth-child(2) { border-bottom: 2px solid #0072B2; }
.sv-step-table tr.sv-step-no td:nth-child(2) { color: #CC79A7; text-decoration: line-through; }
.sv-step-table tr.sv-step-untested { opacity: .55; }
.sv-step-context { white-space: pre-wrap; overflow-wrap: anywhere; }
.sv-step-view:focus { outline: 2px solid #0072B2; outline-offset: 4px; }
.sv-header h1 { margin: 0 0 .2rem 0; font-size: 1.9rem; }
.sv-header p { margin: 0; opacity: .8; font-size: 1.05rem; }
.sv-note { font-size: .95rem; opacity: .85; }
.sv-legend { display: flex; flex-wrap: wrap; gap: .5rem 1.4rem; align-items: center; font-size: 1rem;
    padding: .3rem 0; }
.sv-legend .sv-tok { font-size: 1rem; }
#sv-board { display: grid !important; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 14px; }
#sv-board > * { min-width: 0 !important; width: auto !important; }
.sv-empty { padding: 2rem; text-align: center; opacity: .7; font-size: 1.1rem; }
.sv-tok.sv-future { display: none; }
.sv-panel { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 12px;
            background: var(--block-background-fill); display: flex; flex-direction: column; min-width: 0; }
.sv-panel.sv-running { border-color: #0072B2; box-shadow: 0 0 0 2px rgba(0,114,178,.25); }
.sv-panel-head { display: flex; justify-content: space-between; align-items: baseline; gap: .5rem; }
.sv-panel-head h3 { margin: 0; font-size: 1.15rem; }
.sv-status { font-size: .8rem; padding: 1px 8px; border-radius: 999px; border: 1px solid currentColor;
    white-space: nowrap; }
.sv-status.sv-done { color: #009E73; } .sv-status.sv-running { color: #0072B2; }
.sv-status.sv-queued, .sv-status.sv-waiting { opacity: .6;
    } .sv-status.sv-error, .sv-status.sv-skipped, .sv-status.sv-stopped { color: #D55E00; }
.sv-paper { font-size: .78rem; opacity: .7; margin: 2px 0 6px 0; }
.sv-metrics { display: grid; grid-template-columns: repeat(3, 1fr); gap: 4px 10px; margin: 4px 0 8px 0; }
.sv-metric { display: flex; flex-direction: column; line-height: 1.15; }
.sv-metric b { font-size: 1.15rem; font-variant-numeric: tabular-nums; }
.sv-metric span { font-size: .72rem; opacity: .75; text-transform: uppercase; letter-spacing: .03em; }
.sv-metric span a { color: inherit; text-decoration: underline dotted; }
.sv-glossary dt { font-weight: 600; margin-top: .4em; } .sv-glossary dd { margin: 0 0 0 1em; }
.sv-bar { height: 6px; background: var(--border-color-primary); border-radius: 3px; overflow: hidden;
    margin-bottom: 8px; }
.sv-bar > div { height: 100%; background: #0072B2; }
.sv-text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 1rem; line-height: 1.75;
           white-space: pre-wrap; overflow-wrap: anywhere; max-height: 60vh; overflow-y: auto; }
.sv-message { font-size: .9rem; color: #D55E00; margin: 4px 0; }
.sv-tok { border-radius: 3px; padding: 1px 0; }
.sv-streamed { opacity: .7; }  /* tokens that arrived before their step's counts (a speculative vLLM row) */
.sv-tok.sv-accepted { background: rgba(86,180,233,.28); border-bottom: 2px solid #0072B2; }
.sv-tok.sv-target { background: rgba(230,159,0,.28); outline: 1.5px solid #E69F00; outline-offset: -1px;
    font-weight: 700; }
.sv-tok.sv-rejected { color: #CC79A7; text-decoration: line-through 2px; font-size: .85em; opacity: .9; }
.sv-tok.sv-rejected.sv-untested { text-decoration: line-through dotted 2px; opacity: .5; }
.sv-rejgroup { margin: 0 1px; }
body.sv-hide-rejected .sv-rejgroup { display: none; }
.sv-clock { font-size: 1.1rem; font-variant-numeric: tabular-nums; margin-bottom: 6px; }
.sv-track { display: grid; grid-template-columns: 11rem 1fr 6rem; gap: 4px 10px; align-items: center;
    margin: 6px 0 12px 0; }
.sv-track .sv-bar { margin: 0; height: 12px; border-radius: 6px; }
.sv-track .sv-finish { font-variant-numeric: tabular-nums; font-size: .9rem; }
/* A rejected draft's line break was never written: it would break the code's layout, so a rejected
   token's white space collapses to one space (its tooltip keeps the exact text). */
.sv-rejgroup .sv-tok.sv-rejected { white-space: normal; }
/* A wide table's phone form (specviz.ui.phone): hidden on a wider screen, shown instead of the table on a phone. */
.sv-phone-only { display: none !important; }
@media (max-width: 640px) {
    .sv-phone-only { display: block !important; }
    .sv-desk-only { display: none !important; }
    /* the pivoted table: one row a figure, one column a method; every cell wraps between words, none scrolls */
    .sv-pivot table { display: table; width: 100%; table-layout: fixed; border-collapse: collapse; margin: 0;
        font-size: .75rem; line-height: 1.25; }
    .sv-pivot table th, .sv-pivot table td, .sv-pivot table td:last-child { white-space: normal; min-width: 0;
        word-break: keep-all; overflow-wrap: normal; hyphens: none; padding: 3px 2px; text-align: right;
        vertical-align: top; border-bottom: 1px solid var(--border-color-primary);
        font-variant-numeric: tabular-nums; }
    .sv-pivot table thead th { font-weight: 600; vertical-align: bottom; }
    .sv-pivot table tbody th { text-align: left; font-weight: 400; }
    .sv-pivot table thead th:first-child { width: 35%; }
    .sv-pivot table + table { margin-top: .75rem; }  /* a long race's methods, a few a table (the Race summary) */
    /* the Leaderboard's cards (specviz.ui.leaderboard.phone_view): a method a card, its figures in two columns */
    .sv-lb-phone { font-size: .85rem; line-height: 1.3; }
    .sv-lb-phone p { margin: 0 0 .5rem 0; }
    .sv-lb-cards { list-style: none; margin: 0; padding: 0; }
    .sv-lb-card { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 6px 8px;
        margin: 0 0 8px 0; }
    .sv-lb-head { display: flex; justify-content: space-between; align-items: center; gap: .5rem; font-weight: 600;
        margin-bottom: 4px; }
    .sv-lb-head .sv-lb-cell { padding: 1px 6px; border-radius: 4px; white-space: nowrap; }
    .sv-lb-grid { display: grid; grid-template-columns: 1fr 1fr; gap: 4px; }
    .sv-lb-grid .sv-lb-cell { display: flex; flex-direction: column; padding: 2px 5px; border-radius: 4px;
        font-size: .85rem; min-width: 0; }
    .sv-lb-cell span { opacity: .8; } .sv-lb-cell b { font-variant-numeric: tabular-nums; }
    .sv-lb-phone small { font-size: .78rem; opacity: .8; font-variant-numeric: tabular-nums; }
    .sv-lb-none { opacity: .6; }
    .sv-lb-head small { margin-left: .35rem; font-weight: 400; }
    /* On a phone plotly's toolbar sits over the plot titles; zoom and pan by touch need no toolbar. */
    .js-plotly-plot .modebar-container { display: none !important; }
    /* The first screen holds the prompt, Run race and the colour key: a smaller header and tab row. */
    .sv-header h1 { font-size: 1.35rem; }
    .sv-header p, #sv-pair-status, #sv-pair-status * { font-size: .85rem; line-height: 1.3; }
    .sv-header [data-testid="block-info"] { font-size: .8rem; line-height: 1.25; }
    [role="tablist"] button { font-size: .85rem; padding: 2px 8px; }
    .sv-legend { font-size: .85rem; gap: .15rem .9rem; line-height: 1.35; }
    .sv-legend .sv-tok { font-size: .85rem; }
    /* The why table wraps its cells between words, in a smaller type, rather than run off the right edge. */
    :is(#sv-why, #sv-theory-race) table { font-size: .62rem; line-height: 1.25; }
    :is(#sv-why, #sv-theory-race) :is(th, td, td:last-child) { white-space: normal; word-break: normal;
        overflow-wrap: normal; padding: 2px 1px; }
    /* a number never breaks inside ("0 / . / 8 / 4" down a column): words and numbers stay whole */
    :is(#sv-why, #sv-theory-race) :is(td, th) { overflow-wrap: normal; word-break: keep-all; hyphens: none; }
    /* the family (chain, tree) is named under the table too, with its formula: the phone's width goes to the rest */
    :is(#sv-why, #sv-theory-race) :is(th, td):nth-child(2) { display: none; }
    .prose td:last-child { min-width: 10rem; }
    /* The Theory tab's roofline table: five short columns fit the width when its headers wrap between words
       ("budget γ (≤2% extra)") and its cells pad less; it scrolled sideways with the budget and knee off-screen. */
    #sv-roofline-text table { display: table; width: 100%; font-size: .8rem; line-height: 1.25; }
    #sv-roofline-text th, #sv-roofline-text td, #sv-roofline-text td:last-child { white-space: normal; min-width: 0;
        word-break: keep-all; overflow-wrap: normal; hyphens: none; padding: 3px 4px; vertical-align: bottom;
        font-variant-numeric: tabular-nums; }
    /* PEARL's and DISCO's tables fit a phone: smaller type, cells wrap between words only (never inside a
       word or number: "a c c e p t e d" down a header), so the method column gives way to the numbers. */
    #sv-pearl-table table *, #sv-pearl-steps table *, #sv-disco-table table *, #sv-pearl-table [role=row] *,
    #sv-pearl-steps [role=row] *, #sv-disco-table [role=row] * {
        font-size: .68rem !important; line-height: 1.25; white-space: normal !important; hyphens: none;
        word-break: keep-all !important; overflow-wrap: normal !important; }
    #sv-pearl-table :is(th, td, .body-cell), #sv-pearl-steps :is(th, td, .body-cell),
    #sv-disco-table :is(th, td, .body-cell) { padding: 2px !important; }
    #sv-pearl-table .cell-wrap, #sv-pearl-steps .cell-wrap, #sv-disco-table .cell-wrap { padding: 0 !important; }
    /* the step table's seven columns: a smaller type still, and no column menu (its ⋮ took a word's room) */
    #sv-pearl-steps table *, #sv-pearl-steps [role=row] * { font-size: .62rem !important; }
    /* the step table's token texts have no spaces to wrap at ("·Ifod·theyentsom·6"): they break anywhere, not cut */
    #sv-pearl-steps [role=row] > [role=gridcell]:is(:nth-child(3), :nth-child(5), :nth-child(6)) * {
        overflow-wrap: anywhere !important; word-break: break-all !important; }
    /* a method's name wraps between words; one longer than gradio's column ("Autoregressive") breaks, not hides */
    #sv-disco-table [role=row] > :first-child * { overflow-wrap: anywhere !important; }
    #sv-pearl-table .cell-menu-button, #sv-pearl-steps .cell-menu-button,
    #sv-disco-table .cell-menu-button { display: none !important; }
    /* The animated iteration's lanes, cells and captions need a desktop's width: the phone scrolls it sideways. */
    #sv-step-anim { overflow-x: auto; } #sv-step-anim .js-plotly-plot { min-width: 900px; }
    /* So do the distributions' rows of three to five panels (at 340 px five were ~45 px each, their token
       labels on each other): ~180 px a panel. Their title is in lines that fit 340 px (specviz.plots.step). */
    #sv-step-plot { overflow-x: auto; }
    #sv-step-plot:has(.subplot.x3y3) .js-plotly-plot { min-width: 580px; }
    #sv-step-plot:has(.subplot.x4y4) .js-plotly-plot { min-width: 740px; }
    #sv-step-plot:has(.subplot.x5y5) .js-plotly-plot { min-width: 900px; }
}
"""


def legend_html() -> str:
    """The key to the token colours, drawn with the same classes as the panels."""
    return (
        '<div class="sv-legend">'
        '<span><span class="sv-tok sv-accepted">accepted</span> draft token the target kept (underlined)</span>'
        '<span><span class="sv-tok sv-target">target</span> token the target chose itself: correction, bonus, '
        "or plain next token (boxed)</span>"
        '<span><span class="sv-rejgroup"><span class="sv-tok sv-rejected">rejected</span></span> draft token the '
        "target tested and turned down (struck through)</span>"
        '<span><span class="sv-rejgroup"><span class="sv-tok sv-rejected sv-untested">untested</span></span> draft '
        "token after a rejection: dropped without a test (faded)</span>"
        "<span>Hover or tap a token for its iteration, p(target), q(draft) and the rule that decided it.</span>"
        "</div>"
    )
