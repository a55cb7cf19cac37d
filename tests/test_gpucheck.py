"""The GPU check's carry plan: the default target's GGUF split over calls, stashed, put back together."""

from __future__ import annotations

import json
import os

import pytest

from specviz import gpucheck


def test_a_gguf_split_over_calls_comes_back_whole(tmp_path, monkeypatch):
    gguf = tmp_path / "target.gguf"
    gguf.write_bytes(os.urandom(3 * 2**20))  # incompressible, as 4-bit weights nearly are
    monkeypatch.setattr("specviz.models.default.gguf_path", lambda: gguf)
    monkeypatch.setattr(gpucheck, "tracked_bytes", lambda repo: 0)
    gpucheck.pack(tmp_path / "carry", tmp_path, calls=3, wheel=False)
    calls = sorted((tmp_path / "carry").iterdir())
    assert [c.name for c in calls] == ["call-1", "call-2", "call-3"]
    assert json.loads((calls[-1] / "gguf.json").read_text())["parts"] == 3
    monkeypatch.setattr(gpucheck, "STASH", tmp_path / "stash")
    for call in calls:  # one `stash` per call, on the same warm machine
        gpucheck.stash(call)
    assert gpucheck.gguf_from_parts(tmp_path / "stash").read_bytes() == gguf.read_bytes()


def test_a_missing_part_is_named_not_guessed(tmp_path, monkeypatch):
    gguf = tmp_path / "target.gguf"
    gguf.write_bytes(os.urandom(2**20))
    monkeypatch.setattr("specviz.models.default.gguf_path", lambda: gguf)
    monkeypatch.setattr(gpucheck, "tracked_bytes", lambda repo: 0)
    gpucheck.pack(tmp_path / "carry", tmp_path, calls=2, wheel=False)
    monkeypatch.setattr(gpucheck, "STASH", tmp_path / "stash")
    gpucheck.stash(tmp_path / "carry" / "call-2")  # call 1's part never arrived
    with pytest.raises(SystemExit, match="1 of the GGUF's 2 parts"):
        gpucheck.gguf_from_parts(tmp_path / "stash")


def test_too_few_calls_for_the_room_beside_the_tree_is_refused(tmp_path, monkeypatch):
    gguf = tmp_path / "target.gguf"
    gguf.write_bytes(b"x")
    monkeypatch.setattr("specviz.models.default.gguf_path", lambda: gguf)
    monkeypatch.setattr(gpucheck, "tracked_bytes", lambda repo: 0)
    monkeypatch.setattr(gpucheck, "CARRY_LIMIT_MIB", 2)  # no room at all beside the 2 MiB margin
    with pytest.raises(SystemExit, match="more than"):
        gpucheck.pack(tmp_path / "carry", tmp_path, calls=1, wheel=False)


def test_the_tracked_tree_leaves_room_for_a_part_in_a_call():
    """The tree travels with every call: at most 50 MB, so a call still carries ~14 MiB of weights (the
    default target's GGUF in six calls: benchmarks/gpu/README.md)."""
    from pathlib import Path

    assert gpucheck.tracked_bytes(Path(__file__).parents[1]) <= 50_000_000
