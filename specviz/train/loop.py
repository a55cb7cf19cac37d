"""The training loop the trainers share (the draft, DISCO's classifier, the streaming adapter).

A trainer brings its data and loss as `loss_at(step) -> (loss, stats)` and, after each optimiser
step, `after_step(step, stats) -> row` (its own counters, validation and CSV row); the loop runs
every step in one order:

    loss_at -> zero_grad -> backward -> clip -> lr_at -> optimiser step -> after_step -> log -> save

Resuming: the trainer restores its weights, optimiser and counters from `Checkpoint.load()` and
passes its `state` (state["step"]: the first step to run; state["seconds"]: time already spent);
`CsvLog` keeps the log's rows up to that step. Where a trainer's batches are a function of the step
(the draft's are), a run stopped and run again ends with the weights and log of one that was not.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class LoopConfig:
    steps: int  # optimiser steps in total (a resumed run continues up to this)
    clip: float | None = None  # max gradient norm (None: gradients are not clipped)
    save_every: int = 0  # checkpoint every this many steps (0: not by steps)
    save_minutes: float | None = None  # checkpoint when this many minutes passed since the last one (None: not by time)


class Checkpoint:
    """A run's checkpoint file, written whole or not at all (a temporary file, then renamed)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, map_location: str = "cpu", weights_only: bool = True) -> dict | None:
        """The saved payload, or None before the first save."""
        if not self.path.is_file():
            return None
        return torch.load(self.path, map_location=map_location, weights_only=weights_only)

    def save(self, payload: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save(payload, tmp)
        tmp.replace(self.path)


class CsvLog:
    """A CSV training log with a fixed header. Reopened for a run resumed at step s, it keeps the rows
    of steps 1..s and appends: rows written after the last checkpoint by a run that was stopped go."""

    def __init__(self, path: Path, columns: list[str], resume_step: int = 0) -> None:
        lines = []
        if resume_step > 0 and path.is_file():
            with path.open(newline="") as f:
                lines = f.readlines()  # line endings as written
        kept = lines[:1] + [line for line in lines[1:] if self._step(line) <= resume_step]
        if kept != lines:
            path.write_text("".join(kept), newline="")
        self.file = path.open("a" if kept else "w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=columns, extrasaction="ignore")
        if not kept:
            self.writer.writeheader()

    @staticmethod
    def _step(line: str) -> float:
        """The step of a row; a torn row (no line end, no step) counts as after every step."""
        first = line.split(",", 1)[0]
        return int(first) if line.endswith("\n") and first.isdigit() else float("inf")

    def write(self, row: dict) -> None:
        self.writer.writerow(row)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def run(
    loop: LoopConfig,
    opt: torch.optim.Optimizer,
    params: list[torch.Tensor],
    loss_at: Callable[[int], tuple[torch.Tensor, dict]],
    state: dict,
    lr_at: Callable[[int], float] | None = None,
    after_step: Callable[[int, dict], dict | None] | None = None,
    log: CsvLog | None = None,
    save: Callable[[int], None] | None = None,
    progress: str | None = None,
    show: tuple[str, ...] = ("loss",),
) -> dict:
    """Optimiser steps state["step"] .. loop.steps - 1; returns the stats of the last step run ({} if none).

    loss_at(step): the loss of step `step` (0-based) and stats to log; lr_at(step): its learning rate
    (None: the optimiser's own); after_step(steps_done, stats): the CSV row (None: no row); save(steps_done):
    write the checkpoint. `state` ("step", "seconds") is updated before after_step and save see it.
    progress: the progress bar's title (None: no bar), showing the stats named in `show`."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=loop.steps, initial=state["step"], desc=progress, unit="step")
    last_save, started = time.monotonic(), time.monotonic() - state.get("seconds", 0.0)
    stats: dict = {}
    while state["step"] < loop.steps:
        step = state["step"]
        loss, stats = loss_at(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if loop.clip is not None:
            torch.nn.utils.clip_grad_norm_(params, loop.clip)
        if lr_at is not None:
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
        opt.step()
        state["step"] = done = step + 1
        state["seconds"] = time.monotonic() - started
        row = after_step(done, stats) if after_step else None
        if log is not None and row is not None:
            log.write(row)
        if bar is not None:
            bar.set_postfix({k: f"{stats.get(k, 0.0):.3f}" for k in show})
            bar.update()
        due = done == loop.steps or (loop.save_every and done % loop.save_every == 0)
        if save is not None and (
            due or (loop.save_minutes is not None and time.monotonic() - last_save > 60 * loop.save_minutes)
        ):
            save(done)
            last_save = time.monotonic()
    if bar is not None:
        bar.close()
    return stats
