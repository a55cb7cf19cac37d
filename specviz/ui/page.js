() => {
  // Installed once per page (launch(js=...)); the server is never asked.
  // 1. Token tooltips that work with a mouse, a keyboard (tab to a token) and a finger (tap it):
  //    one floating box, fixed to the viewport, so no scrolling panel clips it.
  const tip = document.createElement('div');
  tip.className = 'sv-tip';
  tip.hidden = true;
  document.body.appendChild(tip);
  let current = null;
  const show = (el) => {
    current = el;
    tip.textContent = el.dataset.tip;
    tip.hidden = false;
    const r = el.getBoundingClientRect();
    const w = tip.offsetWidth, h = tip.offsetHeight;
    tip.style.left = Math.max(4, Math.min(r.left, window.innerWidth - w - 4)) + 'px';
    tip.style.top = (r.bottom + h + 8 < window.innerHeight ? r.bottom + 6 : Math.max(4, r.top - h - 6)) + 'px';
  };
  const follow = (e) => {
    const t = e.target.closest && e.target.closest('.sv-tok[data-tip]');
    if (t) show(t); else { tip.hidden = true; current = null; }
  };
  document.addEventListener('pointerover', follow);
  document.addEventListener('focusin', follow);
  // a scroll moves the box with its token, and hides it once the token has left the window
  document.addEventListener('scroll', () => {
    if (!current) return;
    const r = current.getBoundingClientRect();
    if (!current.isConnected || r.bottom < 0 || r.top > window.innerHeight) { tip.hidden = true; current = null; }
    else show(current);
  }, true);
  // 2. The step-through: ← and → step when focus is inside its section (not in a text field).
  document.addEventListener('keydown', (e) => {
    const box = document.getElementById('sv-step');
    if (!box || !box.contains(document.activeElement)) return;
    if (['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement.tagName)) return;
    const id = e.key === 'ArrowLeft' ? 'sv-step-prev' : e.key === 'ArrowRight' ? 'sv-step-next' : null;
    if (id) { e.preventDefault(); document.getElementById(id).click(); }
  });
  // 3. A metric's label links to its glossary entry (#sv-term-...): while the glossary is collapsed the
  //    entry is not on the page, so the link opens it first, then scrolls to the entry once drawn.
  document.addEventListener('click', (e) => {
    const link = e.target.closest && e.target.closest('a[href^="#sv-term-"]');
    if (!link) return;
    const id = link.getAttribute('href').slice(1);
    const shown = () => { const el = document.getElementById(id); return el && el.getClientRects().length ? el : null; };
    if (shown()) return;  // open already: the browser follows the link
    e.preventDefault();
    const header = document.querySelector('#sv-glossary button');
    if (header) header.click();
    const start = performance.now();
    const reach = () => {
      const entry = shown();  // drawn on first opening, hidden (not removed) while collapsed
      if (entry) entry.scrollIntoView({ block: 'center' });
      else if (performance.now() - start < 3000) requestAnimationFrame(reach);
    };
    requestAnimationFrame(reach);
  });
  // 4. During a race, keep the running method's panel in view (the smallest scroll that shows it).
  let last = null;
  new MutationObserver(() => {
    const running = document.querySelector('#sv-board .sv-panel.sv-running');
    const name = running && running.dataset.method;
    if (running && name !== last) running.scrollIntoView({ block: 'nearest' });
    last = name;
  }).observe(document.body, { subtree: true, childList: true });
  // 5. A plot follows its box's width, not only the window's: plotly redraws on a window resize, but a
  //    box widened by the style sheet (the step-through's panels keep ~180 px each on a phone) or shown
  //    by a tab leaves it drawn at the old width, its panels slivers, until the window changes.
  const sized = new ResizeObserver((entries) => {
    for (const { target } of entries) {
      const drawn = target._fullLayout && target._fullLayout.width;
      if (drawn && window.Plotly && Math.abs(drawn - target.clientWidth) > 1) window.Plotly.Plots.resize(target);
    }
  });
  const watched = new WeakSet();
  new MutationObserver(() => {
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
      if (!watched.has(plot)) { watched.add(plot); sized.observe(plot); }
    }
  }).observe(document.body, { subtree: true, childList: true });
}
