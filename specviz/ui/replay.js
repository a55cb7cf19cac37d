// Replay race: every finished panel restarts on one clock and reveals its tokens at the moment its
// run produced them (each token span carries data-t, its iteration's end time in seconds).
(speed) => {
  speed = Number(speed) || 1;
  const track = document.querySelector("#sv-replay-track");
  const panels = [...document.querySelectorAll("#sv-board .sv-panel[data-end]")];
  if (window.svReplayFrame) cancelAnimationFrame(window.svReplayFrame);
  document.querySelectorAll("#sv-board .sv-future").forEach((e) => e.classList.remove("sv-future"));
  track.replaceChildren();
  const clock = document.createElement("div");
  clock.className = "sv-clock";
  track.append(clock);
  if (!panels.length) {
    clock.textContent = "Nothing to replay yet: run a race first.";
    return [];
  }
  const end = Math.max(...panels.map((p) => Number(p.dataset.end)));
  const order = [...panels].sort((a, b) => a.dataset.end - b.dataset.end);
  const lanesBox = document.createElement("div");
  lanesBox.className = "sv-track";
  track.append(lanesBox);
  const lanes = panels.map((p) => {
    const toks = [...p.querySelectorAll(".sv-tok[data-t]")].sort((a, b) => a.dataset.t - b.dataset.t);
    toks.forEach((e) => e.classList.add("sv-future"));
    const name = document.createElement("span");
    name.textContent = p.dataset.label;
    const bar = document.createElement("div");
    bar.className = "sv-bar";
    const fill = document.createElement("div");
    bar.append(fill);
    const finish = document.createElement("span");
    finish.className = "sv-finish";
    lanesBox.append(name, bar, finish);
    return { toks, i: 0, shown: 0, end: Number(p.dataset.end), total: Number(p.dataset.tokens),
             max: Number(p.dataset.max), place: order.indexOf(p) + 1, fill, finish };
  });
  const places = ["1st", "2nd", "3rd"];
  const t0 = performance.now();
  const frame = (now) => {
    const t = Math.min(end, ((now - t0) / 1000) * speed);
    clock.textContent = `Replay: t = ${t.toFixed(2)} s` + (speed === 1 ? " (real speed)" : ` (shown at ${speed}× speed)`);
    for (const l of lanes) {
      while (l.i < l.toks.length && Number(l.toks[l.i].dataset.t) <= t) {
        const e = l.toks[l.i++];
        e.classList.remove("sv-future");
        if (!e.classList.contains("sv-rejected")) l.shown += 1;
      }
      l.fill.style.width = `${(100 * l.shown) / Math.max(1, l.max)}%`;
      l.finish.textContent = t >= l.end
        ? `${places[l.place - 1] || l.place + "th"}: finished ${l.end.toFixed(2)} s`
        : `${l.shown} / ${l.total} tokens`;
    }
    if (t < end) window.svReplayFrame = requestAnimationFrame(frame);
  };
  window.svReplayFrame = requestAnimationFrame(frame);
  return [];
}
