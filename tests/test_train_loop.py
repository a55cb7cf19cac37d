"""The trainers' shared loop (`specviz.train.loop`): a run stopped after a checkpoint and run again ends
with the weights and the log of a run that was not stopped."""

from __future__ import annotations

import csv

import pytest
import torch

from specviz.train.loop import Checkpoint, CsvLog, LoopConfig, run

COLUMNS = ["step", "seconds", "loss"]


class Stop(Exception):
    pass


def toy_run(folder, steps: int, stop_at: int | None = None) -> torch.Tensor:
    """Least squares on batches that are a function of the step; resumes from `folder`'s checkpoint."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    checkpoint = Checkpoint(folder / "checkpoint.pt")
    state = {"step": 0, "seconds": 0.0}
    saved = checkpoint.load()
    if saved:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state = saved["state"]

    def loss_at(step: int):
        if step == stop_at:
            raise Stop
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(8, 4, generator=gen)  # [8, 4]
        loss = ((model(x)[:, 0] - x.sum(-1)) ** 2).mean()
        return loss, {"loss": loss.item()}

    def save(step: int) -> None:
        checkpoint.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": dict(state)})

    log = CsvLog(folder / "log.csv", COLUMNS, state["step"])
    try:
        run(
            LoopConfig(steps=steps, clip=1.0, save_every=2),
            opt,
            list(model.parameters()),
            loss_at,
            state,
            lr_at=lambda step: 0.05 / (1 + step),
            after_step=lambda step, stats: {"step": step, "seconds": 0, **stats},
            log=log,
            save=save,
        )
    finally:
        log.close()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_stopped_run_resumes_to_the_same_weights_and_log(tmp_path):
    (tmp_path / "once").mkdir()
    (tmp_path / "stopped").mkdir()
    whole = toy_run(tmp_path / "once", 7)
    with pytest.raises(Stop):
        toy_run(tmp_path / "stopped", 7, stop_at=3)  # rows 1-3 written, the checkpoint at step 2
    assert [r["step"] for r in csv.DictReader((tmp_path / "stopped" / "log.csv").open())] == ["1", "2", "3"]
    again = toy_run(tmp_path / "stopped", 7)
    assert torch.equal(whole, again)
    assert (tmp_path / "stopped" / "log.csv").read_text() == (tmp_path / "once" / "log.csv").read_text()


def test_the_log_keeps_the_rows_up_to_the_resumed_step(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"step,seconds,loss\r\n1,0,2.0\r\n2,0,1.5\r\n3,0,1.2\r\n4,0,1.")  # 3 after the checkpoint, 4 torn
    log = CsvLog(path, COLUMNS, resume_step=2)
    log.write({"step": 3, "seconds": 0, "loss": 1.1})
    log.close()
    assert path.read_bytes() == b"step,seconds,loss\r\n1,0,2.0\r\n2,0,1.5\r\n3,0,1.1\r\n"
    CsvLog(path, COLUMNS, resume_step=0).close()  # a fresh run: the header only
    assert path.read_text().splitlines() == [",".join(COLUMNS)]


def test_checkpoints_by_steps_by_time_and_after_the_last_step(tmp_path):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    saves = []

    def go(loop: LoopConfig) -> list[int]:
        saves.clear()
        run(
            loop,
            opt,
            list(model.parameters()),
            lambda step: (model(torch.ones(1, 2)).sum(), {}),
            {"step": 0},
            save=saves.append,
        )
        return list(saves)

    assert go(LoopConfig(steps=5, save_every=2)) == [2, 4, 5]
    assert go(LoopConfig(steps=3)) == [3]
    assert go(LoopConfig(steps=3, save_minutes=0.0)) == [1, 2, 3]
